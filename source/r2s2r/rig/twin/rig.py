"""The digital twin: a stand-in for the real cell behind the rig interfaces.

It simulates a hidden "true" world (``truth.py``, drawn by the builder in ``build.py``) that
differs from the nominal one the way a real cell does, and shows the rest of the system only
the interfaces a real cell has: arms, hands, cameras, a conveyor and an object presenter. The
truth is readable through one explicit call, ``TwinRig.reveal_truth()``, meant for benchmarks
and evaluation only.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

import mujoco
import numpy as np

from r2s2r.geometry.rotations import mat_to_quat, quat_conj, quat_mul, rotvec_to_quat
from r2s2r.rig.interfaces import DEPTH_CAMERA, ArmState, Frame, HandState, HandTracker
from r2s2r.rig.twin.board import BOARD_PARKED
from r2s2r.rig.twin.build import TwinCfg, TwinTruth, build_parts
from r2s2r.rig.twin.imperfect import Backlash, Imperfections, quantize
from r2s2r.rig.twin.views import TwinViews, TwinViewsCfg
from r2s2r.sim.camera import Intrinsics
from r2s2r.sim.cell import STATUS_NAMES, Cell
from r2s2r.sim.embodiment import TCP_POSE_DIM, Embodiment
from r2s2r.sim.physics import Physics, make_physics
from r2s2r.sim.progress import ProgressReading
from r2s2r.spec import TaskSpec, WorldSpec
from r2s2r.spec.world import CAMERA_NAMES


def arm_dofs(model: mujoco.MjModel, embodiment: Embodiment) -> list[list[int]]:
    """The joint velocity addresses of each arm (qpos and qvel addresses differ)."""
    return [
        [model.jnt_dofadr[model.joint(j).id] for j in embodiment.arm_joint_names(side)]
        for side in embodiment.sides
    ]


@dataclass(frozen=True)
class TwinInternals:
    """The machinery behind the twin's interfaces (``TwinRig.reveal_internals``): what the
    tests and the benches inspect, or perturb to inject a fault. Its simulation's model is the
    true world's, so like ``reveal_truth`` nothing that grounds the world or learns behavior
    may reach it."""

    # The simulation: its model (the true world, the board, the flaws) and its state.
    physics: Physics
    # The cell on that simulation (its objects, belt, episode status and state indices).
    cell: Cell
    # The cameras' views (their schedule, worker processes and renderers).
    views: TwinViews
    # The calibration board's pose (7,) at each placement number.
    board_poses: list[np.ndarray]


class TwinRig:
    """A simulated cell with realistic hidden offsets, driven through the rig interfaces (a
    ``Rig``).

    It is built from a ``TwinCfg`` (``TwinRig.from_cfg(cfg)``; ``build.py`` draws and compiles
    its parts), or from the config's fields as keywords (``TwinRig(seed=3, ideal=True)``).

    The twin advances only when ``step()`` is called (one 50 Hz period each), as fast as the
    machine allows, or paced to the wall clock with ``realtime=True`` (for a person
    teleoperating it). Its ``embodiment`` is the robot of its simulated cell; its devices
    take TCP targets and hand joint targets (the ``tcp`` action mode).

    Its cameras deliver the observation size (or, with ``native_cameras``, their own
    resolution, as the calibration captures want), rendered as ``views`` says
    (``rig/twin/views.py``): by default each camera at 30 frames/s, rendered in a worker process
    of its own two control periods behind the physics; native cameras default to the reference
    (``TwinViewsCfg.reference()``: every period, in this process, no latency).

    By default the twin is as imperfect as a real cell (``imperfect.py``: noisy, quantized
    readings, friction, payload, hysteresis, belt ripple, lens residuals, compression);
    ``ideal=True`` keeps only the hidden world's parameters, for checks that need an exact
    answer.
    """

    def __init__(
        self,
        seed: int = 0,
        world: str | Path | WorldSpec = "nominal",
        task: str | Path | TaskSpec = "pick_sort",
        realtime: bool = False,
        native_cameras: bool = False,
        condition: str = "nominal",
        ideal: bool = False,
        imperfections: Imperfections | None = None,
        views: TwinViewsCfg | None = None,
        cell: int | None = None,
    ) -> None:
        """The twin ``TwinCfg`` describes, its fields given as keywords (``from_cfg`` takes
        the config itself)."""
        cfg = TwinCfg(
            seed=seed,
            world=world,
            task=task,
            realtime=realtime,
            native_cameras=native_cameras,
            condition=condition,
            ideal=ideal,
            imperfections=imperfections,
            views=views,
            cell=cell,
        )
        parts = build_parts(cfg)
        self.cfg = cfg
        # The hidden cell's seed, the condition and the nominal world it was drawn around,
        # and the task as the condition shifts it.
        self.cell, self.condition, self.ideal = cfg.cell_seed, cfg.condition, cfg.ideal
        self.nominal, self.task = parts.nominal, parts.task
        self.__truth = parts.truth
        self.views_cfg = parts.views.cfg
        self.realtime = cfg.realtime
        # Cameras deliver their own resolution (``native``), or the observation size (fast).
        self.native_cameras = cfg.native_cameras
        scene = parts.scene
        self.embodiment: Embodiment = scene.embodiment
        self._physics = make_physics("mujoco", scene.model)
        self._cell = Cell(scene, self._physics)
        self._board_poses = parts.board_poses
        self._board_mocap = int(scene.model.body("calib_board").mocapid[0])
        self._arm_dofs = arm_dofs(scene.model, self.embodiment)
        self._rng = np.random.default_rng(cfg.seed + 1)
        # Reading noise, drawn once per period and device (a real sensor reports one value
        # per cycle however often it is read), and each hand's backlash.
        self._flaws = parts.truth.imperfections
        # Each draw is a function of (seed, episode, period, device) alone, so the readings
        # do not depend on who reads what in which order (a served policy, a GUI, a thread).
        self._seed = cfg.seed
        self._episode = -1
        self._draws: dict[str, np.ndarray] = {}
        self._backlash: list[Backlash] = []
        self._fk: mujoco.MjData | None = None
        self._lock = threading.RLock()
        self._views = TwinViews(parts.views, self._physics, TwinClock(self))
        # The latest command of each arm: TCP target (7), then hand targets.
        emb = self.embodiment
        self._action = np.zeros((emb.num_arms, emb.action_per_arm("tcp")))
        self._wall_start = time.monotonic()
        self.arms = {side: TwinArm(self, i, side) for i, side in enumerate(emb.sides)}
        self.hands = {side: TwinHand(self, i, side) for i, side in enumerate(emb.sides)}
        self.cameras = {name: TwinCamera(self, name) for name in CAMERA_NAMES}
        self.conveyor = TwinConveyor(self)
        self.presenter = TwinPresenter(self)
        # No gloves: the twin's operator (``ScriptedOperator``) is built next to it.
        self.trackers: dict[str, HandTracker] = {}
        self.present()

    @classmethod
    def from_cfg(cls, cfg: TwinCfg) -> TwinRig:
        """The twin ``cfg`` describes."""
        return cls(**dict(cfg))

    def depth_camera(self) -> TwinCamera:
        """The head camera, the twin's RGB-D one."""
        return self.cameras[DEPTH_CAMERA]

    def close(self) -> None:
        """Stop the view worker and release the renderers (the simulation itself holds
        nothing to release)."""
        with self._lock:
            self._views.close()

    def __enter__(self) -> TwinRig:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -------------------------------------------------------------- the clock
    def now(self) -> float:
        """Simulated time of the current episode, seconds."""
        return float(self._cell.time[0])

    def step(self, periods: int = 1) -> None:
        """Advance the twin by ``periods`` control periods with the latest commands."""
        for i in range(periods):
            with self._lock:
                ripple = self._flaws.dynamics.belt_ripple
                if ripple:
                    factor = self._flaws.belt_factor(self.now())
                    belt = self._cell.idx.belt_ctrl
                    self._cell.ctrl[0, belt] = self._cell.belt_speed[0] * factor
                self._cell.step(self._commanded().reshape(1, -1))
                self._draws.clear()
                self._update_backlash()
                # Views only of the last latency + 1 periods: the first is shown after the
                # last period, the others are pipelined.
                if periods - i <= self.views_cfg.latency + 1:
                    self._views.after_step()
            if self.realtime:
                delay = self._wall_start + self.now() - time.monotonic()
                if delay > 0:
                    time.sleep(delay)

    def present(self, object_name: str | None = None) -> str:
        """Start an episode: arms home, one object placed at the belt's upstream end."""
        with self._lock:
            names = None if object_name is None else [object_name] * self._cell.chosen.shape[1]
            self._cell.reset(np.array([0]), [self._rng], objects=names)
            pos, mat = self._physics.site_poses(self._cell.idx.tcp_sites)
            quat = mat_to_quat(mat[0])
            offsets = self._flaws.readings.joint_offset_rad
            qpos, _ = self._physics.state()
            # The hands open, as the cell starts them.
            for arm, a in enumerate(self._action):
                a[:3], a[3:7], a[7:] = pos[0, arm], quat[arm], self.embodiment.hand_open
                if offsets:
                    # Hold where the arm's own encoders say it is.
                    a[:7] = self._offset_kinematics(arm, qpos[0], np.asarray(offsets[arm]))[1]
            self._views.restart()
            self._draws.clear()
            self._episode += 1
            width = self._flaws.readings.hand_backlash_rad
            self._backlash = [Backlash(width, qpos[0, adr]) for adr in self._cell.idx.hand_qadr]
            self._wall_start = time.monotonic()
            return self._cell.objects[self._cell.chosen[0, 0]].name

    def episode_outcome(self) -> tuple[str, bool, bool]:
        """The presented object's status (``pending``, ``sorted``, ``wrong_bin`` or
        ``dropped``; ``unstable`` if the twin's physics diverged), whether the episode
        succeeded, and whether it is over; what a person at the cell sees, and the success
        label a recorder stores."""
        with self._lock:
            if self._cell.unstable[0]:
                # The twin's physics diverged: no outcome to judge, and the episode is over.
                return "unstable", False, True
            status = STATUS_NAMES[int(self._cell.status[0, 0])]
            return status, bool(self._cell.success[0]), bool(self._cell.terminated[0])

    def object_pose(self) -> np.ndarray:
        """Pose (7,) of the presented object: where a person at the cell sees it. It reveals
        no hidden world parameter, only where the object visibly is."""
        with self._lock:
            pos, quat, _ = self._cell.object_states()
            return np.concatenate([pos[0, 0], quat[0, 0]])

    def reveal_progress(self) -> ProgressReading:
        """How far the episode has got, from the simulation's state (the hands' distance to
        the presented object, the hand parts touching it, over its bin or not). For
        evaluation only, like ``reveal_truth``: no policy or grounding input may come from it."""
        with self._lock:
            return self._cell.progress(0)

    def reveal_truth(self) -> TwinTruth:
        """The hidden truth. For benchmarks and evaluation only: nothing that grounds the
        world or learns behavior may call this."""
        return self.__truth

    def reveal_internals(self) -> TwinInternals:
        """The simulation, cell and views behind the interfaces, and the board's true poses.
        For tests and benchmarks only, like ``reveal_truth``: what they change (a state made
        to diverge) the twin runs on."""
        return TwinInternals(self._physics, self._cell, self._views, self._board_poses)

    # ------------------------------------------------------- shared internals
    def _arm_state(self, arm: int) -> ArmState:
        with self._lock:
            qpos, qvel = self._physics.state()
            idx = self._cell.idx
            pos, mat = self._physics.site_poses(idx.tcp_sites[arm : arm + 1])
            q = qpos[0, idx.arm_qadr[arm]].copy()
            dq = qvel[0, self._arm_dofs[arm]].copy()
            tcp = np.concatenate([pos[0, 0], mat_to_quat(mat[0, 0])])
            r = self._flaws.readings  # All zero on the ideal twin: each term is optional.
            stamp = self.now()
            if r.joint_offset_rad:
                q, tcp = self._offset_kinematics(arm, qpos[0], np.asarray(r.joint_offset_rad[arm]))
            if r.joint_rad or r.joint_vel or r.tcp_m or r.tcp_rad or r.stamp_s:
                n = len(q)
                z = self._draw(f"arm{arm}", 2 * n + 7)
                q = q + r.joint_rad * z[:n]
                dq = dq + r.joint_vel * z[n : 2 * n]
                turn = rotvec_to_quat(r.tcp_rad * z[2 * n + 3 : 2 * n + 6])
                tcp = np.concatenate(
                    [tcp[:3] + r.tcp_m * z[2 * n : 2 * n + 3], quat_mul(turn, tcp[3:])]
                )
                stamp += r.stamp_s * z[-1]
            return ArmState(stamp, quantize(q, r.joint_lsb_rad), dq, tcp)

    def _hand_state(self, hand: int) -> HandState:
        with self._lock:
            qpos, _ = self._physics.state()
            q = qpos[0, self._cell.idx.hand_qadr[hand]].copy()
            r = self._flaws.readings  # All zero on the ideal twin: each term is optional.
            stamp = self.now()
            if r.hand_backlash_rad:
                q = self._backlash[hand].reading.copy()
            if r.hand_rad or r.stamp_s:
                z = self._draw(f"hand{hand}", len(q) + 1)
                q = q + r.hand_rad * z[:-1]
                stamp += r.stamp_s * z[-1]
            return HandState(stamp, quantize(q, r.hand_lsb_rad))

    def _commanded(self) -> np.ndarray:
        """The latest commands as the cell's controller executes them. With encoder offsets
        the arm servos its TCP as its own encoders see it, as a real controller does: a
        target is reached where the reported TCP (not the true one) meets it."""
        offsets = self._flaws.readings.joint_offset_rad
        if not offsets:
            return self._action
        action = self._action.copy()
        qpos, _ = self._physics.state()
        pos, mat = self._physics.site_poses(self._cell.idx.tcp_sites)
        for arm, a in enumerate(action):
            _, seen = self._offset_kinematics(arm, qpos[0], np.asarray(offsets[arm]))
            true_quat = mat_to_quat(mat[0, arm])
            a[:3] = a[:3] + pos[0, arm] - seen[:3]
            a[3:7] = quat_mul(true_quat, quat_mul(quat_conj(seen[3:]), a[3:7]))
        return action

    def _offset_kinematics(
        self, arm: int, qpos: np.ndarray, offset: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """The joints and TCP pose (7,) of ``arm`` as encoders with zero ``offset`` report
        them: the cell's kinematics at the offset joints."""
        model = self._cell.scene.model
        if self._fk is None:
            self._fk = mujoco.MjData(model)
        idx = self._cell.idx
        self._fk.qpos[:] = qpos
        self._fk.qpos[idx.arm_qadr[arm]] += offset
        mujoco.mj_kinematics(model, self._fk)
        site = idx.tcp_sites[arm]
        rot = self._fk.site_xmat[site].reshape(3, 3)
        tcp = np.concatenate([self._fk.site_xpos[site], mat_to_quat(rot)])
        return self._fk.qpos[idx.arm_qadr[arm]].copy(), tcp

    def _draw(self, device: str, n: int) -> np.ndarray:
        """This period's standard normal draws for ``device`` (the same on every read)."""
        if device not in self._draws:
            self._draws[device] = self._period_rng(device).standard_normal(n)
        return self._draws[device]

    def _drops(self, camera: str) -> bool:
        """Whether ``camera`` drops the frame it is due to take this period."""
        rate = self._flaws.readings.frame_drop
        return bool(rate) and bool(self._period_rng(camera).random() < rate)

    def _period_rng(self, device: str) -> np.random.Generator:
        period = round(self.now() * self.task.control_hz)
        code = int.from_bytes(device.encode()[:8], "little")
        return np.random.default_rng([self._seed, 9, self._episode, period, code])

    def _update_backlash(self) -> None:
        if self._flaws.readings.hand_backlash_rad:
            qpos, _ = self._physics.state()
            for b, adr in zip(self._backlash, self._cell.idx.hand_qadr, strict=True):
                b.update(qpos[0, adr])

    def _set_action(self, arm: int, start: int, values: np.ndarray) -> None:
        with self._lock:
            self._action[arm, start : start + len(values)] = values

    def _place_board(self, placement: int | None) -> None:
        with self._lock:
            if placement is None:
                pose = np.concatenate([BOARD_PARKED, [1.0, 0.0, 0.0, 0.0]])
            else:
                pose = self._board_poses[placement % len(self._board_poses)]
            self._physics.set_mocap(0, self._board_mocap, pose[:3], pose[3:])
            self._views.restart()

    def _render(self, name: str, depth: bool = False) -> Frame:
        with self._lock:
            if depth:
                return Frame(self.now(), self._views.depth())
            return self._views.read(name)


class TwinClock:
    """The twin as its views see it (``views.ViewClock``): its time, its pacing and its
    cameras' dropped frames."""

    def __init__(self, rig: TwinRig) -> None:
        self._rig = rig

    def now(self) -> float:
        return self._rig.now()

    def paced(self) -> bool:
        return self._rig.realtime

    def drops(self, camera: str) -> bool:
        return self._rig._drops(camera)


class TwinArm:
    """One arm of the twin (the ``Arm`` interface)."""

    def __init__(self, rig: TwinRig, index: int, side: str) -> None:
        self._rig, self._index, self.name = rig, index, f"{side}_arm"

    def state(self) -> ArmState:
        return self._rig._arm_state(self._index)

    def send_tcp_target(self, pose: np.ndarray) -> None:
        pose = np.asarray(pose, dtype=float)
        if pose.shape != (7,):
            raise ValueError(
                f"{self.name}: a TCP pose is 7 numbers (x y z qw qx qy qz), got shape {pose.shape}"
            )
        self._rig._set_action(self._index, 0, pose)

    def stop(self) -> None:
        self._rig._set_action(self._index, 0, self.state().tcp_pose)


class TwinHand:
    """One hand of the twin (the ``Hand`` interface)."""

    def __init__(self, rig: TwinRig, index: int, side: str) -> None:
        self._rig, self._index, self.name = rig, index, f"{side}_hand"

    def state(self) -> HandState:
        return self._rig._hand_state(self._index)

    def send_joint_targets(self, q: np.ndarray) -> None:
        q = np.asarray(q, dtype=float)
        n = self._rig.embodiment.hand_dof
        if q.shape != (n,):
            raise ValueError(f"{self.name}: expected {n} joint targets, got shape {q.shape}")
        self._rig._set_action(self._index, TCP_POSE_DIM, q)


class TwinCamera:
    """One camera of the twin (``Camera``; the head camera is also a ``DepthCamera``)."""

    def __init__(self, rig: TwinRig, name: str) -> None:
        self._rig, self.name = rig, name
        # A driver reports the data-sheet intrinsics (not the true ones) at the resolution it
        # delivers.
        nominal = Intrinsics.from_spec(rig.nominal.cameras[name])
        self._intrinsics = (
            nominal if rig.native_cameras else nominal.scaled(*rig.nominal.render.obs_size)
        )

    def intrinsics(self) -> Intrinsics:
        return self._intrinsics

    def read(self) -> Frame:
        return self._rig._render(self.name)

    def read_depth(self) -> Frame:
        if self.name != DEPTH_CAMERA:
            raise ValueError(f"{self.name} has no depth; only the head camera is RGB-D")
        return self._rig._render(self.name, depth=True)


class TwinConveyor:
    """The twin's belt (the ``Conveyor`` interface)."""

    def __init__(self, rig: TwinRig) -> None:
        self._rig = rig

    def set_speed(self, speed: float) -> None:
        with self._rig._lock:
            self._rig._cell.set_belt_speed(np.array([0]), float(speed))

    def speed(self) -> float:
        with self._rig._lock:
            return float(self._rig._cell.belt_speed[0])


class TwinPresenter:
    """Puts an object on the twin's belt (the ``ObjectPresenter`` interface)."""

    def __init__(self, rig: TwinRig) -> None:
        self._rig = rig

    def present(self, object_name: str | None = None) -> str:
        return self._rig.present(object_name)

    def place_board(self, placement: int) -> None:
        """Prop the calibration board up in its ``placement``-th pose (a new pose for each
        number, the same pose for the same number)."""
        self._rig._place_board(placement)

    def remove_board(self) -> None:
        """Take the calibration board out of the cell."""
        self._rig._place_board(None)

    def object_pose(self) -> np.ndarray:
        """Where the presented object is (the twin tracks it exactly)."""
        return self._rig.object_pose()
