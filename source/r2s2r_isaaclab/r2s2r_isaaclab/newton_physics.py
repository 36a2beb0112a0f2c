"""The cell on Newton's MuJoCo Warp solver, behind the core's ``Physics`` protocol.

Newton reads the cell's MJCF directly (``ModelBuilder.add_mjcf``): bodies, joints, geoms,
sites and the actuators with their site and joint transmissions, gains, ranges and options
(timestep, implicit-fast integrator, elliptic cones, impratio) come through unchanged; the
converted MuJoCo model has the core model's qpos / qvel layout, which is checked here. The
MJCF is written from the same TaskSpec / WorldSpec the core builds its scene from, with the
arm controller that the action mode switches off left out (Newton's solver has no actuator
groups to disable).

What Newton's MJCF import does not carry, and what is done about it:

- Actuator delay (the Cartesian controller's ``delay``, 4 ms in the nominal world): emulated
  here by holding the previous command on the delayed actuators for the first
  ``round(delay / timestep)`` physics steps of each control step.
- Cameras and visual-only geoms: not physics; images come from Isaac Sim's renderer, or from
  MuJoCo's on a CPU copy of a world (``mjdata``).

``site_poses``, ``contacts`` and ``mjdata`` are computed by MuJoCo C on the core model from a
world's current state (exact forward kinematics of the same model).
"""

from __future__ import annotations

from typing import Any

import mujoco
import numpy as np

from r2s2r.sim.physics import Contacts
from r2s2r.sim.scene import build_spec
from r2s2r.spec import TaskSpec, WorldSpec

# The one place r2s2r_isaaclab imports Newton and Warp.
try:
    import newton
    import warp as wp
except ImportError as _err:  # pragma: no cover - the extension's environment has them
    raise ImportError(
        f"{_err.name} is needed for the Newton physics backend ({_err}); run "
        "`make isaaclab-setup` and use .venv-isaaclab/bin/python"
    ) from _err

if wp.config.log_level == wp.LOG_INFO:
    wp.config.log_level = wp.LOG_WARNING

# A state this large (m, rad, m/s) has diverged.
_HUGE = 1e6


def newton_mjcf(task: TaskSpec, world: WorldSpec, disabled_groups: int) -> str:
    """The cell's MJCF without the actuators of the ``disabled_groups`` bit mask."""
    spec = build_spec(task, world)
    for act in list(spec.actuators):
        if disabled_groups & (1 << act.group):
            spec.delete(act)
    spec.compile()
    return spec.to_xml()


