"""The cell in cuRobo's terms (r2s2r.behavior.curobo), checked against the MuJoCo cell on CPU:
the arm's URDF against the cell's kinematics, the collision spheres against the geoms they
cover, the world's cuboids against the fixed parts, and the whole against
``ArmKinematics.collides``. cuRobo itself needs a GPU; only its absence is tested here."""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET

import mujoco
import numpy as np
import pytest

from r2s2r.behavior import curobo, curobo_config
from r2s2r.behavior.kinematics import ArmKinematics
from r2s2r.sim import robots
from r2s2r.sim.cell import Cell
from r2s2r.sim.closures import CLAW_SHUT, POWER_GRASP
from r2s2r.sim.physics import MujocoPhysics
from r2s2r.sim.scene import build_scene
from r2s2r.spec import TaskSpec, WorldSpec
from r2s2r.spec.world import ARM_SIDES

# MuJoCo's URDF import keeps fixed links (flange, hand, TCP) as bodies of their own with
# fusestatic off, and takes massless links with a lower bound on mass.
MJ_COMPILER = '<compiler fusestatic="false" boundmass="1" boundinertia="1"/>'
OVERSHOOT = 0.015  # CuroboCfg's default, and what the test holds the spheres to.
# Fields of cuRobo v0.7's CudaRobotGeneratorConfig and CSpaceConfig (cuda_robot_generator.py,
# cuda_robot_model/types.py): RobotConfig.from_dict passes the dicts to them as keywords.
KINEMATICS_KEYS = {
    "base_link", "ee_link", "link_names", "collision_link_names", "collision_spheres",
    "collision_sphere_buffer", "compute_jacobian", "self_collision_buffer",
    "self_collision_ignore", "debug", "use_global_cumul", "asset_root_path", "mesh_link_names",
    "load_link_names_with_mesh", "urdf_path", "usd_path", "usd_robot_root", "isaac_usd_path",
    "use_usd_kinematics", "usd_flip_joints", "usd_flip_joint_limits", "lock_joints",
    "extra_links", "add_object_link", "use_external_assets", "extra_collision_spheres", "cspace",
}  # fmt: skip
CSPACE_KEYS = {
    "joint_names", "retract_config", "cspace_distance_weight", "null_space_weight",
    "max_acceleration", "max_jerk", "velocity_scale", "acceleration_scale", "jerk_scale",
}  # fmt: skip


@pytest.fixture(scope="module")
def cell(task: TaskSpec, world: WorldSpec) -> tuple[mujoco.MjModel, np.ndarray]:
    scene = build_scene(task, world)
    return scene.model, Cell(scene, MujocoPhysics(scene.model)).home_qpos


def _random_q(rng: np.random.Generator) -> np.ndarray:
    lo, hi = robots.RIZON4S_JOINT_RANGES.T
    return rng.uniform(lo, hi)


