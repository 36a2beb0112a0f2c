"""Arm controller identification: a least-squares fit of the Cartesian controller
(ArmControllerSpec) to recordings, by simulating the recorded commands in MuJoCo.

Why it is fast: the motion generator's output (the actuator ctrl) depends only on the
commanded targets and the limits, not on the arm's state, and the actuator delay is a
linear interpolation of that ctrl in time (MuJoCo's ``interp="linear"`` history). So a
candidate's controls are computed up front, the delay applied as a signal shift, and the
physics of all candidates x all windows runs in one ``mujoco.rollout`` call on an arm-only
model (its hand frozen in the recorded posture) across native threads. Windows start from
recorded joint states (multiple shooting); the held-out figures come from one open-loop
rollout of each whole held-out recording.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import mujoco
import mujoco.rollout
import numpy as np
from scipy.optimize import least_squares
from tqdm import tqdm

from r2s2r.geometry.rotations import (
    quat_conj,
    quat_mul,
    quat_to_mat,
    quat_to_rotvec,
    rotvec_to_quat,
)
from r2s2r.ground.sysid_data import ArmRecording, SysIdError, check_joints
from r2s2r.sim import kernels
from r2s2r.sim import scene as scene_mod
from r2s2r.spec import WorldSpec
from r2s2r.spec.world import ArmControllerSpec

# Fitted ArmControllerSpec fields; all but those in _ABSOLUTE are fitted as log-ratios to
# nominal, those (whose nominal may be 0) as offsets in their unit, within their bounds.
ARM_PARAMS = (
    "kp_pos",
    "kp_rot",
    "damping_ratio",
    "delay_s",
    "max_lin_vel",
    "max_lin_acc",
    "joint_friction",
)
# Their (unit, (low, high) bounds): 10 ms of delay, 0.1 N·m of joint friction (a
# torque-controlled arm's residual friction is a few tenths of a N·m); _FD_STEP is in these
# units too.
_ABSOLUTE = {"delay_s": (0.01, (0.0, 0.08)), "joint_friction": (0.1, (0.0, 1.0))}
_LOG_BOUNDS = (np.log(0.2), np.log(3.0))
# Orientation residuals are weighted so that 1 degree counts like 4 mm (the 2 mm / 0.5 deg
# targets are then equally hard).
_MM_PER_DEG = 4.0
_FD_STEP = 2e-3


# ------------------------------------------------------------------ the surrogate model


@dataclass(frozen=True)
class _ArmModel:
    """An arm-only MuJoCo model of one side and what is needed to drive it."""

    model: mujoco.MjModel
    cart: np.ndarray  # (6,) actuator ids of the TCP axes
    ref_pos: np.ndarray  # (3,)
    ref_quat: np.ndarray  # (4,)
    nsub: int


def _arm_model(
    world: WorldSpec, side: str, hz: float, hand_q: np.ndarray, source: str = "recording"
) -> _ArmModel:
    """The arm of ``side`` alone, its hand frozen at joint positions ``hand_q`` (hand joints,),
    without the actuator delay (it is applied to the ctrl instead). Self-contacts stay:
    some postures touch link to link or palm to link."""
    spec = scene_mod.new_spec(world)
    bare = world.replace(controller={"delay_s": 0.0})
    arm, hand = scene_mod.add_arm_and_hand(spec, bare, side)
    check_joints("hand_q", len(hand_q), len(hand.joints), "hand", source)
    for act in list(spec.actuators):
        if not act.name.startswith(f"{side}_tcp_"):
            spec.delete(act)
    for name, q in zip(hand.joints, hand_q, strict=True):
        freeze_joint(spec, spec.joint(name), float(q))
    for kind, dim in (
        (mujoco.mjtSensor.mjSENS_FRAMEPOS, 3),
        (mujoco.mjtSensor.mjSENS_FRAMEQUAT, 4),
    ):
        spec.add_sensor(type=kind, objtype=mujoco.mjtObj.mjOBJ_SITE, objname=f"{side}_tcp", dim=dim)
    model = spec.compile()
    if model.nq != len(arm.joints) or model.nsensordata != 7:
        raise RuntimeError(f"arm-only model of {side}: nq={model.nq}, sensors={model.nsensordata}")
    ref = model.site(f"{side}_ref")
    return _ArmModel(
        model=model,
        cart=np.array([model.actuator(f"{side}_tcp_{a}").id for a in scene_mod.CART_AXES]),
        ref_pos=ref.pos.copy(),
        ref_quat=ref.quat.copy(),
        nsub=max(1, round(1.0 / hz / world.timestep)),
    )


def freeze_joint(spec: mujoco.MjSpec, joint: mujoco.MjsJoint, q: float) -> None:
    """Replace hinge ``joint`` of ``spec`` by its body's fixed transform at angle ``q``."""
    body = joint.parent
    axis = np.asarray(joint.axis, dtype=float)
    turn = rotvec_to_quat(axis / np.linalg.norm(axis) * (q - joint.ref))
    anchor = np.asarray(joint.pos, dtype=float)
    quat = np.asarray(body.quat, dtype=float)
    quat /= np.linalg.norm(quat)
    # Turning the body frame about the joint anchor a: p' = p + R0 (a - R a), R' = R0 R.
    body.pos = list(
        np.asarray(body.pos) + quat_to_mat(quat) @ (anchor - quat_to_mat(turn) @ anchor)
    )
    body.quat = list(quat_mul(quat, turn))
    spec.delete(joint)


