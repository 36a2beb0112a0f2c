"""Primitives as meshes, for renders: the same shapes in fewer draw calls.

MuJoCo's rasterizer draws a capsule as three display lists (an open cylinder and two
hemispheres) and a cylinder as one built from three parts; a mesh geom is a single list. On a
software rasterizer a render pass costs per draw call (about 5 us) and per triangle (0.13 to
0.2 us, however few pixels it covers: a scene of 60 boxes at 64 px, one-off), and the twin's
arms and hands are 54 capsules and cylinders drawn in four passes per view (the lit pass,
the shadow map, the shadowed pass and the motion blur's id pass). ``mesh_primitives``
replaces them, in a spec about to be compiled, by meshes of the same size and tessellation
with exact normals: the geoms keep their ids, bodies, poses and materials, so the model's
state (qpos, mocap) renders unchanged, and the views differ from the primitives' by shading
at the tessellation's seams (PSNR above 50 dB). For small views ``tessellation_for`` and
``match_quality`` draw the arms, hands, boxes and floor with fewer triangles. The mesh
geoms are for renders only: their inertia is the mesh's, not the primitive's, so a model
built this way is never the one that is simulated.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import mujoco
import numpy as np

# (radius, z, normal's radial part, normal's axial part) of one ring of a surface of revolution.
Ring = tuple[float, float, float, float]


def _revolve(rings: list[Ring], slices: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Vertices (V, 3), normals (V, 3) and triangles (F, 3) of ``rings`` (bottom to top)
    swept about z in ``slices`` steps; a ring of radius 0 closes the surface at a pole.

    Each band between two rings is a quad per slice, split in two triangles; next to a pole
    one of the two has two corners at the pole and no area, so it is left out (it would
    draw nothing, yet costs as much as any triangle on a software rasterizer)."""
    angles = 2.0 * np.pi * np.arange(slices) / slices
    cos, sin = np.cos(angles), np.sin(angles)
    r, z, nr, nz = (np.asarray(col, np.float64)[:, None] for col in zip(*rings, strict=True))
    shape = (len(rings), slices)
    verts = np.stack([r * cos, r * sin, np.broadcast_to(z, shape)], -1)
    normals = np.stack([nr * cos, nr * sin, np.broadcast_to(nz, shape)], -1)
    index = np.arange(len(rings) * slices).reshape(len(rings), slices)
    pole = r[:, 0] == 0.0
    a, b = index[:-1], np.roll(index[:-1], -1, axis=1)
    c, d = index[1:], np.roll(index[1:], -1, axis=1)
    # (a, b, d) has a and b on the lower ring, (a, d, c) has d and c on the upper one.
    lower, upper = ~pole[:-1], ~pole[1:]
    faces = np.concatenate(
        [
            np.stack([a[lower], b[lower], d[lower]], -1).reshape(-1, 3),
            np.stack([a[upper], d[upper], c[upper]], -1).reshape(-1, 3),
        ]
    )
    return verts.reshape(-1, 3), normals.reshape(-1, 3), faces


