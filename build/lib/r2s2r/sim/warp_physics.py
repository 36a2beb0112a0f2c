"""The ``mujoco_warp`` physics backend: N worlds of one model stepped together by MuJoCo Warp.

It runs on CUDA when a GPU is present and on Warp's CPU device otherwise. Device state is
float32; ``state()`` and ``site_poses()`` hand back float64 host copies.

Two things MuJoCo Warp 4.0 does differently from MuJoCo C, handled here:

- It ignores ``MjOption.disableactuator`` (actuator groups). Disabled actuators are emulated by
  zeroing their gain and bias parameters on the device, which makes their force (and its
  implicit-integration derivative) zero, as disabling them does in MuJoCo C.
- Its overflow flags (too many contacts or constraint rows) only print a warning; this backend
  raises ``RuntimeError`` instead so that a run never continues with dropped contacts.
"""

from __future__ import annotations

from typing import Any

import mujoco
import numpy as np

from r2s2r.optional import missing_extra
from r2s2r.sim.physics import Contacts, Physics

# The one place r2s2r imports MuJoCo Warp and Warp (the 'warp' extra).
try:
    import mujoco_warp as mjw
    import warp as wp
except ImportError as _err:
    raise missing_extra(_err, "warp") from _err

# Warp logs every kernel module it loads at INFO level; keep that quiet unless asked for.
if wp.config.log_level == wp.LOG_INFO:
    wp.config.log_level = wp.LOG_WARNING

# Per-world buffer sizes. The cell has about 30 contacts at rest (objects on the floor and
# belt) and up to about 70 while both hands grasp; elliptic cones add up to 6 constraint rows
# per contact. The contact pool is shared by all worlds, so one busy world may exceed nconmax.
DEFAULT_NCONMAX = 192
DEFAULT_NJMAX = 768
# Overflows that lose contacts or constraints (solver iteration limits are not errors).
_FATAL_OVERFLOW = int(
    mjw.OverflowType.NEFC
    | mjw.OverflowType.NJMAX_NNZ
    | mjw.OverflowType.BROADPHASE
    | mjw.OverflowType.NARROWPHASE
    | mjw.OverflowType.CCD
)
# The contact type bit of contacts for the constraint solver (``ContactType.CONSTRAINT``, which
# MuJoCo Warp 4.0 does not export); the others are those of collision sensors.
_CONSTRAINT_CONTACT = 1
# Model fields that ``set_world_params`` may batch over worlds.
WORLD_PARAMS = (
    "geom_friction",
    "geom_rgba",
    "body_mass",
    "body_inertia",
    "dof_damping",
    "dof_armature",
    "dof_frictionloss",
    "actuator_gainprm",
    "actuator_biasprm",
)


@wp.kernel
def _scatter(
    worlds: wp.array[int],
    cols: wp.array[int],
    values: wp.array2d[float],
    out: wp.array2d[float],
):
    """Write ``values[i, j]`` to ``out[worlds[i], cols[j]]``."""
    # Warp kernel code is typed by Warp, not by mypy.
    i, j = wp.tid()  # type: ignore[misc]
    out[worlds[i], cols[j]] = values[i, j]  # type: ignore[index]


def warp_backend(physics: Physics, user: str) -> WarpPhysics:
    """``physics`` as the ``mujoco_warp`` backend, for a ``user`` that works on its device
    state (e.g. the batched renderer); any other backend is refused."""
    if not isinstance(physics, WarpPhysics):
        raise ValueError(
            f"{user} works on the device state of physics 'mujoco_warp'; this physics is "
            f"{type(physics).__name__} (use the 'mujoco' renderer, or physics='mujoco_warp')"
        )
    return physics


def default_device() -> str:
    """``"cuda"`` when Warp sees a GPU, else ``"cpu"``."""
    return "cuda" if wp.get_cuda_device_count() > 0 else "cpu"