def _unit(rng: np.random.Generator, n: int) -> np.ndarray:
    v = rng.normal(size=(n, 3))
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def _surface(model: mujoco.MjModel, g: int, rng: np.random.Generator, n: int) -> np.ndarray:
    """Points (n, 3) on geom ``g``'s surface, in its frame (corners and ends included)."""
    kind, size = model.geom_type[g], model.geom_size[g]
    if kind == mujoco.mjtGeom.mjGEOM_CAPSULE:
        r, h = size[0], size[1]
        v = _unit(rng, n)
        side = rng.random(n) < 0.6  # On the cylinder, else on a cap.
        ring = v * [1, 1, 0]
        ring /= np.maximum(np.linalg.norm(ring, axis=1, keepdims=True), 1e-12)
        cyl = r * ring + np.outer(rng.uniform(-h, h, n), [0, 0, 1])
        cap = r * v + np.outer(np.sign(v[:, 2]) * h, [0, 0, 1])
        return np.where(side[:, None], cyl, cap)
    if kind == mujoco.mjtGeom.mjGEOM_BOX:
        pts = rng.uniform(-1, 1, (n, 3))
        axis = rng.integers(0, 3, n)
        pts[np.arange(n), axis] = np.sign(rng.uniform(-1, 1, n))
        corners = np.array(np.meshgrid(*[[-1, 1]] * 3)).reshape(3, -1).T
        return np.vstack([pts, corners]) * size
    if kind == mujoco.mjtGeom.mjGEOM_CYLINDER:
        r, h = size[0], size[1]
        a = rng.uniform(0, 2 * np.pi, n)
        rad = np.where(rng.random(n) < 0.5, r, r * np.sqrt(rng.random(n)))
        z = np.where(rad == r, rng.uniform(-h, h, n), np.sign(rng.uniform(-1, 1, n)) * h)
        return np.stack([rad * np.cos(a), rad * np.sin(a), z], axis=1)
    if kind == mujoco.mjtGeom.mjGEOM_PLANE:  # A half-space: its surface and just below.
        return np.column_stack([rng.uniform(-1, 1, (n, 2)) * size[:2], -rng.uniform(0, 0.05, n)])
    if kind == mujoco.mjtGeom.mjGEOM_SPHERE:
        return size[0] * _unit(rng, n)
    if kind == mujoco.mjtGeom.mjGEOM_ELLIPSOID:
        return size * _unit(rng, n)
    if kind == mujoco.mjtGeom.mjGEOM_MESH:  # Its vertices and points on its faces.
        mesh = model.geom_dataid[g]
        verts = model.mesh_vert[
            model.mesh_vertadr[mesh] : model.mesh_vertadr[mesh] + model.mesh_vertnum[mesh]
        ]
        faces = model.mesh_face[
            model.mesh_faceadr[mesh] : model.mesh_faceadr[mesh] + model.mesh_facenum[mesh]
        ]
        w = rng.dirichlet(np.ones(3), n)
        tri = verts[faces[rng.integers(0, len(faces), n)]]
        return np.vstack([verts, np.einsum("nk,nkj->nj", w, tri)])
    raise AssertionError(f"no surface sampler for geom type {kind}")


def _distance(model: mujoco.MjModel, g: int, local: np.ndarray) -> np.ndarray:
    """Distance (m) of points (n, 3) in geom ``g``'s frame from the geom (0 inside)."""
    kind, size = model.geom_type[g], model.geom_size[g]
    if kind == mujoco.mjtGeom.mjGEOM_CAPSULE:
        axis = np.column_stack([np.zeros((len(local), 2)), np.clip(local[:, 2], -size[1], size[1])])
        return np.maximum(np.linalg.norm(local - axis, axis=1) - size[0], 0.0)
    if kind == mujoco.mjtGeom.mjGEOM_SPHERE:
        return np.maximum(np.linalg.norm(local, axis=1) - size[0], 0.0)
    assert kind == mujoco.mjtGeom.mjGEOM_BOX
    return np.linalg.norm(np.maximum(np.abs(local) - size, 0.0), axis=1)


def _world(data: mujoco.MjData, g: int, local: np.ndarray) -> np.ndarray:
    return local @ data.geom_xmat[g].reshape(3, 3).T + data.geom_xpos[g]


