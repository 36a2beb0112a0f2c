"""Physics backends behind one batched interface: ``mujoco`` (CPU) and ``mujoco_warp``.

Both are built from the same compiled ``MjModel``. State arrays are host numpy arrays with a
leading world dimension ``N`` (N = 1 for the CPU backend).
"""

from __future__ import annotations

from typing import Literal, NamedTuple, Protocol

import mujoco
import numpy as np

from r2s2r.spec.registry import Registry

PhysicsName = Literal["mujoco", "mujoco_warp"]


# MuJoCo's warnings for a state it found non-finite or beyond mjMAXVAL (it then resets it).
DIVERGED_WARNINGS = (
    mujoco.mjtWarning.mjWARN_BADQPOS,
    mujoco.mjtWarning.mjWARN_BADQVEL,
    mujoco.mjtWarning.mjWARN_BADQACC,
)


class Contacts(NamedTuple):
    """The contacts of one world: the two geoms (k,) of each and their distance (k,) in metres
    (negative: penetration). The order of contacts is the backend's own."""

    geom1: np.ndarray
    geom2: np.ndarray
    dist: np.ndarray


class Physics(Protocol):
    """What the env, the twin and the executor need from a physics engine.

    Every method means the same on every backend. Arrays that come back are host numpy
    arrays; those documented as valid until the next step or write may be views of the
    backend's own state, which callers must not write (every write goes through a method).
    """

    model: mujoco.MjModel
    num_worlds: int

    def reset(
        self, qpos: np.ndarray, qvel: np.ndarray, ctrl: np.ndarray, worlds: np.ndarray
    ) -> None:
        """Set state (k, nq) / (k, nv), ctrl and its delay history (k, nu) of ``worlds``."""
        ...

    def step(self, ctrl: np.ndarray, nstep: int) -> None:
        """Hold ``ctrl`` (N, nu) for ``nstep`` physics steps in every world."""
        ...

    def state(self) -> tuple[np.ndarray, np.ndarray]:
        """Current (qpos (N, nq), qvel (N, nv)), valid until the next step or write."""
        ...

    def set_state(self, world: int, qpos: np.ndarray, qvel: np.ndarray) -> None:
        """Put ``world`` in the state ``qpos`` (nq,), ``qvel`` (nv,), everything else (time,
        ctrl, activations, mocap poses) kept, and recompute what follows from it (forward
        dynamics and contacts), as ``mj_forward`` does."""
        ...

    def write_qpos(
        self,
        worlds: np.ndarray,
        adr: np.ndarray,
        values: np.ndarray,
        vadr: np.ndarray | None = None,
        vel: np.ndarray | None = None,
    ) -> None:
        """Overwrite qpos[worlds][:, adr] (and optionally qvel[worlds][:, vadr])."""
        ...

    def site_poses(self, site_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """World pose of sites at the current state: pos (N, k, 3), xmat (N, k, 3, 3)."""
        ...

    def contacts(self, world: int) -> Contacts:
        """The contacts of ``world`` that the last collision detection found: at the start of
        the last physics step (as ``mj_step`` leaves them), or at the state a reset or
        ``set_state`` set. Valid until the next step or write."""
        ...

    def mocap(self, world: int) -> tuple[np.ndarray, np.ndarray]:
        """Poses of ``world``'s mocap bodies: pos (nmocap, 3), quat wxyz (nmocap, 4)."""
        ...

    def set_mocap(self, world: int, mocap_id: int, pos: np.ndarray, quat: np.ndarray) -> None:
        """Move mocap body ``mocap_id`` of ``world`` to ``pos`` (3,), ``quat`` wxyz (4,)."""
        ...

    def mjdata(self, world: int) -> mujoco.MjData:
        """A CPU ``MjData`` holding ``world``'s current state (qpos, qvel, ctrl, act, time,
        mocap poses) with kinematics, cameras and lights computed, for rendering and
        reading. A snapshot: valid until the next step or write, and never written by the
        caller (it may be the backend's own state); copy it to change it."""
        ...

    def diverged(self) -> np.ndarray:
        """(N,) bool: worlds whose state became non-finite or huge since their reset."""
        ...


def init_delay_history(model: mujoco.MjModel, data: mujoco.MjData) -> None:
    """Fill every delayed actuator's history with its current ctrl (no start-up transient)."""
    for i in np.flatnonzero(model.actuator_history[:, 0] > 0):
        n = int(model.actuator_history[i, 0])
        mujoco.mj_initCtrlHistory(model, data, int(i), None, np.full((n, 1), data.ctrl[i]))


class MujocoPhysics:
    """MuJoCo C on the CPU, one world."""

    num_worlds = 1

    def __init__(self, model: mujoco.MjModel) -> None:
        self.model = model
        self._data = mujoco.MjData(model)

    def reset(
        self, qpos: np.ndarray, qvel: np.ndarray, ctrl: np.ndarray, worlds: np.ndarray
    ) -> None:
        m, d = self.model, self._data
        mujoco.mj_resetData(m, d)
        d.qpos[:] = qpos[0]
        d.qvel[:] = qvel[0]
        d.ctrl[:] = ctrl[0]
        init_delay_history(m, d)
        mujoco.mj_forward(m, d)

    def step(self, ctrl: np.ndarray, nstep: int) -> None:
        self._data.ctrl[:] = ctrl[0]
        mujoco.mj_step(self.model, self._data, nstep=nstep)

    def state(self) -> tuple[np.ndarray, np.ndarray]:
        return self._data.qpos[None], self._data.qvel[None]

    def set_state(self, world: int, qpos: np.ndarray, qvel: np.ndarray) -> None:
        _check_world(world, 1)
        self._data.qpos[:] = qpos
        self._data.qvel[:] = qvel
        mujoco.mj_forward(self.model, self._data)

    def write_qpos(
        self,
        worlds: np.ndarray,
        adr: np.ndarray,
        values: np.ndarray,
        vadr: np.ndarray | None = None,
        vel: np.ndarray | None = None,
    ) -> None:
        if len(worlds) == 0:
            return
        self._data.qpos[adr] = values[0]
        if vadr is not None and vel is not None:
            self._data.qvel[vadr] = vel[0]

    def site_poses(self, site_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        # mj_step leaves kinematics of the pre-step state; refresh them for the current one.
        mujoco.mj_kinematics(self.model, self._data)
        pos = self._data.site_xpos[site_ids][None]
        mat = self._data.site_xmat[site_ids].reshape(1, -1, 3, 3)
        return pos.copy(), mat.copy()

    def contacts(self, world: int) -> Contacts:
        # Views of the live contact buffer (read every control step: no copies).
        _check_world(world, 1)
        d = self._data
        n, con = d.ncon, d.contact
        return Contacts(con.geom1[:n], con.geom2[:n], con.dist[:n])

    def mocap(self, world: int) -> tuple[np.ndarray, np.ndarray]:
        _check_world(world, 1)
        return self._data.mocap_pos.copy(), self._data.mocap_quat.copy()

    def set_mocap(self, world: int, mocap_id: int, pos: np.ndarray, quat: np.ndarray) -> None:
        _check_world(world, 1)
        self._data.mocap_pos[mocap_id] = pos
        self._data.mocap_quat[mocap_id] = quat

    def diverged(self) -> np.ndarray:
        # MuJoCo answers a bad state by warning and resetting the data (mj_resetData at
        # reset clears the counters): the state alone would look like a fresh episode.
        warned = any(self._data.warning[int(w)].number > 0 for w in DIVERGED_WARNINGS)
        return np.array([warned])

    def mjdata(self, world: int) -> mujoco.MjData:
        # The live data (rendering reads it every step: no copy); cameras and lights follow
        # the bodies they are mounted on.
        _check_world(world, 1)
        mujoco.mj_kinematics(self.model, self._data)
        mujoco.mj_comPos(self.model, self._data)
        mujoco.mj_camlight(self.model, self._data)
        return self._data


def _check_world(world: int, num_worlds: int) -> None:
    if not 0 <= world < num_worlds:
        raise IndexError(f"world {world} out of range for {num_worlds} worlds")


class PhysicsFactory(Protocol):
    """Builds a backend: ``num_worlds`` worlds of ``model`` on ``device`` (None: its default)."""

    def __call__(self, model: mujoco.MjModel, num_worlds: int, device: str | None) -> Physics: ...


def _mujoco(model: mujoco.MjModel, num_worlds: int, device: str | None) -> Physics:
    if num_worlds != 1:
        raise ValueError("physics='mujoco' runs one world; use 'mujoco_warp' for batches")
    if device not in (None, "cpu"):
        raise ValueError(f"physics='mujoco' runs on the CPU, got device={device!r}")
    return MujocoPhysics(model)


def _mujoco_warp(model: mujoco.MjModel, num_worlds: int, device: str | None) -> Physics:
    # Imported on use: MuJoCo Warp is the optional 'warp' extra.
    from r2s2r.sim.warp_physics import WarpPhysics

    return WarpPhysics(model, num_worlds, device=device)


# The physics backends by name (``PhysicsName``).
PHYSICS: Registry[PhysicsFactory] = Registry("physics backend")
PHYSICS.register("mujoco", _mujoco)
PHYSICS.register("mujoco_warp", _mujoco_warp)


def make_physics(
    name: PhysicsName, model: mujoco.MjModel, num_worlds: int = 1, device: str | None = None
) -> Physics:
    """Build the named backend over ``model``."""
    return PHYSICS.get(name)(model, num_worlds, device)
