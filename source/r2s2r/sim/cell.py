"""The pick-and-sort cell's episode logic, batched over N worlds and shared by all envs.

It turns actions into actuator controls, runs the physics backend, spawns objects on the
belt on schedule, keeps the belt within its travel, and judges every object.
"""

from __future__ import annotations

from dataclasses import dataclass

import mujoco
import numpy as np
from scipy.spatial.transform import Rotation

from r2s2r.geometry.rotations import mat_to_quat, quat_conj, quat_mul, quat_to_mat, quat_to_rotvec
from r2s2r.sim import kernels
from r2s2r.sim.controller import MotionGenerator
from r2s2r.sim.embodiment import Embodiment
from r2s2r.sim.physics import Physics
from r2s2r.sim.progress import ProgressProbe, ProgressReading
from r2s2r.sim.scene import CART_AXES, OBJECT_PREFIX, Scene, storage_pos

PENDING, SORTED, WRONG_BIN, DROPPED = (
    kernels.PENDING,
    kernels.SORTED,
    kernels.WRONG_BIN,
    kernels.DROPPED,
)
STATUS_NAMES = ("pending", "sorted", "wrong_bin", "dropped")
_XYZ, _QUAT = np.arange(3), 3 + np.arange(4)


def _adr(model: mujoco.MjModel, names: list[str], field: str) -> np.ndarray:
    return np.array([getattr(model.joint(n), field)[0] for n in names])


@dataclass(frozen=True)
class CellIndex:
    """Addresses of everything the episode logic reads or writes (S arms, J joints per arm,
    H joints per hand, from the embodiment)."""

    arm_qadr: np.ndarray  # (S, J)
    hand_qadr: np.ndarray  # (S, H)
    belt_qadr: int
    obj_qadr: np.ndarray  # (K,) free-joint qpos address per object (7 values each)
    obj_vadr: np.ndarray  # (K,)
    cart_ctrl: np.ndarray  # (S, 6)
    joint_ctrl: np.ndarray  # (S, J)
    hand_ctrl: np.ndarray  # (S, H)
    belt_ctrl: int
    tcp_sites: np.ndarray  # (S,)
    ref_pos: np.ndarray  # (S, 3) world-fixed Cartesian reference frames
    ref_quat: np.ndarray  # (S, 4)

    @classmethod
    def build(
        cls, model: mujoco.MjModel, embodiment: Embodiment, object_names: list[str]
    ) -> CellIndex:
        def act(name: str) -> int:
            return int(model.actuator(name).id)

        sides = embodiment.sides
        arm = [list(embodiment.arm_joint_names(s)) for s in sides]
        hand = [list(embodiment.hand_joint_names(s)) for s in sides]
        ref_ids = [model.site(f"{s}_ref").id for s in sides]
        return cls(
            arm_qadr=np.array([_adr(model, a, "qposadr") for a in arm]),
            hand_qadr=np.array([_adr(model, h, "qposadr") for h in hand]),
            belt_qadr=int(model.joint("belt").qposadr[0]),
            obj_qadr=_adr(model, [f"{OBJECT_PREFIX}{n}" for n in object_names], "qposadr"),
            obj_vadr=_adr(model, [f"{OBJECT_PREFIX}{n}" for n in object_names], "dofadr"),
            cart_ctrl=np.array([[act(f"{s}_tcp_{a}") for a in CART_AXES] for s in sides]),
            joint_ctrl=np.array([[act(f"{j}_pos") for j in a] for a in arm]),
            hand_ctrl=np.array([[act(f"{j}_act") for j in h] for h in hand]),
            belt_ctrl=act("belt"),
            tcp_sites=np.array([model.site(t).id for t in embodiment.tcp_sites]),
            ref_pos=model.site_pos[ref_ids].copy(),
            ref_quat=model.site_quat[ref_ids].copy(),
        )