def _placed_spheres(
    data: mujoco.MjData, model: mujoco.MjModel, side: str, spheres: dict
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Each collision link's spheres in the cell frame at ``data``'s state: the hand link's
    frame is the flange's."""
    out = {}
    for link, items in spheres.items():
        body = model.body(link if not link.endswith("_hand") else f"{side}_flange").id
        c = np.array([s["center"] for s in items]).reshape(-1, 3)
        out[link] = (
            c @ data.xmat[body].reshape(3, 3).T + data.xpos[body],
            np.array([s["radius"] for s in items]),
        )
    return out


def _link_of(model: mujoco.MjModel, side: str, g: int) -> str:
    name = model.body(model.geom_bodyid[g]).name
    return name if name.startswith(f"{side}_link") else f"{side}_hand"


def _collidable(model: mujoco.MjModel, geoms: np.ndarray) -> np.ndarray:
    return geoms[(model.geom_contype[geoms] | model.geom_conaffinity[geoms]) != 0]


def _in_cuboids(points: np.ndarray, cuboids: dict, pad: np.ndarray | float = 0.0) -> np.ndarray:
    """Distance of each point (n, 3) to the nearest cuboid, minus ``pad`` (n,): <= 0 where a
    point (a sphere of radius pad) reaches into some cuboid."""
    best = np.full(len(points), np.inf)
    for c in cuboids.values():
        pose = np.asarray(c["pose"])
        rot = np.zeros(9)
        mujoco.mju_quat2Mat(rot, pose[3:])
        local = (points - pose[:3]) @ rot.reshape(3, 3)
        out = np.maximum(np.abs(local) - np.asarray(c["dims"]) / 2, 0.0)
        best = np.minimum(best, np.linalg.norm(out, axis=1))
    return best - pad


# ------------------------------------------------------------------------------------ URDF
@pytest.mark.parametrize("side", ARM_SIDES)
def test_urdf_frames_are_the_cell_arms(cell: tuple[mujoco.MjModel, np.ndarray], side: str) -> None:
    model, home = cell
    urdf = curobo_config.cell_arm_urdf(model, side)
    limits = ET.fromstring(urdf).findall("joint/limit")
    np.testing.assert_allclose(
        [float(x.get("velocity", 0)) for x in limits], robots.RIZON4S_VEL_LIMITS
    )
    loaded = mujoco.MjModel.from_xml_string(
        urdf.replace("</robot>", f"<mujoco>{MJ_COMPILER}</mujoco></robot>")
    )
    assert loaded.nq == 7
    np.testing.assert_allclose(loaded.jnt_range, robots.RIZON4S_JOINT_RANGES)
    kin = ArmKinematics(model, side, home)
    ours, theirs = mujoco.MjData(model), mujoco.MjData(loaded)
    ours.qpos[:] = home
    pairs = [(f"{side}_base", f"{side}_base")] + [
        (f"{side}_link{i}", f"{side}_link{i}") for i in range(1, 8)
    ]
    pairs += [(f"{side}_flange", f"{side}_flange"), (f"{side}_flange", f"{side}_hand")]
    tcp = model.site(f"{side}_tcp").id
    rng = np.random.default_rng(0)
    for _ in range(20):
        q = _random_q(rng)
        ours.qpos[kin.qadr] = q
        theirs.qpos[:] = q
        mujoco.mj_kinematics(model, ours)
        mujoco.mj_kinematics(loaded, theirs)
        for a, b in pairs:
            np.testing.assert_allclose(theirs.body(b).xpos, ours.body(a).xpos, atol=1e-6)
            np.testing.assert_allclose(theirs.body(b).xmat, ours.body(a).xmat, atol=1e-6)
        np.testing.assert_allclose(theirs.body(f"{side}_tcp").xpos, ours.site_xpos[tcp], atol=1e-6)
        np.testing.assert_allclose(theirs.body(f"{side}_tcp").xmat, ours.site_xmat[tcp], atol=1e-6)
        # The TCP cuRobo plans for is the planner's.
        pose = kin.fk(q)
        quat = theirs.body(f"{side}_tcp").xquat
        np.testing.assert_allclose(theirs.body(f"{side}_tcp").xpos, pose[:3], atol=1e-6)
        assert abs(abs(float(quat @ pose[3:])) - 1.0) < 1e-9


def test_rpy_round_trips_including_gimbal_lock() -> None:
    rng = np.random.default_rng(1)
    quats = [*rng.normal(size=(20, 4)), [np.cos(np.pi / 4), 0, np.sin(np.pi / 4), 0]]
    for quat in quats:
        quat = np.asarray(quat) / np.linalg.norm(quat)
        back = robots.rpy_to_quat(list(curobo_config._rpy(quat)))
        assert abs(abs(float(back @ quat)) - 1.0) < 1e-9


# ------------------------------------------------------------------------ collision spheres
# Every shape MuJoCo has but height fields, on a turned, offset and sliding body.
SHAPES = """
<mujoco>
  <compiler angle="radian"/>
  <asset><mesh name="wedge" vertex="0 0 0  0.12 0 0  0 0.05 0  0.02 0.01 0.08"/></asset>
  <worldbody>
    <body name="shapes" pos="0.3 -0.2 0.5" euler="0.3 -0.5 1.1">
      <joint name="slide" type="slide" axis="1 1 0"/>
      <geom name="thin" type="box" size="0.001 0.05 0.03" pos="0.1 0 0" euler="0 0.7 0"/>
      <geom name="cube" type="box" size="0.1 0.1 0.1"/>
      <geom name="palm" type="box" size="0.045 0.015 0.05"/>
      <geom name="rod" type="capsule" size="0.02 0.15" euler="1 0 0"/>
      <geom name="stub" type="capsule" size="0.06 0.001"/>
      <geom name="ball" type="sphere" size="0.03" pos="0 0.2 0"/>
      <geom name="can" type="cylinder" size="0.03 0.05"/>
      <geom name="egg" type="ellipsoid" size="0.02 0.03 0.05"/>
      <geom name="wedge" type="mesh" mesh="wedge" pos="0.1 0 0.3" euler="0.2 0.4 0"/>
    </body>
    <geom name="ground" type="plane" size="1 1 0.1"/>
  </worldbody>
</mujoco>
"""
HUGGED = ("thin", "cube", "palm", "rod", "stub", "ball")  # Covered within OVERSHOOT.


def test_each_shape_is_covered_by_spheres_and_boxes() -> None:
    model = mujoco.MjModel.from_xml_string(SHAPES)
    rng = np.random.default_rng(5)
    ground = model.geom("ground").id
    for g in range(model.ngeom):
        if g == ground:
            with pytest.raises(ValueError, match="plane"):
                curobo_config._geom_spheres(model, g, OVERSHOOT)
            continue
        centres, radii = curobo_config._geom_spheres(model, g, OVERSHOOT)
        points = _surface(model, g, rng, 2000)
        gap = np.linalg.norm(points[:, None] - centres[None], axis=2) - radii
        # (A micrometre for float32 mesh vertices on the spheres' surface.)
        assert gap.min(axis=1).max() <= 1e-6, f"{model.geom(g).name} is not covered"
        if model.geom(g).name in HUGGED:
            shell = (centres[:, None] + radii[:, None, None] * _unit(rng, 300)).reshape(-1, 3)
            assert _distance(model, g, shell).max() <= OVERSHOOT + 1e-9, model.geom(g).name
    assert len(curobo_config._geom_spheres(model, model.geom("palm").id, OVERSHOOT)[0]) <= 9
    # Boxes hold each shape wherever it slides within the sweep, and fit boxes exactly.
    data = mujoco.MjData(model)
    mujoco.mj_kinematics(model, data)
    sweep = 0.04
    held = {g: curobo_config._cuboid(model, data, g, sweep) for g in range(model.ngeom)}
    exact = {g: curobo_config._cuboid(model, data, g, 0.0) for g in range(model.ngeom)}
    for g in range(model.ngeom):
        if model.geom_type[g] == mujoco.mjtGeom.mjGEOM_BOX:
            np.testing.assert_allclose(exact[g]["dims"], 2 * model.geom_size[g])
    for shift in (-sweep, 0.0, sweep):
        data.qpos[0] = shift
        mujoco.mj_kinematics(model, data)
        for g in range(model.ngeom):
            points = _world(data, g, _surface(model, g, rng, 500))
            assert _in_cuboids(points, {"": held[g]}).max() <= 1e-6, model.geom(g).name
            if shift == 0.0:
                assert _in_cuboids(points, {"": exact[g]}).max() <= 1e-6, model.geom(g).name
    # The ground is a half-space: its box lies under the plane.
    assert _in_cuboids(np.array([[0.5, 0.5, 1e-3]]), {"": exact[ground]})[0] > 0


@pytest.mark.parametrize(
    ("side", "hand"),
    [("left", POWER_GRASP), ("right", POWER_GRASP), ("left", CLAW_SHUT), ("right", np.zeros(20))],
)
def test_spheres_cover_the_arm_and_hand_and_hug_them(
    cell: tuple[mujoco.MjModel, np.ndarray], side: str, hand: np.ndarray
) -> None:
    model, home = cell
    spheres = curobo_config.collision_spheres(model, side, hand, OVERSHOOT)
    assert set(spheres) == set(curobo_config.collision_links(side))
    assert 30 <= sum(len(s) for s in spheres.values()) <= 70  # Tens, as cuRobo's arms.
    kin = ArmKinematics(model, side, home)
    geoms = _collidable(model, np.concatenate([kin.link_geoms, kin.hand_geoms]))
    # The arm and hand collide with capsules and boxes only.
    capsule, box = mujoco.mjtGeom.mjGEOM_CAPSULE, mujoco.mjtGeom.mjGEOM_BOX
    assert {int(t) for t in model.geom_type[geoms]} == {int(capsule), int(box)}
    data = mujoco.MjData(model)
    data.qpos[:] = home
    data.qpos[kin.hand_qadr] = hand
    rng = np.random.default_rng(2)
    for _ in range(5):
        data.qpos[kin.qadr] = _random_q(rng)
        mujoco.mj_kinematics(model, data)
        placed = _placed_spheres(data, model, side, spheres)
        for g in geoms:
            centres, radii = placed[_link_of(model, side, g)]
            points = _world(data, g, _surface(model, g, rng, 300))
            gap = np.linalg.norm(points[:, None] - centres[None], axis=2) - radii
            assert gap.min(axis=1).max() <= 1e-9, f"{model.geom(g).name} is not covered"
        # No sphere reaches more than OVERSHOOT beyond its link's geoms.
        for link, (centres, radii) in placed.items():
            mine = [g for g in geoms if _link_of(model, side, g) == link]
            for c, r in zip(centres, radii, strict=True):
                points = c + r * _unit(rng, 400)
                far = np.min(
                    [
                        _distance(
                            model,
                            g,
                            (points - data.geom_xpos[g]) @ data.geom_xmat[g].reshape(3, 3),
                        )
                        for g in mine
                    ],
                    axis=0,
                )
                assert far.max() <= OVERSHOOT + 1e-9, (
                    f"a {link} sphere overshoots {far.max():.4f} m"
                )


# ---------------------------------------------------------------------------------- world
@pytest.mark.parametrize("side", ARM_SIDES)
def test_cuboids_hold_every_fixed_part(cell: tuple[mujoco.MjModel, np.ndarray], side: str) -> None:
    model, home = cell
    travel = 0.025
    cuboids = curobo_config.world_cuboids(model, side, home, sweep_m=travel)["cuboid"]
    kin = ArmKinematics(model, side, home)
    fixed = _collidable(model, kin.fixed_geoms)
    assert len(cuboids) == len(fixed)
    other = "right" if side == "left" else "left"
    names = {model.geom(g).name for g in fixed}
    assert {"table", "belt", "floor", f"{other}_link4_geom", f"{other}_hand_palm_geom"} <= names
    assert all(0 < d < 100 for c in cuboids.values() for d in c["dims"])  # The floor's too.
    belt = model.joint("belt").qposadr[0]
    rng = np.random.default_rng(3)
    for shift in (-travel, 0.0, travel):  # The belt slab anywhere in its travel.
        data = mujoco.MjData(model)
        data.qpos[:] = home
        data.qpos[belt] = shift
        mujoco.mj_kinematics(model, data)
        for g in fixed:
            points = _world(data, g, _surface(model, g, rng, 200))
            assert _in_cuboids(points, cuboids).max() <= 1e-9, f"{model.geom(g).name} sticks out"


@pytest.mark.parametrize("side", ARM_SIDES)
def test_sphere_model_hits_a_cuboid_whenever_the_cell_collides(
    cell: tuple[mujoco.MjModel, np.ndarray], side: str
) -> None:
    model, home = cell
    hand = POWER_GRASP
    spheres = curobo_config.collision_spheres(model, side, hand, OVERSHOOT)
    cuboids = curobo_config.world_cuboids(model, side, home)["cuboid"]
    kin = ArmKinematics(model, side, home)

    def reaches_a_cuboid(q: np.ndarray) -> bool:
        kin.collides(q, hand, itself=False)  # Poses the arm in kin.data.
        placed = _placed_spheres(kin.data, model, side, spheres)
        centres = np.vstack([c for c, _ in placed.values()])
        radii = np.concatenate([r for _, r in placed.values()])
        return bool((_in_cuboids(centres, cuboids, radii) < 0).any())

    rng = np.random.default_rng(4)
    free, hit, flagged = [], [], 0
    for _ in range(600):
        q = _random_q(rng)
        touches = reaches_a_cuboid(q)
        flagged += touches
        # Against the cell (cuRobo checks the arm against itself with its own spheres).
        if kin.collides(q, hand, itself=False):
            assert touches, f"q={q.round(3)} collides in MuJoCo but not in cuRobo's model"
            hit.append(q)
        else:
            free.append(q)
    assert len(hit) >= 60  # Enough collisions for the check to mean something,
    assert flagged <= 1.5 * len(hit)  # and the model is conservative, not everywhere.
    # The hardest cases: just past first contact, between a free and a colliding pose.
    for a, b in zip(free[:30], hit[:30], strict=False):
        lo, hi = 0.0, 1.0
        for _ in range(16):
            mid = (lo + hi) / 2
            inside = kin.collides(a + (b - a) * mid, hand, itself=False)
            lo, hi = (lo, mid) if inside else (mid, hi)
        assert reaches_a_cuboid(a + (b - a) * hi)


# --------------------------------------------------------------------------- robot config
def test_robot_config_is_curobos_and_home_is_a_valid_start(
    cell: tuple[mujoco.MjModel, np.ndarray], world: WorldSpec
) -> None:
    model, home = cell
    side = "right"
    retract = np.asarray(world.controller.home)
    cfg = curobo_config.robot_config(model, side, POWER_GRASP, "right.urdf", retract)
    assert set(cfg) == {"kinematics"}
    kin = cfg["kinematics"]
    assert set(kin) <= KINEMATICS_KEYS and set(kin["cspace"]) <= CSPACE_KEYS
    space = kin["cspace"]
    for key in ("max_acceleration", "max_jerk", "retract_config"):
        assert len(space[key]) == 7 and all(type(x) is float for x in space[key])
    # Slowed down by vel_share, the plan keeps to the CPU planner's limits.
    limits = curobo_config.CuroboCfg()
    assert space["max_acceleration"][0] * limits.vel_share**2 == pytest.approx(limits.max_acc)
    assert space["max_jerk"][0] * limits.vel_share**3 == pytest.approx(limits.max_jerk)
    urdf = ET.fromstring(curobo_config.cell_arm_urdf(model, side))
    links = {link.get("name") for link in urdf.findall("link")}
    revolute = [j.get("name") for j in urdf.findall("joint") if j.get("type") == "revolute"]
    assert space["joint_names"] == revolute
    assert kin["base_link"] == "world" and kin["ee_link"] == f"{side}_tcp"
    assert set(kin["collision_link_names"]) == set(kin["collision_spheres"]) <= links
    ignore = kin["self_collision_ignore"]
    assert set(kin["self_collision_buffer"]) == set(kin["collision_link_names"])
    chain = curobo_config.collision_links(side)
    for a, b in zip(chain, chain[1:], strict=False):
        assert b in ignore[a]  # Neighbours share a joint: their spheres always overlap.
    # cuRobo rejects a start in self-collision; its warmup starts at the retract (home).
    data = mujoco.MjData(model)
    data.qpos[:] = home
    data.qpos[ArmKinematics(model, side, home).hand_qadr] = POWER_GRASP
    mujoco.mj_kinematics(model, data)
    placed = _placed_spheres(data, model, side, kin["collision_spheres"])
    for i, a in enumerate(chain):
        for b in chain[i + 1 :]:
            if b in ignore.get(a, []):
                continue
            (ca, ra), (cb, rb) = placed[a], placed[b]
            gap = np.linalg.norm(ca[:, None] - cb[None], axis=2) - ra[:, None] - rb[None]
            assert gap.min() > 0, f"{a} and {b} overlap at home"


def test_curobo_carry_without_curobo_says_how_to_install_it(
    monkeypatch: pytest.MonkeyPatch, task: TaskSpec, world: WorldSpec
) -> None:
    scene = build_scene(task, world)
    monkeypatch.setitem(sys.modules, "curobo", None)  # As on a machine without cuRobo.
    with pytest.raises(ImportError, match="cuRobo") as err:
        curobo.CuroboCarry(Cell(scene, MujocoPhysics(scene.model)))
    assert curobo.CUROBO_INSTALL in str(err.value)
    assert "pip install git+https://github.com/NVlabs/curobo.git" in str(err.value)


def test_generate_with_the_curobo_planner_needs_curobo_and_planned_routes(
    tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from typer.testing import CliRunner

    from r2s2r.cli import app

    monkeypatch.setitem(sys.modules, "curobo", None)
    runner = CliRunner()
    out = tmp_path / "g"
    args = ["generate", "--out", str(out), "--episodes", "1", "--image-size", "0"]
    result = runner.invoke(app, [*args, "--behavior", "planned", "--planner", "curobo"])
    assert result.exit_code != 0
    message = str(result.exception)
    assert "cuRobo" in message and curobo.CUROBO_INSTALL in message
    assert not (out / "generation" / "attempts.jsonl").exists()
    result = runner.invoke(app, [*args, "--behavior", "adapted", "--planner", "curobo"])
    assert result.exit_code != 0
    assert "needs --behavior planned" in str(result.exception)
