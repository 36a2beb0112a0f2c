"""Grounded behavior: a real demonstration adapted to a new task instance (MimicGen-style,
extended to a moving object).

MimicGen moves each subtask's end-effector targets into the object's frame, read once when
the subtask starts. On a belt the object keeps moving, so here the approach and grasp are
expressed relative to the object *as the belt carries it*, step by step: the source demo's
object frame advances at the source belt's velocity (measured from the recorded object
poses) until the hand has closed, and the new instance's frame advances at the new belt's
speed, predicted from its spawn pose; both stop when the hand has closed (from then on the
object moves with the hand). The approach waits or is sped up so that the hand meets the
new object where the demo met its own, blending from the demo's own targets (at home) to
the object-relative ones; the carry and release replay the demo's targets (the bins do not
move) with the grasp's offset blended out. Hand joint targets are replayed as recorded;
noise goes on the arm's targets only.

Round objects look the same turned about the vertical, so the hand is not turned with them;
a box is the same turned by half a turn (a quarter for a square one), so the hand turns by
the smallest equivalent difference.
"""

from __future__ import annotations

import numpy as np
from scipy.spatial.transform import Rotation

from r2s2r.behavior.demo import CLOSED, SourceDemo
from r2s2r.behavior.instance import TaskInstance, object_pose_on_belt
from r2s2r.geometry.trajectory import min_jerk
from r2s2r.sim.embodiment import TCP_POSE_DIM
from r2s2r.spec import Spec, TaskSpec, WorldSpec
from r2s2r.spec.base import NonNeg, Share
from r2s2r.spec.world import ARM_SIDES


class AdaptError(ValueError):
    """A demo that cannot be adapted to an instance (the attempt fails with this reason)."""


class AdaptCfg(Spec):
    """How demos are adapted."""

    # Per-step Gaussian noise on the active arm's target position (m) and orientation (rad).
    noise_pos_m: NonNeg = 0.002
    noise_rot_rad: NonNeg = 0.01
    # Seconds over which the grasp's offset is blended out at the start of the carry.
    blend_s: NonNeg = 0.8
    # The fastest the approach may be compressed to, as a share of the demo's.
    min_approach_share: Share = 0.5
    # The most the hand is turned (about the vertical) to follow the object's turn.
    max_turn_deg: NonNeg = 30.0


DEFAULT_ADAPT = AdaptCfg()


def symmetry_period(task: TaskSpec, object_name: str) -> float:
    """The turn about the vertical (rad) that leaves the object looking the same; 0 for
    objects that look the same at any turn."""
    obj = task.object_named(object_name)
    if obj.shape in ("box", "ellipsoid"):
        return np.pi / 2 if np.isclose(obj.size[0], obj.size[1]) else np.pi
    return 0.0


def yaw_of(quat: np.ndarray) -> float:
    """The turn about the vertical of an orientation (w, x, y, z)."""
    forward = Rotation.from_quat(quat, scalar_first=True).apply([1.0, 0.0, 0.0])
    return float(np.arctan2(forward[1], forward[0]))


def equivalent_turn(delta: float, period: float) -> float:
    """``delta`` reduced to the smallest equivalent turn under a symmetry ``period``."""
    if period <= 0.0:
        return 0.0
    return float((delta + period / 2) % period - period / 2)


def belt_velocity(demo: SourceDemo) -> np.ndarray:
    """The source object's horizontal velocity (3,) on the belt before the hand reached it,
    measured from its recorded poses over the second before the grasp subtask."""
    g0 = demo.starts["grasp"]
    back = min(g0, demo.fps)
    if back < 5:
        raise AdaptError(f"{demo.name}: too short a lead-in to measure the belt's motion")
    d = demo.objects[g0, :3] - demo.objects[g0 - back, :3]
    d[2] = 0.0
    return d * demo.fps / back


def hold_frame(demo: SourceDemo) -> int:
    """The frame by which the hand has closed on the object: the demo's closure first reaches
    its peak level after it starts closing."""
    c = demo.closure()
    close = int(np.flatnonzero(c > CLOSED)[0])
    peak = c[close : demo.starts["carry"]].max()
    return close + int(np.flatnonzero(c[close:] >= 0.95 * peak)[0])


def instance_of(demo: SourceDemo, task: TaskSpec, world: WorldSpec) -> TaskInstance:
    """The task instance the demo itself performed, as seen in ``world``: its object, belt
    speed, and the spawn pose that puts the object where the demo had it when the grasp
    started."""
    v = belt_velocity(demo)
    t0 = demo.starts["grasp"] / demo.fps
    speed = float(np.linalg.norm(v))
    probe = TaskInstance(demo.object_name, 0.0, 0.0, speed)
    on_belt = object_pose_on_belt(task, world, probe, np.array([t0]))[0]
    heading = np.radians(world.layout.belt.yaw_deg)
    across = np.array([-np.sin(heading), np.cos(heading), 0.0])
    lateral = float((demo.objects[demo.starts["grasp"], :3] - on_belt[:3]) @ across)
    yaw = yaw_of(demo.objects[demo.starts["grasp"], 3:]) - heading
    return TaskInstance(demo.object_name, lateral, float(np.angle(np.exp(1j * yaw))), speed)