def last_value(
    fun: Callable[[np.ndarray], np.ndarray],
) -> Callable[[np.ndarray], np.ndarray]:
    """``fun`` that reuses its last result when called again at the same point: least_squares
    evaluates the residuals at a point and then the Jacobian, which needs them there again."""
    last: dict[bytes, np.ndarray] = {}

    def wrapped(x: np.ndarray) -> np.ndarray:
        key = x.tobytes()
        if key not in last:
            last.clear()
            last[key] = fun(x)
        return last[key]

    return wrapped


def _with_gains(arm: _ArmModel, ctl: ArmControllerSpec) -> mujoco.MjModel:
    """A copy of the arm model with ``ctl``'s Cartesian stiffness and damping and its joint
    friction (every dof of the arm-only model is an arm joint)."""
    m = mujoco.MjModel.__copy__(arm.model)
    m.dof_frictionloss[:] = ctl.joint_friction
    kv_pos = 2 * ctl.damping_ratio * np.sqrt(ctl.kp_pos * ctl.tcp_mass)
    kv_rot = 2 * ctl.damping_ratio * np.sqrt(ctl.kp_rot * ctl.tcp_inertia)
    for k, a in enumerate(arm.cart):
        kp, kv = (ctl.kp_pos, kv_pos) if k < 3 else (ctl.kp_rot, kv_rot)
        m.actuator_gainprm[a, 0] = kp
        m.actuator_biasprm[a, 1:3] = -kp, -kv
    return m


def _motion_ctrl(
    arm: _ArmModel, target: np.ndarray, ctl: ArmControllerSpec, dt: float
) -> np.ndarray:
    """The motion generator's ctrl (T, 6) for targets (T, 7), starting at rest at target[0]
    (the recorder holds the first target before recording)."""
    n = len(target)
    ref_pos = np.tile(arm.ref_pos, (2, 1))
    ref_mat = np.ascontiguousarray(np.tile(quat_to_mat(arm.ref_quat), (2, 1, 1)))
    ref_conj = np.tile(quat_conj(arm.ref_quat), (2, 1))
    pose = np.zeros((1, 2, 6))
    pose[0, :, :3] = (target[0, :3] - arm.ref_pos) @ ref_mat[0]
    pose[0, :, 3:] = quat_to_rotvec(quat_mul(ref_conj[0], target[0, 3:]))
    vel = np.zeros((1, 2, 2, 3))
    lim = np.array([[ctl.max_lin_vel, ctl.max_ang_vel], [ctl.max_lin_acc, ctl.max_ang_acc]])
    # Two copies of the arm and no hands: the kernel's action is a TCP pose per arm.
    no_hand, hand_idx = np.zeros(0), np.zeros((2, 0), dtype=np.int64)
    cart_idx = np.arange(12).reshape(2, 6)
    ctrl = np.zeros((1, 12))
    action = np.zeros((1, 14))
    out = np.empty((n, 6))
    for i in range(n):
        action[0, :7] = target[i]
        action[0, 7:] = target[i]
        kernels.tcp_action_to_ctrl(
            action, ref_pos, ref_mat, ref_conj, pose, vel, lim, dt,
            no_hand, no_hand, cart_idx, hand_idx, ctrl,
        )  # fmt: skip
        out[i] = ctrl[0, :6]
    return out


