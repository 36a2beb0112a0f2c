"""Primitives as meshes, for renders: the same shapes in fewer draw calls.

MuJoCo's rasterizer draws a capsule as three display lists (an open cylinder and two
hemispheres) and a cylinder as one built from three parts; a mesh geom is a single list. On a
software rasterizer the cost of a render pass is mostly per draw call, and the twin's arms and
hands are 54 capsules and cylinders drawn in four passes per view (the lit pass, the shadow
map, the shadowed pass and the motion blur's id pass). ``mesh_primitives`` replaces them, in a
spec about to be compiled, by meshes of the same size and tessellation with exact normals: the
geoms keep their ids, bodies, poses and materials, so the model's state (qpos, mocap) renders
unchanged, and the views differ from the primitives' by shading at the tessellation's seams
(PSNR above 50 dB). The mesh geoms are for renders only: their inertia is the mesh's, not the
primitive's, so a model built this way is never the one that is simulated.
"""

from __future__ import annotations

from collections.abc import Callable

import mujoco
import numpy as np

# (radius, z, normal's radial part, normal's axial part) of one ring of a surface of revolution.
Ring = tuple[float, float, float, float]


def _revolve(rings: list[Ring], slices: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Vertices (V, 3), normals (V, 3) and triangles (F, 3) of ``rings`` (bottom to top)
    swept about z in ``slices`` steps; a ring of radius 0 closes the surface at a pole."""
    angles = 2.0 * np.pi * np.arange(slices) / slices
    cos, sin = np.cos(angles), np.sin(angles)
    r, z, nr, nz = (np.asarray(col, np.float64)[:, None] for col in zip(*rings, strict=True))
    shape = (len(rings), slices)
    verts = np.stack([r * cos, r * sin, np.broadcast_to(z, shape)], -1)
    normals = np.stack([nr * cos, nr * sin, np.broadcast_to(nz, shape)], -1)
    index = np.arange(len(rings) * slices).reshape(len(rings), slices)
    a, b = index[:-1], np.roll(index[:-1], -1, axis=1)
    c, d = index[1:], np.roll(index[1:], -1, axis=1)
    faces = np.concatenate(
        [np.stack([a, b, d], -1).reshape(-1, 3), np.stack([a, d, c], -1).reshape(-1, 3)]
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
            c, s = float(np.cos(phi)), float(np.sin(phi))
            rings.append((radius * c, sign * half_length + radius * s, c, s))
    return _revolve(rings, slices)


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


def mesh_primitives(spec: mujoco.MjSpec, keep: Callable[[str], bool] = lambda body: False) -> int:
    """Turn every capsule and cylinder geom of ``spec`` into a mesh of the same shape, except
    those on bodies whose name ``keep`` accepts (objects the cell rescales by their size).
    The tessellation is the spec's own (``visual.quality``). Returns how many were turned."""
    model = spec.compile()  # Sizes, poses and ids as compiled (fromto resolved).
    slices = int(spec.visual.quality.numslices)
    stacks = int(spec.visual.quality.numstacks)
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