def adapt(
    demo: SourceDemo,
    instance: TaskInstance,
    task: TaskSpec,
    world: WorldSpec,
    rng: np.random.Generator | None = None,
    cfg: AdaptCfg = DEFAULT_ADAPT,
) -> np.ndarray:
    """The demo's actions (T', 54) adapted to ``instance`` in ``world`` (with noise drawn
    from ``rng``; none without one). Raises ``AdaptError`` when the new object would reach
    the meeting point sooner than the demo's approach can be sped up."""
    if instance.object_name != demo.object_name:
        raise AdaptError(
            f"{demo.name} handles the {demo.object_name}, not the {instance.object_name}"
        )
    fps = demo.fps
    g0, c0 = demo.starts["grasp"], demo.starts["carry"]
    hold = hold_frame(demo)
    v_src = belt_velocity(demo)
    src_grasp = demo.objects[g0]

    # When the new object reaches where the demo's object was when the grasp started.
    probe = object_pose_on_belt(task, world, instance, np.array([0.0, 1.0]))
    v_new = probe[1, :3] - probe[0, :3]
    along = v_new / max(np.linalg.norm(v_new), 1e-9)
    meet = float((src_grasp[:3] - probe[0, :3]) @ along) / max(instance.belt_speed, 1e-9)
    j0 = int(round(meet * fps))
    if j0 < cfg.min_approach_share * g0:
        raise AdaptError(
            f"{demo.name}: the object would reach the grasp in {meet:.2f} s, sooner than the "
            f"demo's {g0 / fps:.2f} s approach can be sped up"
        )
    # Source frame (float) for every new frame: wait (or speed up) during the approach,
    # then one to one.
    if j0 >= g0:
        approach = np.concatenate([np.zeros(j0 - g0), np.arange(g0, dtype=float)])
    else:
        approach = np.linspace(0.0, g0, j0, endpoint=False)
    k = np.concatenate([approach, np.arange(g0, demo.length, dtype=float)])
    ki = np.minimum(np.round(k).astype(int), demo.length - 1)
    n = len(k)
    t_new = np.arange(n) / fps
    j_hold = j0 + (hold - g0)

    # The object frames: the source's advancing at its belt's velocity and the new one
    # along the new belt, both stopping once the hand has closed.
    k_frame = np.minimum(k, hold)
    src_pos = src_grasp[:3] + np.outer((k_frame - g0) / fps, v_src)
    new_pos = object_pose_on_belt(task, world, instance, np.minimum(t_new, j_hold / fps))[:, :3]
    period = symmetry_period(task, instance.object_name)
    new_yaw = yaw_of(object_pose_on_belt(task, world, instance, np.zeros(1))[0, 3:])
    delta = equivalent_turn(new_yaw - yaw_of(src_grasp[3:]), period)
    # The hand turns with the object only as far as the wrist comfortably goes; the wide
    # grasps (claw, power wrap) still span a box turned further.
    limit = np.radians(cfg.max_turn_deg)
    turn = Rotation.from_euler("z", float(np.clip(delta, -limit, limit)))

    arm = demo.arm
    per_arm = demo.actions.shape[1] // len(ARM_SIDES)
    a = slice(arm * per_arm, arm * per_arm + TCP_POSE_DIM)
    src = demo.actions[ki]
    src_p, src_r = src[:, a][:, :3], Rotation.from_quat(src[:, a][:, 3:], scalar_first=True)
    # The hand's place relative to the object grows with it (the demo's object has its spec
    # size).
    rel_p = new_pos + turn.apply((src_p - src_pos) * instance.scale)
    rel_r = turn * src_r

    # Approach: from the demo's own targets (home) to the object-relative ones; grasp:
    # object-relative; carry and release: the demo's targets with the grasp's offset
    # blended out.
    w = np.ones(n)
    w[:j0] = [min_jerk(u) for u in approach / max(g0, 1)]
    j_carry = j0 + (c0 - g0)
    blend = max(1, int(round(cfg.blend_s * fps)))
    after = np.arange(n) >= j_carry
    w[after] = [1.0 - min_jerk(u) for u in (np.arange(n)[after] - j_carry) / blend]
    # Every step moves the demo's target by weight w towards a target: the object-relative
    # one until the carry, then by the offset the grasp ended with (the rotation part along
    # the geodesic, as a slerp).
    last = j_carry - 1
    offset_r = (rel_r[last] * src_r[last].inv()).as_rotvec()
    toward_p = np.where(after[:, None], rel_p[last] - src_p[last], rel_p - src_p)
    toward_r = np.where(after[:, None], offset_r, (rel_r * src_r.inv()).as_rotvec())
    pos = src_p + w[:, None] * toward_p
    rots = Rotation.from_rotvec(w[:, None] * toward_r) * src_r
    if rng is not None:
        pos = pos + rng.normal(0.0, cfg.noise_pos_m, pos.shape)
        rots = Rotation.from_rotvec(rng.normal(0.0, cfg.noise_rot_rad, (n, 3))) * rots
    out = src.copy()
    out[:, a] = np.concatenate([pos, rots.as_quat(scalar_first=True)], axis=1)
    return out