def _delayed(ctrl: np.ndarray, nsub: int, h: float, delay: float) -> np.ndarray:
    """Per-physics-step ctrl (T * nsub, 6) as a delayed linear-history actuator sees it:
    the held ctrl sampled every step, read ``delay`` seconds back, linearly interpolated;
    before the first sample, the first value (the recording starts at rest)."""
    u = np.repeat(ctrl, nsub, axis=0)
    s = np.arange(len(u)) - delay / h
    j = np.floor(s).astype(int)
    frac = (s - j)[:, None]
    lo, hi = np.clip(j, 0, len(u) - 1), np.clip(j + 1, 0, len(u) - 1)
    return u[lo] * (1.0 - frac) + u[hi] * frac


def _tcp_errors(pred: np.ndarray, meas: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Position error (..., 3) in mm and orientation error (..., 3) as a rotvec in degrees."""
    pos = 1e3 * (pred[..., :3] - meas[..., :3])
    rot = np.degrees(quat_to_rotvec(quat_mul(quat_conj(meas[..., 3:]), pred[..., 3:])))
    return pos, rot


class ArmSimulator:
    """Simulates candidate controllers on recorded commands, from recorded joint states."""

    def __init__(self, recordings: Sequence[ArmRecording], nominal: WorldSpec) -> None:
        if not recordings:
            raise SysIdError("no arm recordings given; record some with record_arms")
        self.recs = list(recordings)
        self.nominal = nominal
        # One model per recording: the hand may hold a different posture in each.
        self.arms = [
            _arm_model(nominal, r.side, r.hz, r.hand_q.mean(axis=0), r.source) for r in self.recs
        ]
        for r, arm in zip(self.recs, self.arms, strict=True):
            check_joints("q", r.q.shape[1], arm.model.nq, "arm", r.source)
        self._threads = [mujoco.MjData(self.arms[0].model) for _ in range(os.cpu_count() or 1)]
        self._ctrl: dict[tuple[int, tuple[float, ...]], np.ndarray] = {}

    def _controls(self, rec: int, ctl: ArmControllerSpec) -> np.ndarray:
        """Delayed per-step ctrl (T * nsub, 6) of recording ``rec`` under ``ctl``."""
        r, arm = self.recs[rec], self.arms[rec]
        key = (rec, (ctl.max_lin_vel, ctl.max_lin_acc, ctl.max_ang_vel, ctl.max_ang_acc))
        if key not in self._ctrl:
            if len(self._ctrl) > 64:
                self._ctrl.clear()
            self._ctrl[key] = _motion_ctrl(arm, r.target, ctl, 1.0 / r.hz)
        return _delayed(self._ctrl[key], arm.nsub, self.nominal.timestep, ctl.delay_s)

    def predict(
        self, cands: Sequence[ArmControllerSpec], segments: Sequence[tuple[int, int]], length: int
    ) -> np.ndarray:
        """Predicted TCP poses (C, S, length, 7) at periods start+1 .. start+length of each
        segment (recording index, start period), for every candidate controller."""
        models, states, controls = [], [], []
        nsubs = {self.arms[i].nsub for i, _ in segments}
        if len(nsubs) != 1:
            raise SysIdError("arm recordings mix control rates; record all at the same rate")
        nsub = nsubs.pop()
        nstep = length * nsub + 1
        for ctl in cands:
            used = sorted({i for i, _ in segments})
            gains = {i: _with_gains(self.arms[i], ctl) for i in used}
            ctrl = {i: self._controls(i, ctl) for i in used}
            for i, start in segments:
                rec = self.recs[i]
                models.append(gains[i])
                states.append(np.concatenate([[0.0], rec.q[start], rec.dq[start]]))
                u = ctrl[i][start * nsub : start * nsub + nstep]
                if len(u) < nstep:  # The last prediction needs one step past the recording.
                    u = np.concatenate([u, np.repeat(u[-1:], nstep - len(u), 0)])
                controls.append(u)
        _, sensors = mujoco.rollout.rollout(
            models,
            self._threads,
            np.asarray(states),
            np.asarray(controls),
            control_spec=int(mujoco.mjtState.mjSTATE_CTRL),
            persistent_pool=True,
        )
        # Sensors after step k describe the state before it: period p sits at step p * nsub.
        tcp = sensors[:, nsub::nsub][:, :length]
        return tcp.reshape(len(cands), len(segments), length, 7)

    def measured(self, segments: Sequence[tuple[int, int]], length: int) -> np.ndarray:
        """Measured TCP poses (S, length, 7) matching ``predict``'s output."""
        return np.stack([self.recs[i].tcp[s + 1 : s + 1 + length] for i, s in segments])

    def rollout_whole(self, ctl: ArmControllerSpec) -> list[np.ndarray]:
        """Open-loop prediction (T, 7) of each whole recording from its first state."""
        out = []
        for i, rec in enumerate(self.recs):
            pred = self.predict([ctl], [(i, 0)], len(rec.t) - 1)[0, 0]
            out.append(np.concatenate([rec.tcp[:1], pred]))
        return out


# ------------------------------------------------------------------ fitting


def _check_motion(rec: ArmRecording) -> None:
    """Raise unless the commanded and the measured TCP both move (else nothing to fit)."""
    moved = 1e3 * np.ptp(rec.target[:, :3], axis=0).max()
    turned = np.degrees(np.linalg.norm(np.ptp(quat_to_rotvec(rec.target[:, 3:]), axis=0)))
    if moved < 5.0 and turned < 2.0:
        raise SysIdError(
            f"{rec.source}: field 'target' barely moves ({moved:.1f} mm, {turned:.1f} deg); "
            "record an excitation from arm_excitation() with record_arms instead"
        )
    followed = 1e3 * np.ptp(rec.tcp[:, :3], axis=0).max()
    if followed < 0.2 * moved:
        raise SysIdError(
            f"{rec.source}: field 'tcp' moves {followed:.1f} mm while the target moves "
            f"{moved:.1f} mm; the arm did not follow (stopped or e-stopped?), record it again"
        )


@dataclass(frozen=True)
class _Params:
    """Maps the fitted ArmControllerSpec fields to a scaled vector x (0 = nominal)."""

    names: tuple[str, ...]
    nominal: ArmControllerSpec

    def spec(self, x: np.ndarray) -> ArmControllerSpec:
        upd = {}
        for name, v in zip(self.names, x, strict=True):
            base = getattr(self.nominal, name)
            if name in _ABSOLUTE:
                unit, (low, _) = _ABSOLUTE[name]
                # At the lower bound, rounding can land a hair below it (-1e-19 s of delay),
                # which the spec refuses.
                upd[name] = max(low, base + v * unit)
            else:
                upd[name] = base * np.exp(v)
        return self.nominal.replace(**{k: float(v) for k, v in upd.items()})

    def x(self, ctl: ArmControllerSpec) -> np.ndarray:
        out = []
        for name in self.names:
            base, v = getattr(self.nominal, name), getattr(ctl, name)
            out.append((v - base) / _ABSOLUTE[name][0] if name in _ABSOLUTE else np.log(v / base))
        return np.array(out)

    def bounds(self) -> tuple[np.ndarray, np.ndarray]:
        lo, hi = [], []
        for name in self.names:
            if name in _ABSOLUTE:
                unit, (a, b) = _ABSOLUTE[name]
                base = getattr(self.nominal, name)
                lo.append((a - base) / unit)
                hi.append((b - base) / unit)
            else:
                lo.append(_LOG_BOUNDS[0])
                hi.append(_LOG_BOUNDS[1])
        return np.array(lo), np.array(hi)


def _initial_guess(recs: Sequence[ArmRecording], nominal: ArmControllerSpec) -> ArmControllerSpec:
    """Nominal, except a speed limit the data shows is lower: at the nominal limit the
    recorded moves may never touch it, and the fit would then see no gradient."""
    peak = max(
        float(np.max(np.linalg.norm(np.diff(r.tcp[:, :3], axis=0), axis=1)) * r.hz) for r in recs
    )
    return nominal.replace(max_lin_vel=min(nominal.max_lin_vel, peak))


def _residuals(pred: np.ndarray, meas: np.ndarray) -> np.ndarray:
    """Flat residuals: position error in mm and orientation error in weighted degrees."""
    pos, rot = _tcp_errors(pred, meas)
    return np.concatenate([pos, _MM_PER_DEG * rot], axis=-1).reshape(pred.shape[0], -1)


def tcp_rms(pred: Sequence[np.ndarray], meas: Sequence[np.ndarray]) -> tuple[float, float]:
    """RMS TCP position (mm) and orientation (deg) error over all samples of all runs."""
    pos, rot = _tcp_errors(np.concatenate(list(pred)), np.concatenate(list(meas)))
    return (
        float(np.sqrt(np.mean(np.sum(pos**2, axis=-1)))),
        float(np.sqrt(np.mean(np.sum(rot**2, axis=-1)))),
    )


def fit_arm(
    recordings: Sequence[ArmRecording],
    nominal: WorldSpec,
    params: Sequence[str] = ARM_PARAMS,
    window_s: float = 1.0,
    stride_s: float = 1.0,
    max_iter: int = 20,
    progress: bool = True,
) -> ArmControllerSpec:
    """Least-squares fit of the controller fields ``params`` to the recordings.

    Residuals are TCP errors of windows of ``window_s`` started every ``stride_s`` from
    recorded joint states, simulated with each candidate on the recorded commands.
    """
    unknown = sorted(set(params) - set(ArmControllerSpec.model_fields))
    if unknown:
        raise SysIdError(f"params: {unknown} are not ArmControllerSpec fields")
    for rec in recordings:
        _check_motion(rec)
    sim = ArmSimulator(recordings, nominal)
    hz = recordings[0].hz
    length = max(1, int(round(window_s * hz)))
    stride = max(1, int(round(stride_s * hz)))
    segments = [
        (i, s) for i, r in enumerate(recordings) for s in range(0, len(r.t) - length, stride)
    ]
    if not segments:
        raise SysIdError(
            f"{recordings[0].source}: shorter than one {window_s:g} s window; record longer"
        )
    meas = sim.measured(segments, length)
    par = _Params(tuple(params), nominal.controller)
    x0 = np.clip(par.x(_initial_guess(recordings, nominal.controller)), *par.bounds())
    bar = tqdm(total=max_iter, desc="fit arm", unit="iter", disable=not progress)

    @last_value
    def fun(x: np.ndarray) -> np.ndarray:
        res = _residuals(sim.predict([par.spec(x)], segments, length), meas[None])[0]
        r = res.reshape(-1, 6)
        bar.set_postfix(
            mm=f"{np.sqrt(np.mean(np.sum(r[:, :3] ** 2, 1))):.3f}",
            deg=f"{np.sqrt(np.mean(np.sum(r[:, 3:] ** 2, 1))) / _MM_PER_DEG:.3f}",
        )
        return res

    def jac(x: np.ndarray) -> np.ndarray:
        _, hi = par.bounds()
        steps = np.where(x + _FD_STEP <= hi, _FD_STEP, -_FD_STEP)
        cands = [par.spec(x + np.eye(len(x))[k] * steps[k]) for k in range(len(x))]
        res = _residuals(sim.predict(cands, segments, length), meas[None])
        bar.update()
        return ((res - fun(x)[None]) / steps[:, None]).T

    sol = least_squares(
        fun, x0, jac=jac, bounds=par.bounds(), method="trf", max_nfev=max_iter, xtol=1e-4
    )
    bar.close()
    return par.spec(sol.x)


@dataclass(frozen=True)
class ArmFit:
    """A fitted controller and its held-out figures, with traces for plotting."""

    controller: ArmControllerSpec
    nominal: ArmControllerSpec
    tcp_rms_mm: float
    tcp_rms_deg: float
    nominal_tcp_rms_mm: float
    nominal_tcp_rms_deg: float
    sides: list[str]  # One per held-out recording.
    t: list[np.ndarray]  # (T,) each
    measured: list[np.ndarray]  # (T, 7) each
    predicted: list[np.ndarray]  # (T, 7) each, fitted controller, open loop
    predicted_nominal: list[np.ndarray]  # (T, 7) each, nominal controller, open loop


def evaluate_arm(
    recordings: Sequence[ArmRecording], nominal: WorldSpec, controller: ArmControllerSpec
) -> ArmFit:
    """Open-loop predictions of whole (held-out) recordings with ``controller`` and with
    the nominal one, and their RMS errors."""
    for rec in recordings:
        _check_motion(rec)
    sim = ArmSimulator(recordings, nominal)
    fitted, nom = sim.rollout_whole(controller), sim.rollout_whole(nominal.controller)
    meas = [r.tcp for r in recordings]
    mm, deg = tcp_rms(fitted, meas)
    nmm, ndeg = tcp_rms(nom, meas)
    return ArmFit(
        controller, nominal.controller, mm, deg, nmm, ndeg,
        [r.side for r in recordings], [r.t for r in recordings], meas, fitted, nom,
    )  # fmt: skip