class NewtonPhysics:
    """``num_worlds`` copies of the cell stepped by Newton's ``SolverMuJoCo`` (MuJoCo Warp).

    ``model`` is the core's compiled cell (its ``opt.disableactuator`` says which arm
    controller is on); ``task`` and ``world`` are the specs it was built from. ``solver``
    holds ``SolverMuJoCo`` keyword options (njmax, nconmax, iterations, ls_iterations,
    solver, integrator, cone, use_mujoco_cpu).
    """

    def __init__(
        self,
        model: mujoco.MjModel,
        task: TaskSpec,
        world: WorldSpec,
        num_worlds: int,
        device: str | None = None,
        solver: dict[str, Any] | None = None,
    ) -> None:
        if model.nmocap:
            raise ValueError(
                f"NewtonPhysics: the model has {model.nmocap} mocap bodies, which Newton's "
                "MJCF import does not carry; build the cell without them"
            )
        self.model = model
        self.num_worlds = num_worlds
        self.device = device or "cpu"
        disabled = int(model.opt.disableactuator)
        xml = newton_mjcf(task, world, disabled)
        trimmed = mujoco.MjModel.from_xml_string(xml)
        builder = newton.ModelBuilder()
        newton.solvers.SolverMuJoCo.register_custom_attributes(builder)
        cell = newton.ModelBuilder()
        newton.solvers.SolverMuJoCo.register_custom_attributes(cell)
        # ctrl_direct: every actuator reads MuJoCo's own ctrl vector (control.mujoco.ctrl),
        # in MJCF order, as the core's controller writes it.
        cell.add_mjcf(xml, ctrl_direct=True)
        builder.replicate(cell, num_worlds)
        self.newton_model = builder.finalize(device=self.device)
        opts = {"separate_worlds": True, **(solver or {})}
        self.solver = newton.solvers.SolverMuJoCo(self.newton_model, **opts)
        self._pipeline = self._contacts = None
        if not opts.get("use_mujoco_contacts", True):
            self._pipeline = newton.CollisionPipeline(self.newton_model, deterministic=True)
            self._contacts = self._pipeline.contacts()
        self._check_layout(self.solver.mj_model)
        self._state, self._next = self.newton_model.state(), self.newton_model.state()
        self._control = self.newton_model.control()
        # Core actuator index -> index in the trimmed MJCF (-1: left out, disabled).
        names = [trimmed.actuator(i).name for i in range(trimmed.nu)]
        self._nu = trimmed.nu
        self._act_src = np.array(
            [names.index(model.actuator(i).name) for i in range(model.nu) if _on(model, i)]
        )
        self._act_core = np.array([i for i in range(model.nu) if _on(model, i)])
        core_delay = getattr(model, "actuator_delay", np.zeros(model.nu))
        self._delay_steps = int(round(float(np.max(core_delay, initial=0.0)) / model.opt.timestep))
        self._delayed = np.array(
            [k for k, i in enumerate(self._act_core) if core_delay[i] > 0], dtype=int
        )
        self._diverged = np.zeros(num_worlds, dtype=bool)
        self._cpu = mujoco.MjData(model)
        self._qpos = np.zeros((num_worlds, model.nq))
        self._qvel = np.zeros((num_worlds, model.nv))
        self._ctrl = np.zeros((num_worlds, model.nu))
        self._pull()

    # ------------------------------------------------------------------ layout
    def _check_layout(self, mj: mujoco.MjModel) -> None:
        """The converted model must have the core model's state layout."""
        m = self.model
        same = (
            mj.nq == m.nq
            and mj.nv == m.nv
            and mj.njnt == m.njnt
            and np.array_equal(mj.jnt_type, m.jnt_type)
            and np.array_equal(mj.jnt_qposadr, m.jnt_qposadr)
            and np.array_equal(mj.jnt_dofadr, m.jnt_dofadr)
        )
        if not same:
            raise RuntimeError(
                "NewtonPhysics: Newton's MuJoCo model of the cell has another state layout "
                f"(nq {mj.nq} vs {m.nq}, nv {mj.nv} vs {m.nv}, joints {mj.njnt} vs {m.njnt})"
            )

    # ------------------------------------------------------------------ sync
    def _pull(self) -> None:
        """Host copies of every world's state from the solver's MuJoCo data."""
        if self.solver.use_mujoco_cpu:
            self._qpos[:] = self.solver.mj_data.qpos
            self._qvel[:] = self.solver.mj_data.qvel
            return
        data = self.solver.mjw_data
        self._qpos[:] = data.qpos.numpy().reshape(self.num_worlds, -1)
        self._qvel[:] = data.qvel.numpy().reshape(self.num_worlds, -1)

    def _push(self) -> None:
        """Write the host state into the solver's MuJoCo data and Newton's state."""
        if self.solver.use_mujoco_cpu:
            if self.num_worlds != 1:
                raise ValueError("NewtonPhysics: use_mujoco_cpu runs one world")
            data = self.solver.mj_data
            data.qpos[:] = self._qpos[0]
            data.qvel[:] = self._qvel[0]
        else:
            data = self.solver.mjw_data
            data.qpos.assign(self._qpos.astype(np.float32))
            data.qvel.assign(self._qvel.astype(np.float32))
        # Newton's state is the solver's input at the next step: bring it in line.
        self.solver._update_newton_state(
            self.newton_model, self._state, data, state_prev=self._state
        )

    def _warmstart(self) -> np.ndarray:
        """The solver's warm start (MuJoCo's ``qacc_warmstart``) of every world, (N, nv)."""
        if self.solver.use_mujoco_cpu:
            return self.solver.mj_data.qacc_warmstart[None].copy()
        return self.solver.mjw_data.qacc_warmstart.numpy().reshape(self.num_worlds, -1).copy()

    def _set_warmstart(self, warm: np.ndarray) -> None:
        if self.solver.use_mujoco_cpu:
            self.solver.mj_data.qacc_warmstart[:] = warm[0]
        else:
            self.solver.mjw_data.qacc_warmstart.assign(warm.astype(np.float32))

    def _set_ctrl(self, ctrl: np.ndarray) -> None:
        flat = np.zeros((self.num_worlds, self._nu), dtype=np.float32)
        flat[:, self._act_src] = ctrl[:, self._act_core]
        self._control.mujoco.ctrl.assign(flat.ravel())

    # ------------------------------------------------------------------ Physics
    def reset(
        self, qpos: np.ndarray, qvel: np.ndarray, ctrl: np.ndarray, worlds: np.ndarray
    ) -> None:
        worlds = np.asarray(worlds, dtype=int)
        self._qpos[worlds] = qpos
        self._qvel[worlds] = qvel
        self._ctrl[worlds] = ctrl
        self._diverged[worlds] = False
        # A new episode starts cold, as MuJoCo's mj_resetData leaves it: no solver warm start
        # carried over from the previous one.
        warm = self._warmstart()
        warm[worlds] = 0.0
        self._set_warmstart(warm)
        self._push()

    def step(self, ctrl: np.ndarray, nstep: int) -> None:
        ctrl = np.asarray(ctrl, dtype=np.float64).reshape(self.num_worlds, -1)
        # The command of the previous control step (or the one a reset set).
        prev = self._ctrl.copy()
        dt = float(self.model.opt.timestep)
        held = min(self._delay_steps, nstep) if len(self._delayed) else 0
        if held:
            # The delayed actuators still see the previous command (see the module doc).
            early = ctrl.copy()
            cols = self._act_core[self._delayed]
            early[:, cols] = prev[:, cols]
            self._set_ctrl(early)
            self._substeps(held, dt)
        self._set_ctrl(ctrl)
        self._substeps(nstep - held, dt)
        self._ctrl[:] = ctrl
        self._pull()
        bad = ~np.isfinite(self._qpos).all(1) | ~np.isfinite(self._qvel).all(1)
        bad |= (np.abs(self._qpos) > _HUGE).any(1) | (np.abs(self._qvel) > _HUGE).any(1)
        self._diverged |= bad

    def _substeps(self, n: int, dt: float) -> None:
        for _ in range(n):
            if self._pipeline is not None:
                self._pipeline.collide(self._state, self._contacts)
            self.solver.step(self._state, self._next, self._control, self._contacts, dt)
            self._state, self._next = self._next, self._state

    def state(self) -> tuple[np.ndarray, np.ndarray]:
        return self._qpos, self._qvel

    def set_state(self, world: int, qpos: np.ndarray, qvel: np.ndarray) -> None:
        _check_world(world, self.num_worlds)
        self._qpos[world] = qpos
        self._qvel[world] = qvel
        self._push()

    def snapshot(self, worlds: np.ndarray) -> dict[str, np.ndarray]:
        """What the next steps of ``worlds`` depend on, ``(len(worlds), ...)`` each: ``qpos``,
        ``qvel``, ``ctrl`` (the last command, which the delayed actuators still see at the start
        of the next step) and ``warmstart`` (the solver's ``qacc_warmstart``)."""
        w = np.asarray(worlds, dtype=int)
        return {
            "qpos": self._qpos[w].copy(),
            "qvel": self._qvel[w].copy(),
            "ctrl": self._ctrl[w].copy(),
            "warmstart": self._warmstart()[w],
        }

    def restore(self, worlds: np.ndarray, snapshot: dict[str, np.ndarray]) -> None:
        """Put ``worlds`` back into the state a ``snapshot`` of them holds (the divergence flag
        is cleared, as by a reset)."""
        w = np.asarray(worlds, dtype=int)
        self._qpos[w] = snapshot["qpos"]
        self._qvel[w] = snapshot["qvel"]
        self._ctrl[w] = snapshot["ctrl"]
        warm = self._warmstart()
        warm[w] = snapshot["warmstart"]
        self._set_warmstart(warm)
        self._diverged[w] = False
        self._push()

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
        w = np.asarray(worlds, dtype=int)[:, None]
        self._qpos[w, np.asarray(adr)[None]] = values
        if vadr is not None and vel is not None:
            self._qvel[w, np.asarray(vadr)[None]] = vel
        self._push()

    def _load_cpu(self, world: int) -> mujoco.MjData:
        _check_world(world, self.num_worlds)
        d = self._cpu
        d.qpos[:] = self._qpos[world]
        d.qvel[:] = self._qvel[world]
        d.ctrl[:] = self._ctrl[world]
        return d

    def site_poses(self, site_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        pos = np.zeros((self.num_worlds, len(site_ids), 3))
        mat = np.zeros((self.num_worlds, len(site_ids), 3, 3))
        for w in range(self.num_worlds):
            d = self._load_cpu(w)
            mujoco.mj_kinematics(self.model, d)
            pos[w] = d.site_xpos[site_ids]
            mat[w] = d.site_xmat[site_ids].reshape(-1, 3, 3)
        return pos, mat

    def contacts(self, world: int) -> Contacts:
        d = self._load_cpu(world)
        mujoco.mj_fwdPosition(self.model, d)
        n, con = d.ncon, d.contact
        return Contacts(con.geom1[:n].copy(), con.geom2[:n].copy(), con.dist[:n].copy())

    def mocap(self, world: int) -> tuple[np.ndarray, np.ndarray]:
        _check_world(world, self.num_worlds)
        return np.zeros((0, 3)), np.zeros((0, 4))

    def set_mocap(self, world: int, mocap_id: int, pos: np.ndarray, quat: np.ndarray) -> None:
        raise IndexError(f"mocap body {mocap_id}: the cell on Newton has no mocap bodies")

    def mjdata(self, world: int) -> mujoco.MjData:
        d = self._load_cpu(world)
        mujoco.mj_kinematics(self.model, d)
        mujoco.mj_comPos(self.model, d)
        mujoco.mj_camlight(self.model, d)
        return d

    def diverged(self) -> np.ndarray:
        return self._diverged.copy()


def _on(model: mujoco.MjModel, i: int) -> bool:
    """Whether actuator ``i`` is enabled (its group not in ``opt.disableactuator``)."""
    return not (int(model.opt.disableactuator) >> int(model.actuator_group[i])) & 1


def _check_world(world: int, num_worlds: int) -> None:
    if not 0 <= world < num_worlds:
        raise IndexError(f"world {world} out of range for {num_worlds} worlds")
