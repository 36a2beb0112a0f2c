"""Physics backends behind one batched interface: ``mujoco`` (CPU) and ``mujoco_warp``.

Both are built from the same compiled ``MjModel``. State arrays are host numpy arrays with a
leading world dimension ``N`` (N = 1 for the CPU backend).
"""

from __future__ import annotations

from typing import Literal, Protocol

import mujoco
import numpy as np

PhysicsName = Literal["mujoco", "mujoco_warp"]


# MuJoCo's warnings for a state it found non-finite or beyond mjMAXVAL (it then resets it).
DIVERGED_WARNINGS = (
    mujoco.mjtWarning.mjWARN_BADQPOS,
    mujoco.mjtWarning.mjWARN_BADQVEL,
    mujoco.mjtWarning.mjWARN_BADQACC,
)


class Physics(Protocol):
    """What the env needs from a physics engine."""

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
        """Current (qpos (N, nq), qvel (N, nv))."""
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

    def mjdata(self, world: int) -> mujoco.MjData:
        """A CPU ``MjData`` holding ``world``'s state with kinematics computed (for rendering)."""
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
        self.data = mujoco.MjData(model)

    def reset(
        self, qpos: np.ndarray, qvel: np.ndarray, ctrl: np.ndarray, worlds: np.ndarray
    ) -> None:
        m, d = self.model, self.data
        mujoco.mj_resetData(m, d)
        d.qpos[:] = qpos[0]
        d.qvel[:] = qvel[0]
        d.ctrl[:] = ctrl[0]
        init_delay_history(m, d)
        mujoco.mj_forward(m, d)

    def step(self, ctrl: np.ndarray, nstep: int) -> None:
        self.data.ctrl[:] = ctrl[0]
        mujoco.mj_step(self.model, self.data, nstep=nstep)

    def state(self) -> tuple[np.ndarray, np.ndarray]:
        return self.data.qpos[None], self.data.qvel[None]

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
        self.data.qpos[adr] = values[0]
        if vadr is not None and vel is not None:
            self.data.qvel[vadr] = vel[0]

    def site_poses(self, site_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        # mj_step leaves kinematics of the pre-step state; refresh them for the current one.
        mujoco.mj_kinematics(self.model, self.data)
        pos = self.data.site_xpos[site_ids][None]
        mat = self.data.site_xmat[site_ids].reshape(1, -1, 3, 3)
        return pos.copy(), mat.copy()

    def diverged(self) -> np.ndarray:
        # MuJoCo answers a bad state by warning and resetting the data (mj_resetData at
        # reset clears the counters): the state alone would look like a fresh episode.
        warned = any(self.data.warning[int(w)].number > 0 for w in DIVERGED_WARNINGS)
        return np.array([warned])

    def mjdata(self, world: int) -> mujoco.MjData:
        # Cameras and lights follow the bodies they are mounted on.
        mujoco.mj_kinematics(self.model, self.data)
        mujoco.mj_comPos(self.model, self.data)
        mujoco.mj_camlight(self.model, self.data)
        return self.data


def make_physics(name: PhysicsName, model: mujoco.MjModel, num_worlds: int = 1) -> Physics:
    """Build the named backend over ``model``."""
    if name == "mujoco":
        if num_worlds != 1:
            raise ValueError("physics='mujoco' runs one world; use 'mujoco_warp' for batches")
        return MujocoPhysics(model)
    if name == "mujoco_warp":
        from r2s2r.sim.warp_physics import WarpPhysics

        return WarpPhysics(model, num_worlds)
    raise ValueError(f"physics must be 'mujoco' or 'mujoco_warp', got {name!r}")