def capsule_mesh(
    radius: float, half_length: float, slices: int, stacks: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A capsule along z: two hemispheres of ``stacks // 2`` rings each around a cylinder."""
    half = max(2, stacks // 2)
    rings: list[Ring] = []
    for sign, phis in ((-1.0, np.linspace(-np.pi / 2, 0.0, half + 1)),
                       (1.0, np.linspace(0.0, np.pi / 2, half + 1))):  # fmt: skip
        for phi in phis:
            # The poles exactly on the axis (cos(pi / 2) is 6e-17 in floating point).
            c = 0.0 if abs(phi) == np.pi / 2 else float(np.cos(phi))
            s = float(np.sin(phi))
            rings.append((radius * c, sign * half_length + radius * s, c, s))
    return _revolve(rings, slices)


def ellipsoid_mesh(
    semi_axes: np.ndarray, slices: int, stacks: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """An ellipsoid with ``semi_axes`` (x, y, z): a unit sphere of ``stacks`` + 1 rings
    stretched along each axis (normals follow the stretch: divided by it, then unit)."""
    rings: list[Ring] = []
    for phi in np.linspace(-np.pi / 2, np.pi / 2, max(2, stacks) + 1):
        c = 0.0 if abs(phi) == np.pi / 2 else float(np.cos(phi))
        rings.append((c, float(np.sin(phi)), c, float(np.sin(phi))))
    verts, normals, faces = _revolve(rings, slices)
    axes = np.asarray(semi_axes, dtype=np.float64)
    normals = normals / axes
    normals /= np.linalg.norm(normals, axis=1, keepdims=True)
    return verts * axes, normals, faces


def cylinder_mesh(
    radius: float, half_length: float, slices: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A closed cylinder along z: its side and two flat caps, each with its own normals."""
    parts = [
        _revolve([(0.0, -half_length, 0.0, -1.0), (radius, -half_length, 0.0, -1.0)], slices),
        _revolve([(radius, -half_length, 1.0, 0.0), (radius, half_length, 1.0, 0.0)], slices),
        _revolve([(radius, half_length, 0.0, 1.0), (0.0, half_length, 0.0, 1.0)], slices),
    ]
    offsets = np.cumsum([0] + [len(v) for v, _, _ in parts[:-1]])
    return (
        np.concatenate([v for v, _, _ in parts]),
        np.concatenate([n for _, n, _ in parts]),
        np.concatenate([f + off for (_, _, f), off in zip(parts, offsets, strict=True)]),
    )


# The delivered image size (pixels, larger side) at which curved surfaces are drawn with the
# spec's own tessellation (``visual.quality``): the observation size the cell is specified at.
DETAIL_SIZE = 256
# The fewest segments ``tessellation_for`` gives a surface around and along its axis.
MIN_SLICES, MIN_STACKS = 6, 4


def detail_scale(size: int) -> float:
    """How much finer than at ``DETAIL_SIZE`` images of ``size`` pixels (larger side) need a
    surface to be drawn: the square root of the size ratio, never above 1."""
    if size <= 0:
        raise ValueError(f"size must be a positive number of pixels, got {size!r}")
    return min(1.0, math.sqrt(size / DETAIL_SIZE))


def tessellation_for(size: int, slices: int, stacks: int) -> tuple[int, int]:
    """(slices, stacks) for curved surfaces drawn in images of ``size`` pixels, given the
    spec's ``slices`` and ``stacks`` at ``DETAIL_SIZE``.

    A circle of n segments strays from the true curve by about r (pi / n)^2 / 2 (the facets'
    sagitta), which a view shows at a scale proportional to its size; segments in proportion
    to the square root of the size (``detail_scale``) keep that error, in pixels, what it is
    at ``DETAIL_SIZE``. Never more than the spec's, never fewer than ``MIN_SLICES`` /
    ``MIN_STACKS``."""
    scale = detail_scale(size)
    return (
        min(slices, max(MIN_SLICES, round(slices * scale))),
        min(stacks, max(MIN_STACKS, round(stacks * scale))),
    )


def mesh_primitives(
    spec: mujoco.MjSpec,
    keep: Callable[[str], bool] = lambda body: False,
    size: int | None = None,
) -> int:
    """Turn every capsule and cylinder geom of ``spec`` into a mesh of the same shape, except
    those on bodies whose name ``keep`` accepts (objects the cell rescales by their size).
    The tessellation is the spec's own (``visual.quality``), or with ``size`` (the delivered
    images' larger side) the one ``tessellation_for`` gives for it. Returns how many were
    turned."""
    model = spec.compile()  # Sizes, poses and ids as compiled (fromto resolved).
    slices = int(spec.visual.quality.numslices)
    stacks = int(spec.visual.quality.numstacks)
    if size is not None:
        slices, stacks = tessellation_for(size, slices, stacks)
    capsule, cylinder = int(mujoco.mjtGeom.mjGEOM_CAPSULE), int(mujoco.mjtGeom.mjGEOM_CYLINDER)
    turned = 0
    for geom in spec.geoms:
        gid = geom.id
        kind = int(model.geom_type[gid])
        if kind not in (capsule, cylinder) or keep(model.body(model.geom_bodyid[gid]).name):
            continue
        radius, half_length = (float(x) for x in model.geom_size[gid][:2])
        if kind == capsule:
            verts, normals, faces = capsule_mesh(radius, half_length, slices, stacks)
        else:
            verts, normals, faces = cylinder_mesh(radius, half_length, slices)
        name = f"r2s2r_lean_{gid}"
        spec.add_mesh(
            name=name,
            uservert=verts.ravel().tolist(),
            usernormal=normals.ravel().tolist(),
            userface=faces.ravel().tolist(),
        )
        geom.fromto = [np.nan] * 6
        geom.pos = model.geom_pos[gid].copy()
        geom.quat = model.geom_quat[gid].copy()
        geom.type = mujoco.mjtGeom.mjGEOM_MESH
        geom.meshname = name
        turned += 1
    return turned


def match_quality(spec: mujoco.MjSpec, size: int) -> None:
    """Draw the flat faces MuJoCo subdivides itself (each box face in ``numquads`` squared
    quads, a plane in a grid) for images of ``size`` pixels (larger side), in a spec about to
    be compiled for renders: below ``DETAIL_SIZE``, fewer quads per face side and wider grid
    cells in proportion to ``detail_scale``, as ``tessellation_for`` does for curved
    surfaces. The quads and the grid carry only the per-vertex lighting across a flat
    face (its specular highlight), never an outline.

    The spheres, cylinders and ellipsoids MuJoCo draws (``numslices``, ``numstacks``: the
    objects, which ``mesh_primitives`` keeps) keep the spec's tessellation: the objects are
    what a policy handles, and a wrist view brings one close enough to fill a third of a
    64 px image, where a puck of 6 sides reads as a hexagon."""
    scale = detail_scale(size)
    quality = spec.visual.quality
    quality.numquads = max(1, round(int(quality.numquads) * scale))
    for geom in spec.geoms:
        if geom.type == mujoco.mjtGeom.mjGEOM_PLANE and geom.size[2] > 0:
            # A plane's third size is the spacing of its grid (visual only).
            geom.size = [geom.size[0], geom.size[1], geom.size[2] / scale]


# The geom group that holds what a lean render leaves out: MuJoCo's default visualisation
# options (``MjvOption().geomgroup``) draw groups 0-2 only.
HIDDEN_GROUP = 5
# The body that carries the merged static geoms, last in the model so every other geom and
# body keeps its id.
MERGED_BODY = "r2s2r_lean_static"


def box_mesh(half: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A box of half-sizes ``half``: four vertices per face, each with the face's normal."""
    verts: list[np.ndarray] = []
    normals: list[np.ndarray] = []
    faces: list[list[int]] = []
    for axis in range(3):
        u, v = (axis + 1) % 3, (axis + 2) % 3  # u x v = +axis
        for sign in (-1.0, 1.0):
            normal = np.zeros(3)
            normal[axis] = sign
            corners = []
            # Counter-clockwise seen from outside: reversed on the face whose normal is -axis.
            order = ((-1, -1), (1, -1), (1, 1), (-1, 1))
            for su, sv in order if sign > 0 else order[::-1]:
                corner = np.zeros(3)
                corner[axis], corner[u], corner[v] = sign * half[axis], su * half[u], sv * half[v]
                corners.append(corner)
            base = len(verts)
            verts += corners
            normals += [normal] * 4
            faces += [[base, base + 1, base + 2], [base, base + 2, base + 3]]
    return np.array(verts), np.array(normals), np.array(faces)


def _geom_mesh(
    model: mujoco.MjModel, gid: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(vertices, normals, faces, face normals) of a compiled box or mesh geom in its frame."""
    if int(model.geom_type[gid]) == int(mujoco.mjtGeom.mjGEOM_BOX):
        verts, normals, faces = box_mesh(model.geom_size[gid])
        return verts, normals, faces, faces
    m = model.geom_dataid[gid]
    v0, nv = model.mesh_vertadr[m], model.mesh_vertnum[m]
    n0, nn = model.mesh_normaladr[m], model.mesh_normalnum[m]
    f0, nf = model.mesh_faceadr[m], model.mesh_facenum[m]
    return (
        model.mesh_vert[v0 : v0 + nv].astype(np.float64),
        model.mesh_normal[n0 : n0 + nn].astype(np.float64),
        model.mesh_face[f0 : f0 + nf],
        model.mesh_facenormal[f0 : f0 + nf],
    )


def merge_static(spec: mujoco.MjSpec, keep: Callable[[str], bool] = lambda body: False) -> int:
    """Draw the geoms fixed to the world (bins, belt frame, table, stands, arm bases) as one
    mesh per colour: in a spec about to be compiled, the visible boxes and meshes without a
    material on bodies welded to the world (except bodies ``keep`` accepts) with two or more
    of one colour become one mesh geom each, in world coordinates with their normals, on a
    body added last (``MERGED_BODY``); the originals move to ``HIDDEN_GROUP``. Every geom and
    body keeps its id and the state layout is unchanged (the new geoms come after all the
    others). For renders only, like ``mesh_primitives``. Returns how many geoms were merged."""
    model = spec.compile()
    data = mujoco.MjData(model)
    mujoco.mj_kinematics(model, data)
    shapes = (int(mujoco.mjtGeom.mjGEOM_BOX), int(mujoco.mjtGeom.mjGEOM_MESH))
    by_colour: dict[tuple[float, ...], list[int]] = {}
    for gid in range(model.ngeom):
        body = int(model.geom_bodyid[gid])
        if model.body_weldid[body] != 0 or keep(model.body(body).name):
            continue
        if int(model.geom_type[gid]) not in shapes or model.geom_matid[gid] >= 0:
            continue
        if model.geom_group[gid] > 2 or model.geom_rgba[gid][3] < 1.0:
            continue
        by_colour.setdefault(tuple(float(c) for c in model.geom_rgba[gid]), []).append(gid)
    groups = [(rgba, gids) for rgba, gids in by_colour.items() if len(gids) > 1]
    if not groups:
        return 0
    geoms = {geom.id: geom for geom in spec.geoms}
    holder = spec.worldbody.add_body(name=MERGED_BODY)
    merged = 0
    for k, (rgba, gids) in enumerate(groups):
        verts, normals, faces, face_normals = [], [], [], []
        nv = nn = 0
        for gid in gids:
            v, n, f, fn = _geom_mesh(model, gid)
            rot = data.geom_xmat[gid].reshape(3, 3)
            verts.append(v @ rot.T + data.geom_xpos[gid])
            normals.append(n @ rot.T)
            faces.append(f + nv)
            face_normals.append(fn + nn)
            nv, nn = nv + len(v), nn + len(n)
            geoms[gid].group = HIDDEN_GROUP
        name = f"{MERGED_BODY}_{k}"
        spec.add_mesh(
            name=name,
            uservert=np.concatenate(verts).ravel().tolist(),
            usernormal=np.concatenate(normals).ravel().tolist(),
            userface=np.concatenate(faces).ravel().tolist(),
            userfacenormal=np.concatenate(face_normals).ravel().tolist(),
        )
        holder.add_geom(
            name=name,
            type=mujoco.mjtGeom.mjGEOM_MESH,
            meshname=name,
            rgba=list(rgba),
            group=int(model.geom_group[gids[0]]),
            contype=0,
            conaffinity=0,
        )
        merged += len(gids)
    return merged


class StoredObjects:
    """Free bodies resting where the model starts them (the cell's objects waiting in storage,
    far from every camera): ``hide`` moves their geoms to ``HIDDEN_GROUP`` for a render and
    brings back those that have left it."""

    # How far (m, horizontally) from its starting place a free body counts as stored.
    RADIUS_M = 0.05

    def __init__(self, model: mujoco.MjModel) -> None:
        free = np.flatnonzero(model.jnt_type == int(mujoco.mjtJoint.mjJNT_FREE))
        self.adr = model.jnt_qposadr[free]
        self.home = np.stack([model.qpos0[a : a + 2] for a in self.adr]) if len(free) else None
        bodies = model.jnt_bodyid[free]
        self.geoms = [np.flatnonzero(model.geom_bodyid == b) for b in bodies]
        self.groups = [model.geom_group[g].copy() for g in self.geoms]

    def hide(self, model: mujoco.MjModel, qpos: np.ndarray) -> int:
        """Hide the stored bodies' geoms in ``model`` for ``qpos`` (show the others as
        built); returns how many bodies are hidden."""
        if self.home is None:
            return 0
        xy = np.stack([qpos[a : a + 2] for a in self.adr])
        stored = np.linalg.norm(xy - self.home, axis=1) < self.RADIUS_M
        for gids, groups, hidden in zip(self.geoms, self.groups, stored, strict=True):
            model.geom_group[gids] = HIDDEN_GROUP if hidden else groups
        return int(stored.sum())