class WarpPhysics:
    """MuJoCo Warp, ``num_worlds`` worlds of ``model`` (see the module docstring)."""

    def __init__(
        self,
        model: mujoco.MjModel,
        num_worlds: int,
        device: str | None = None,
        nconmax: int | None = None,
        njmax: int | None = None,
    ) -> None:
        if num_worlds < 1:
            raise ValueError(f"num_worlds must be >= 1, got {num_worlds}")
        self.model = model
        self.num_worlds = num_worlds
        self.device = device or default_device()
        self.nconmax = nconmax or DEFAULT_NCONMAX
        self.njmax = njmax or DEFAULT_NJMAX
        # Actuators switched off through their group, kept off in every parameter write.
        groups = np.clip(model.actuator_group, 0, 30)
        self._disabled = ((int(model.opt.disableactuator) >> groups) & 1).astype(bool)
        self._disabled &= (model.actuator_group >= 0) & (model.actuator_group < 31)
        self._graphs: dict[int, Any] = {}
        self._state: tuple[np.ndarray, np.ndarray] | None = None
        # Every world's contacts (geoms (k, 2), dist (k,), world (k,)), read once per state.
        self._contacts: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
        self._kinematics_valid = False
        with wp.ScopedDevice(self.device):
            self._m = mjw.put_model(model)
            # This backend raises on overflow itself; the kernels' printf warnings only spam.
            self._m.opt.warn_overflow = 0
            self._d = mjw.make_data(
                model, nworld=num_worlds, nconmax=self.nconmax, njmax=self.njmax
            )
            if self._disabled.any():
                for field in ("actuator_gainprm", "actuator_biasprm"):
                    self.set_world_params(field, getattr(model, field)[None])
        self._history = self._history_layout()

    def _history_layout(self) -> tuple[np.ndarray, np.ndarray]:
        """History-buffer value slots of delayed actuators and the ctrl entry each one holds."""
        m = self.model
        slots: list[int] = []
        ctrl_ids: list[int] = []
        for i in np.flatnonzero(m.actuator_history[:, 0] > 0):
            nsample = int(m.actuator_history[i, 0])
            dim, ctrladr = int(m.actuator_ctrlnum[i]), int(m.actuator_ctrladr[i])
            # Buffer layout: user slot, cursor, nsample times, then nsample * dim values.
            values = int(m.actuator_historyadr[i]) + 2 + nsample
            for k in range(nsample):
                slots.extend(values + k * dim + np.arange(dim))
                ctrl_ids.extend(ctrladr + np.arange(dim))
        return np.array(slots, dtype=np.int32), np.array(ctrl_ids, dtype=np.int64)

    # ----------------------------------------------------------------- helpers
    def _write(
        self, out: wp.array, worlds: np.ndarray, cols: np.ndarray, values: np.ndarray
    ) -> None:
        """Scatter host ``values`` (k, len(cols)) into rows ``worlds`` of a device array."""
        if len(worlds) == 0 or len(cols) == 0:
            return
        vals = np.asarray(values, dtype=np.float32).reshape(len(worlds), len(cols))
        wp.launch(
            _scatter,
            dim=(len(worlds), len(cols)),
            inputs=[
                wp.array(np.asarray(worlds, dtype=np.int32), dtype=int, device=self.device),
                wp.array(np.asarray(cols, dtype=np.int32), dtype=int, device=self.device),
                wp.array(vals, dtype=float, device=self.device),
            ],
            outputs=[out],
            device=self.device,
        )
        self._changed()

    def _changed(self) -> None:
        """Forget what was read from the device: the state has changed."""
        self._state = None
        self._contacts = None
        self._kinematics_valid = False

    def _check_world(self, world: int) -> None:
        if not 0 <= world < self.num_worlds:
            raise IndexError(f"world {world} out of range for {self.num_worlds} worlds")

    def _check_overflow(self) -> None:
        flags = self._d.overflow.numpy() & _FATAL_OVERFLOW
        if flags.any():
            worlds = np.flatnonzero(flags)
            names = mjw.OverflowType(int(np.bitwise_or.reduce(flags[worlds]))).name
            raise RuntimeError(
                f"mujoco_warp overflow ({names}) in worlds {worlds.tolist()}: contacts or "
                f"constraints were dropped; raise nconmax (now {self.nconmax}) or njmax "
                f"(now {self.njmax}) when building WarpPhysics"
            )

    # ----------------------------------------------------------------- Physics protocol
    @property
    def device_model(self) -> Any:
        """The ``mujoco_warp`` Model on the device."""
        return self._m

    @property
    def device_data(self) -> Any:
        """The ``mujoco_warp`` Data on the device (all worlds)."""
        return self._d

    def model_arrays_replaced(self) -> None:
        """Call after swapping a device model array: captured step graphs hold the old one."""
        self._graphs.clear()

    def reset(
        self, qpos: np.ndarray, qvel: np.ndarray, ctrl: np.ndarray, worlds: np.ndarray
    ) -> None:
        """Reset ``worlds`` as ``mj_resetData`` does, then set their state and ctrl history."""
        worlds = np.asarray(worlds, dtype=np.int64)
        if len(worlds) == 0:
            return
        mask = np.zeros(self.num_worlds, dtype=bool)
        mask[worlds] = True
        m, d = self._m, self._d
        with wp.ScopedDevice(self.device):
            # Clears time, act, warmstart, applied forces, overflow flags and history buffers.
            mjw.reset_data(m, d, reset=wp.array(mask, dtype=bool))
            self._write(d.qpos, worlds, np.arange(self.model.nq), qpos)
            self._write(d.qvel, worlds, np.arange(self.model.nv), qvel)
            self._write(d.ctrl, worlds, np.arange(self.model.nu), ctrl)
            # Fill every delayed actuator's history with its ctrl (no start-up transient).
            slots, ctrl_ids = self._history
            ctrl = np.asarray(ctrl, dtype=float).reshape(len(worlds), self.model.nu)
            self._write(d.history, worlds, slots, ctrl[:, ctrl_ids])
            # Forward only writes derived quantities, so the other worlds are left as they were.
            mjw.forward(m, d)
        self._kinematics_valid = True

    def step(self, ctrl: np.ndarray, nstep: int) -> None:
        """Hold ``ctrl`` (N, nu) for ``nstep`` steps; CUDA replays one graph per ``nstep``."""
        ctrl = np.asarray(ctrl, dtype=np.float32).reshape(self.num_worlds, self.model.nu)
        with wp.ScopedDevice(self.device):
            self._d.ctrl.assign(ctrl)
            if wp.get_device(self.device).is_cuda:
                graph = self._graphs.get(nstep)
                if graph is None:
                    with wp.ScopedCapture() as capture:
                        for _ in range(nstep):
                            mjw.step(self._m, self._d)
                    graph = self._graphs[nstep] = capture.graph
                wp.capture_launch(graph)
            else:
                for _ in range(nstep):
                    mjw.step(self._m, self._d)
        self._changed()
        self._check_overflow()

    def state(self) -> tuple[np.ndarray, np.ndarray]:
        """Current (qpos (N, nq), qvel (N, nv)) as float64 host arrays, cached until a write."""
        if self._state is None:
            qpos = self._d.qpos.numpy().astype(np.float64)
            qvel = self._d.qvel.numpy().astype(np.float64)
            self._state = (qpos, qvel)
        return self._state

    def set_state(self, world: int, qpos: np.ndarray, qvel: np.ndarray) -> None:
        """Put ``world`` in the state ``qpos`` (nq,), ``qvel`` (nv,), everything else kept,
        and recompute what follows from it (``forward``: the other worlds' derived
        quantities are recomputed from their unchanged states)."""
        self._check_world(world)
        worlds = np.array([world])
        with wp.ScopedDevice(self.device):
            self._write(self._d.qpos, worlds, np.arange(self.model.nq), np.asarray(qpos)[None])
            self._write(self._d.qvel, worlds, np.arange(self.model.nv), np.asarray(qvel)[None])
            mjw.forward(self._m, self._d)
        self._kinematics_valid = True

    def diverged(self) -> np.ndarray:
        """Worlds (N,) whose state is non-finite or beyond MuJoCo's mjMAXVAL (mujoco_warp
        does not reset them, so this lasts until their reset)."""
        qpos, qvel = self.state()
        finite = np.isfinite(qpos).all(axis=1) & np.isfinite(qvel).all(axis=1)
        return ~finite | (np.abs(qvel) > mujoco.mjMAXVAL).any(axis=1)

    def write_qpos(
        self,
        worlds: np.ndarray,
        adr: np.ndarray,
        values: np.ndarray,
        vadr: np.ndarray | None = None,
        vel: np.ndarray | None = None,
    ) -> None:
        """Overwrite qpos[worlds][:, adr] (and optionally qvel[worlds][:, vadr])."""
        worlds = np.asarray(worlds)
        with wp.ScopedDevice(self.device):
            self._write(self._d.qpos, worlds, np.atleast_1d(adr), values)
            if vadr is not None and vel is not None:
                self._write(self._d.qvel, worlds, np.atleast_1d(vadr), vel)

    def _kinematics(self) -> None:
        # A step leaves the kinematics of the pre-step state (as mj_step does); refresh them.
        if not self._kinematics_valid:
            with wp.ScopedDevice(self.device):
                mjw.kinematics(self._m, self._d)
            self._kinematics_valid = True

    def site_poses(self, site_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """World pose of sites at the current state: pos (N, k, 3), xmat (N, k, 3, 3)."""
        self._kinematics()
        ids = np.asarray(site_ids)
        pos = self._d.site_xpos.numpy()[:, ids].astype(np.float64)
        mat = self._d.site_xmat.numpy()[:, ids].astype(np.float64)
        return pos, mat.reshape(self.num_worlds, len(ids), 3, 3)

    def contacts(self, world: int) -> Contacts:
        """The contacts of ``world`` that the last collision detection found (host copies of
        the constraint contacts; those of collision sensors are left out, as MuJoCo C keeps
        them out of ``MjData.contact``)."""
        self._check_world(world)
        if self._contacts is None:
            con = self._d.contact
            n = min(int(self._d.nacon.numpy()[0]), con.dist.shape[0])
            kept = (con.type.numpy()[:n] & _CONSTRAINT_CONTACT) != 0
            self._contacts = (
                con.geom.numpy()[:n][kept],
                con.dist.numpy()[:n][kept].astype(np.float64),
                con.worldid.numpy()[:n][kept],
            )
        geom, dist, worldid = self._contacts
        mine = worldid == world
        return Contacts(geom[mine, 0], geom[mine, 1], dist[mine])

    def mocap(self, world: int) -> tuple[np.ndarray, np.ndarray]:
        """Poses of ``world``'s mocap bodies: pos (nmocap, 3), quat wxyz (nmocap, 4)."""
        self._check_world(world)
        pos = self._d.mocap_pos.numpy()[world].astype(np.float64)
        return pos, self._d.mocap_quat.numpy()[world].astype(np.float64)

    def set_mocap(self, world: int, mocap_id: int, pos: np.ndarray, quat: np.ndarray) -> None:
        """Move mocap body ``mocap_id`` of ``world`` to ``pos`` (3,), ``quat`` wxyz (4,)."""
        self._check_world(world)
        for arr, value in ((self._d.mocap_pos, pos), (self._d.mocap_quat, quat)):
            host = arr.numpy().copy()
            host[world, mocap_id] = value
            arr.assign(host)
        self._kinematics_valid = False

    def mjdata(self, world: int) -> mujoco.MjData:
        """A new CPU ``MjData`` with ``world``'s state and its kinematics, cameras and lights."""
        self._check_world(world)
        qpos, qvel = self.state()
        data = mujoco.MjData(self.model)
        data.qpos[:] = qpos[world]
        data.qvel[:] = qvel[world]
        data.ctrl[:] = self._d.ctrl.numpy()[world]
        if self.model.na:
            data.act[:] = self._d.act.numpy()[world]
        data.time = float(self._d.time.numpy()[world])
        if self.model.nmocap:
            data.mocap_pos[:], data.mocap_quat[:] = self.mocap(world)
        # Rendering also needs camera and light poses, which mj_kinematics leaves out.
        mujoco.mj_kinematics(self.model, data)
        mujoco.mj_comPos(self.model, data)
        mujoco.mj_camlight(self.model, data)
        return data

    # ----------------------------------------------------------------- randomization
    def set_world_params(self, field: str, values: np.ndarray) -> None:
        """Give every world its own value of a model ``field``: ``values`` (N, *field_shape).

        A leading dimension of 1 shares one value across worlds. Quantities MuJoCo derives
        from these at compile time (e.g. ``body_invweight0`` from ``body_mass``) keep their
        nominal values. Actuators disabled through ``opt.disableactuator`` stay disabled.
        """
        if field not in WORLD_PARAMS:
            raise ValueError(
                f"set_world_params: unsupported field {field!r}; "
                f"supported: {', '.join(WORLD_PARAMS)}"
            )
        host = getattr(self.model, field)
        values = np.asarray(values, dtype=np.float64)
        expected = host.shape
        if values.shape[1:] != expected or values.shape[0] not in (1, self.num_worlds):
            raise ValueError(
                f"set_world_params: {field} values must have shape "
                f"({self.num_worlds}, {', '.join(map(str, expected))}), "
                f"got {values.shape}"
            )
        if field in ("actuator_gainprm", "actuator_biasprm"):
            values = values.copy()
            values[:, self._disabled] = 0.0
        current: wp.array = getattr(self._m, field)
        arr: wp.array = wp.array(values.astype(np.float32), dtype=current.dtype, device=self.device)
        # Kernels index batched model fields with world % leading size; mark it as such.
        arr._is_batched = True  # type: ignore[attr-defined]
        setattr(self._m, field, arr)
        # Captured graphs hold the old arrays; capture again on the next step.
        self._graphs.clear()
        self._kinematics_valid = False