class Cell:
    """Episode state and stepping for N worlds of one scene on one physics backend, in the
    action mode the scene was built with.

    Episodes follow the scene's task: objects drawn from its ``spawn_pool``, the belt at
    its ``fixed_speed`` or at one drawn from ``speed_range`` (a condition is applied to the
    specs before the scene is built, ``r2s2r.spec.conditions``).
    """

    def __init__(self, scene: Scene, physics: Physics) -> None:
        self.scene, self.physics = scene, physics
        self.action_mode = scene.action_mode
        self.embodiment = emb = scene.embodiment
        task, world = scene.task, scene.world
        model = scene.model
        self.n = physics.num_worlds
        self._all_worlds = np.arange(self.n)
        self.objects = task.all_objects
        self.idx = CellIndex.build(model, emb, [o.name for o in self.objects])
        self._ref_mat = quat_to_mat(self.idx.ref_quat)
        self._ref_conj = quat_conj(self.idx.ref_quat)
        self.dt = 1.0 / task.control_hz
        self._action_dim = emb.action_dim(self.action_mode)
        self._arm_lo, self._arm_hi = emb.arm_limits[:, 0], emb.arm_limits[:, 1]
        self._hand_lo, self._hand_hi = emb.hand_limits[:, 0], emb.hand_limits[:, 1]
        # The most an arm joint target may move in one control step (joint action mode).
        self._arm_step = emb.arm_velocity_limits * self.dt
        self.nsub = max(1, round(self.dt / model.opt.timestep))
        self.max_steps = int(round(task.episode_s * task.control_hz))
        self.motion = MotionGenerator(world.controller, self.n, self.dt)
        self.pool = np.array([self.objects.index(o) for o in task.spawn_pool])
        self.bin_names = [b.name for b in task.bins]
        self.assigned_bin = np.array(
            [self.bin_names.index(task.bin_for(o).name) for o in self.objects]
        )
        self._bins = _BinGeometry.build(scene)
        belt = world.layout.belt
        # An object below this height, outside every bin, has been dropped.
        self._drop_line = belt.pos[2] - task.success.drop_depth
        self._half_period = belt.texture_period / 2
        self._belt_centre = np.asarray(belt.pos)
        self._belt_inv_rot = Rotation.from_euler("z", -belt.yaw_deg, degrees=True).as_matrix()
        self._belt_half = np.array([belt.length / 2, belt.width / 2])
        # An object resting below this height off the belt lies on the table or the floor.
        self._rest_line = world.layout.table_height + 0.15
        self._belt_adr = np.array([self.idx.belt_qadr])
        self._home_qpos, self._home_ctrl, self._home_tcp = self._home_state()
        s = task.spawn.count
        self.chosen = np.zeros((self.n, s), dtype=int)
        self._index_objects()
        self.spawn_time = task.spawn.first_at_s + task.spawn.interval_s * np.arange(s)
        self.spawn_xy = np.zeros((self.n, s, 2))
        self.spawn_yaw = np.zeros((self.n, s))
        # Per spawn slot, the factor its object is scaled by (1: its spec size).
        self.scale = np.ones((self.n, s))
        self._geometry = _ObjectGeometry.of(scene.model, self.objects)
        # Built on first use (only evaluation reads an episode's progress).
        self._probe: ProgressProbe | None = None
        self.spawned = np.zeros((self.n, s), dtype=bool)
        self.status = np.zeros((self.n, s), dtype=int)
        self.belt_speed = np.zeros(self.n)
        self.steps = np.zeros(self.n, dtype=int)
        # Worlds whose physics diverged this episode (their outcome means nothing).
        self.unstable = np.zeros(self.n, dtype=bool)
        self.ctrl = np.tile(self._home_ctrl, (self.n, 1))

    # ----------------------------------------------------------------- episodes
    @property
    def home_qpos(self) -> np.ndarray:
        """The state (nq,) episodes start from: arms home, objects stored away."""
        return self._home_qpos.copy()

    def _home_state(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """qpos, ctrl and TCP command (pos, rotvec per arm, (2, 6)) of the home posture."""
        model, world = self.scene.model, self.scene.world
        data = mujoco.MjData(model)
        for i, obj in enumerate(self.objects):
            adr = self.idx.obj_qadr[i]
            data.qpos[adr : adr + 3] = storage_pos(i) + [0.0, 0.0, obj.rest_height]
            data.qpos[adr + 3 : adr + 7] = [1.0, 0.0, 0.0, 0.0]
        data.qpos[self.idx.arm_qadr] = world.controller.home
        # The hands open (every joint at zero, or at the end of its range nearest zero).
        open_hand = self.embodiment.hand_open
        data.qpos[self.idx.hand_qadr] = open_hand
        mujoco.mj_kinematics(model, data)
        tcp = self._tcp_in_ref(
            data.site_xpos[self.idx.tcp_sites][None],
            data.site_xmat[self.idx.tcp_sites].reshape(1, 2, 3, 3),
        )[0]
        ctrl = np.zeros(model.nu)
        ctrl[self.idx.cart_ctrl] = tcp
        ctrl[self.idx.joint_ctrl] = world.controller.home
        ctrl[self.idx.hand_ctrl] = open_hand
        return data.qpos.copy(), ctrl, tcp

    def reset(
        self,
        worlds: np.ndarray,
        rngs: list[np.random.Generator],
        objects: list[str] | None = None,
        spawn: tuple[float, np.ndarray, np.ndarray] | None = None,
        scales: np.ndarray | None = None,
    ) -> None:
        """Start new episodes in ``worlds`` (indices), each drawn from its own generator.

        ``objects`` names the objects to spawn (one per spawn slot, in every reset world)
        instead of drawing them from the task's spawn pool; ``spawn`` (belt speed, lateral
        offsets (S,), yaws (S,)) replaces the drawn belt speed and spawn poses likewise;
        ``scales`` (S,) scales each slot's object uniformly (size, mass and inertia), which
        only a one-world CPU backend can do, since it changes the model.
        """
        task = self.scene.task
        belt = task.belt
        fixed = belt.fixed_speed
        for w, rng in zip(worlds, rngs, strict=True):
            self.belt_speed[w] = fixed if fixed is not None else rng.uniform(*belt.speed_range)
            self.chosen[w] = rng.choice(
                self.pool, size=len(self.spawn_time), replace=len(self.pool) < len(self.spawn_time)
            )
            self.spawn_xy[w, :, 0] = task.spawn.upstream_offset
            self.spawn_xy[w, :, 1] = rng.uniform(-1, 1, len(self.spawn_time)) * (
                task.spawn.lateral_jitter
            )
            self.spawn_yaw[w] = (
                rng.uniform(-np.pi, np.pi, len(self.spawn_time)) if task.spawn.random_yaw else 0.0
            )
        if objects is not None:
            names = [o.name for o in self.objects]
            unknown = [o for o in objects if o not in names]
            if unknown or len(objects) != len(self.spawn_time):
                raise ValueError(
                    f"objects: expected {len(self.spawn_time)} names from {names}, got {objects}"
                )
            self.chosen[worlds] = [names.index(o) for o in objects]
        if spawn is not None:
            speed, lateral, yaw = spawn
            self.belt_speed[worlds] = speed
            self.spawn_xy[worlds, :, 1] = lateral
            self.spawn_yaw[worlds] = yaw
        self._scale_objects(worlds, scales)
        k = len(worlds)
        self.spawned[worlds] = False
        self.status[worlds] = PENDING
        self.steps[worlds] = 0
        self.unstable[worlds] = False
        self.ctrl[worlds] = self._home_ctrl
        self.ctrl[worlds, self.idx.belt_ctrl] = self.belt_speed[worlds]
        qpos = np.tile(self._home_qpos, (k, 1))
        qvel = np.zeros((k, self.scene.model.nv))
        self._index_objects()
        self.physics.reset(qpos, qvel, self.ctrl[worlds], worlds)
        self.motion.reset(worlds, np.broadcast_to(self._home_tcp, (k, 2, 6)))
        self._spawn_due(worlds)

    # ----------------------------------------------------------------- stepping
    def step(self, action: np.ndarray) -> None:
        """Apply one control-rate action (N, action_dim) to every world and advance the
        physics."""
        a = np.ascontiguousarray(action, dtype=np.float64)
        if a.size != self.n * self._action_dim:
            raise ValueError(
                f"action: expected {self._action_dim} numbers per world ({self.n} worlds), "
                f"got an array of shape {a.shape}"
            )
        a = a.reshape(self.n, self._action_dim)
        if not np.isfinite(a).all():
            raise ValueError("action: contains NaN or infinite values")
        idx = self.idx
        if self.action_mode == "tcp":
            m = self.motion
            bad = kernels.tcp_action_to_ctrl(
                a,
                idx.ref_pos,
                self._ref_mat,
                self._ref_conj,
                m.pose,
                m.vel,
                m.limits,
                self.dt,
                self._hand_lo,
                self._hand_hi,
                idx.cart_ctrl,
                idx.hand_ctrl,
                self.ctrl,
            )
            if bad >= 0:
                raise ValueError(
                    f"action: world {bad}: a TCP quaternion (w, x, y, z) has zero norm"
                )
        else:
            kernels.joint_action_to_ctrl(
                a,
                self._arm_lo,
                self._arm_hi,
                self._arm_step,
                self._hand_lo,
                self._hand_hi,
                idx.joint_ctrl,
                idx.hand_ctrl,
                self.ctrl,
            )
        self.physics.step(self.ctrl, self.nsub)
        self.unstable |= self.physics.diverged()
        self.steps += 1
        self._wrap_belt()
        self._spawn_due(self._all_worlds)
        self._judge()

    def _scale_objects(self, worlds: np.ndarray, scales: np.ndarray | None) -> None:
        """Give the reset worlds' objects their sizes: ``scales`` per spawn slot, or the spec
        sizes (undoing an earlier episode's scaling)."""
        want = np.ones(self.scale.shape[1]) if scales is None else np.asarray(scales, float)
        if want.shape != (self.scale.shape[1],) or not (want > 0).all():
            raise ValueError(
                f"scales: expected {self.scale.shape[1]} positive factors, got {scales}"
            )
        if np.allclose(want, 1.0) and np.allclose(self.scale[worlds], 1.0):
            return
        model = self.scene.model
        if self.n != 1 or getattr(self.physics, "model", None) is not model:
            raise ValueError(
                "scales: scaling objects changes the model, which only a one-world MuJoCo "
                "(CPU) backend can do"
            )
        self.scale[worlds] = want
        self._geometry.apply(model, {int(o): s for o, s in zip(self.chosen[0], want, strict=True)})

    def set_belt_speed(self, worlds: np.ndarray, speed: float | np.ndarray) -> None:
        """Command the belt's speed (m/s) in ``worlds`` from the next step on."""
        self.belt_speed[worlds] = speed
        self.ctrl[worlds, self.idx.belt_ctrl] = self.belt_speed[worlds]

    @property
    def time(self) -> np.ndarray:
        return self.steps * self.dt

    def _pos_to_ref(self, pos: np.ndarray) -> np.ndarray:
        """World positions (N, 2, 3) -> each arm's reference frame."""
        # Row vector times R is R^T applied to the vector.
        return ((pos - self.idx.ref_pos)[..., None, :] @ self._ref_mat)[..., 0, :]

    def _quat_to_ref_rotvec(self, quat: np.ndarray) -> np.ndarray:
        """World orientations (N, 2, 4 wxyz) -> rotation vectors in each arm's reference frame."""
        return quat_to_rotvec(quat_mul(self._ref_conj, quat))

    def _tcp_in_ref(self, pos: np.ndarray, mat: np.ndarray) -> np.ndarray:
        """World TCP poses (N, 2, 3) + (N, 2, 3, 3) -> (N, 2, 6) pos + rotvec in ref frames."""
        return np.concatenate(
            [self._pos_to_ref(pos), self._quat_to_ref_rotvec(mat_to_quat(mat))], axis=-1
        )

    def _wrap_belt(self) -> None:
        qpos, _ = self.physics.state()
        q = qpos[:, self.idx.belt_qadr]
        over = np.abs(q) > self._half_period
        if over.any():
            worlds = np.flatnonzero(over)
            shift = np.sign(q[worlds]) * (2 * self._half_period)
            self.physics.write_qpos(worlds, self._belt_adr, (q[worlds] - shift)[:, None])

    def _spawn_due(self, worlds: np.ndarray) -> None:
        """Place objects whose spawn time has come at the belt's upstream end."""
        if self.spawned.all():
            return
        due = (~self.spawned[worlds]) & (self.time[worlds, None] + 1e-9 >= self.spawn_time)
        for wi, slot in zip(*np.nonzero(due), strict=True):
            w = worlds[wi]
            obj = self.chosen[w, slot]
            pos, quat, vel = self._spawn_pose(w, slot)
            adr = self.idx.obj_qadr[obj] + np.arange(7)
            vadr = self.idx.obj_vadr[obj] + np.arange(6)
            self.physics.write_qpos(
                np.array([w]), adr, np.concatenate([pos, quat])[None], vadr, vel[None]
            )
            self.spawned[w, slot] = True

    def _spawn_pose(self, w: int, slot: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        belt = self.scene.world.layout.belt
        obj = self.objects[self.chosen[w, slot]]
        heading = Rotation.from_euler("z", belt.yaw_deg, degrees=True)
        along, across = self.spawn_xy[w, slot]
        height = obj.rest_height * self.scale[w, slot]
        local = np.array([-belt.length / 2 + along, across, height + 0.002])
        pos = np.asarray(belt.pos) + heading.apply(local)
        rot = heading * Rotation.from_euler("z", self.spawn_yaw[w, slot])
        vel = np.zeros(6)
        vel[:3] = heading.apply([self.belt_speed[w], 0.0, 0.0])
        return pos, rot.as_quat(scalar_first=True), vel

    # ----------------------------------------------------------------- judging
    def object_states(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Chosen objects' pos (N, S, 3), quat (N, S, 4) and linear velocity (N, S, 3)."""
        qpos, qvel = self.physics.state()
        pos_idx, quat_idx, vel_idx = self._state_idx
        return qpos.take(pos_idx), qpos.take(quat_idx), qvel.take(vel_idx)

    def _index_objects(self) -> None:
        """Flat indices of the chosen objects' state in (N, nq) qpos and (N, nv) qvel."""
        model = self.scene.model
        rows = np.arange(self.n)[:, None, None]
        adr = self.idx.obj_qadr[self.chosen][..., None] + rows * model.nq
        vadr = self.idx.obj_vadr[self.chosen][..., None] + rows * model.nv
        self._state_idx = (adr + _XYZ, adr + _QUAT, vadr + _XYZ)
        self._qadr = self.idx.obj_qadr[self.chosen]
        self._vadr = self.idx.obj_vadr[self.chosen]
        self._assigned = self.assigned_bin[self.chosen]

    def _judge(self) -> None:
        qpos, qvel = self.physics.state()
        b = self._bins
        kernels.judge(
            qpos,
            qvel,
            self._qadr,
            self._vadr,
            self.spawned,
            self._assigned,
            self.status,
            b.centre,
            b.inv_rot,
            b.half,
            self._belt_centre,
            self._belt_inv_rot,
            self._belt_half,
            self.scene.task.success.settle_speed,
            self._drop_line,
            self._rest_line,
        )

    @property
    def terminated(self) -> np.ndarray:
        judged = self.spawned.all(axis=1) & (self.status != PENDING).all(axis=1)
        return judged & ~self.unstable

    @property
    def truncated(self) -> np.ndarray:
        """Out of time, or the physics diverged (the episode cannot go on)."""
        return (self.steps >= self.max_steps) | self.unstable

    @property
    def success(self) -> np.ndarray:
        return (self.status == SORTED).all(axis=1) & ~self.unstable

    def common_info(self) -> dict[str, np.ndarray]:
        """What every env reports in ``info``, per world: ``success``, ``unstable`` (the
        physics diverged), ``time`` (s), ``belt_speed`` (m/s) and the chosen objects' states
        ``object_pos`` (N, S, 3), ``object_quat`` (N, S, 4) and ``object_lin_vel`` (N, S, 3)."""
        pos, quat, vel = self.object_states()
        return {
            "success": self.success,
            "unstable": self.unstable.copy(),
            "time": self.time.astype(np.float64),
            "belt_speed": self.belt_speed.copy(),
            "object_pos": pos,
            "object_quat": quat,
            "object_lin_vel": vel,
        }

    def progress(self, w: int = 0) -> ProgressReading:
        """How far world ``w``'s episode has got with its first presented object (the
        hands' distance to it, the hand parts touching it, over its bin or not)."""
        if self._probe is None:
            self._probe = ProgressProbe(self.scene.model, self.embodiment)
        k = int(self.chosen[w, 0])
        b = int(self.assigned_bin[k])
        pos = self.object_states()[0][w, 0]
        bins = self._bins
        return self._probe.read(
            self.physics,
            w,
            int(self._geometry.geoms[k]),
            pos,
            bins.centre[b],
            bins.inv_rot[b],
            bins.half[b],
        )

    def instruction(self, w: int) -> str:
        task = self.scene.task
        if len(self.spawn_time) > 1:
            return "Sort every object on the belt into its bin."
        return task.instruction_for(self.objects[self.chosen[w, 0]].name)


@dataclass(frozen=True)
class _ObjectGeometry:
    """The objects' spec geometry and inertia, to scale objects from and back to."""

    geoms: np.ndarray  # (K,) geom id per object
    bodies: np.ndarray  # (K,) body id per object
    size: np.ndarray
    rbound: np.ndarray
    aabb: np.ndarray
    mass: np.ndarray
    inertia: np.ndarray

    @classmethod
    def of(cls, model: mujoco.MjModel, objects: tuple) -> _ObjectGeometry:
        geoms = np.array([model.geom(f"{OBJECT_PREFIX}{o.name}").id for o in objects])
        bodies = model.geom_bodyid[geoms]
        return cls(
            geoms,
            bodies,
            model.geom_size[geoms].copy(),
            model.geom_rbound[geoms].copy(),
            model.geom_aabb[geoms].copy(),
            model.body_mass[bodies].copy(),
            model.body_inertia[bodies].copy(),
        )

    def apply(self, model: mujoco.MjModel, scales: dict[int, float]) -> None:
        """Objects at their spec sizes, except those in ``scales`` (object index -> factor):
        size and bounds by the factor, mass by its cube, inertia by its fifth power."""
        s = np.ones(len(self.geoms))
        for index, factor in scales.items():
            s[index] = factor
        model.geom_size[self.geoms] = self.size * s[:, None]
        model.geom_rbound[self.geoms] = self.rbound * s
        model.geom_aabb[self.geoms] = self.aabb * s[:, None]
        model.body_mass[self.bodies] = self.mass * s**3
        model.body_inertia[self.bodies] = self.inertia * s[:, None] ** 5


@dataclass(frozen=True)
class _BinGeometry:
    centre: np.ndarray  # (B, 3) bin floor centre
    inv_rot: np.ndarray  # (B, 3, 3) world -> bin
    half: np.ndarray  # (B, 3) half extents of the inside volume (z: wall height)

    @classmethod
    def build(cls, scene: Scene) -> _BinGeometry:
        layout = scene.world.layout
        centres, rots, halves = [], [], []
        for b in scene.task.bins:
            pose = layout.bins[b.name]
            centres.append(pose.pos)
            rots.append(Rotation.from_euler("z", pose.yaw_deg, degrees=True).inv().as_matrix())
            halves.append([*b.half_size, b.wall_height])
        return cls(np.array(centres), np.array(rots), np.array(halves))
