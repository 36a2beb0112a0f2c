"""Hand actuator identification: per-joint position gains (kp) and damping (kv) of the
HandActuatorSpec, fitted to recorded hand episodes by simulating a hand-only MuJoCo model.

The hand's ctrl is its clipped joint targets, independent of its state, and the fingers
barely interact, so one batched ``mujoco.rollout`` evaluates every episode under a
candidate, and the Jacobian needs only 8 perturbed candidates (joint k of all five fingers
perturbed together, for kp and for kv) whatever the number of joints.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

import mujoco
import mujoco.rollout
import numpy as np
from scipy.optimize import least_squares
from tqdm import tqdm

from r2s2r.ground.sysid_arm import freeze_joint, last_value
from r2s2r.ground.sysid_data import HandRecording, SysIdError, check_joints
from r2s2r.rig.teleop.retarget import TIPS, HandKinematics
from r2s2r.sim import scene as scene_mod
from r2s2r.spec import WorldSpec
from r2s2r.spec.world import HandActuatorSpec

_JOINTS_PER_FINGER = 4
_LOG_BOUNDS = (np.log(0.2), np.log(5.0))
_FD_STEP = 2e-3


@dataclass(frozen=True)
class _HandModel:
    model: mujoco.MjModel
    acts: np.ndarray  # (H,) actuator ids, thumb first
    nsub: int


def _hand_model(
    world: WorldSpec, side: str, hz: float, arm_q: np.ndarray, source: str = "recording"
) -> _HandModel:
    """The hand of ``side`` on its arm frozen at joint positions ``arm_q`` (J,): the arm's
    links stay as obstacles (the thumb can touch the wrist), only the fingers move."""
    spec = scene_mod.new_spec(world)
    arm, hand = scene_mod.add_arm_and_hand(spec, world, side)
    check_joints("arm_q", len(arm_q), len(arm.joints), "arm", source)
    for act in list(spec.actuators):
        if not act.name.startswith(f"{side}_hand_"):
            spec.delete(act)
    for name, q in zip(arm.joints, arm_q, strict=True):
        freeze_joint(spec, spec.joint(name), float(q))
    model = spec.compile()
    dof = len(hand.joints)
    if model.nq != dof or model.nu != dof:
        raise RuntimeError(f"hand model of {side}: nq={model.nq}, nu={model.nu}, expected {dof}")
    acts = [f"{j}_act" for j in hand.joints]
    return _HandModel(
        model=model,
        acts=np.array([model.actuator(a).id for a in acts]),
        nsub=max(1, round(1.0 / hz / world.timestep)),
    )


def _with_gains(hand: _HandModel, kp: np.ndarray, kv: np.ndarray) -> mujoco.MjModel:
    m = mujoco.MjModel.__copy__(hand.model)
    m.actuator_gainprm[hand.acts, 0] = kp
    m.actuator_biasprm[hand.acts, 1] = -kp
    m.actuator_biasprm[hand.acts, 2] = -kv
    return m


class HandSimulator:
    """Simulates hand episodes (from rest at their first reading) under candidate gains."""

    def __init__(self, recordings: Sequence[HandRecording], nominal: WorldSpec) -> None:
        if not recordings:
            raise SysIdError("no hand recordings given; record some with record_hands")
        if len({r.target.shape[1] for r in recordings}) != 1:
            raise SysIdError("hand recordings differ in episode length; record them equally")
        self.recs = list(recordings)
        # One model per recording: the arm holds a posture of its own in each.
        self.hands = [
            _hand_model(nominal, r.side, r.hz, r.arm_q[0, 0], r.source) for r in self.recs
        ]
        any_model, acts = self.hands[0].model, self.hands[0].acts
        self._threads = [mujoco.MjData(any_model) for _ in range(os.cpu_count() or 1)]
        # Joints per hand, and their ranges (the model's: the targets are clipped to them).
        self.dof = len(acts)
        for r in self.recs:
            check_joints("q", r.q.shape[-1], self.dof, "hand", r.source)
        lo, hi = any_model.jnt_range[any_model.actuator_trnid[acts, 0]].T
        nsubs = {h.nsub for h in self.hands}
        if len(nsubs) != 1:
            raise SysIdError("hand recordings mix control rates; record all at the same rate")
        self.nsub = nsub = nsubs.pop()
        n = self.recs[0].target.shape[1]
        # Per-step ctrl of every episode, ((T - 1) * nsub, H), and the initial states.
        self._ctrl = [
            np.repeat(np.clip(ep[: n - 1], lo, hi), nsub, axis=0)
            for r in self.recs
            for ep in r.target
        ]
        self._init = [
            np.concatenate([[0.0], q0, np.zeros(self.dof)]) for r in self.recs for q0 in r.q[:, 0]
        ]
        self._owner = [i for i, r in enumerate(self.recs) for _ in range(r.episodes)]
        self.measured = np.concatenate([r.q for r in self.recs])  # (E, T, H)

    def predict(self, gains: Sequence[tuple[np.ndarray, np.ndarray]]) -> np.ndarray:
        """Joint positions (C, E, T, H) of every episode under each (kp, kv) candidate;
        row 0 of each episode is its recorded first reading."""
        models: list[mujoco.MjModel] = []
        for kp, kv in gains:
            per_rec = [_with_gains(h, kp, kv) for h in self.hands]
            models.extend(per_rec[i] for i in self._owner)
        e = len(self._owner)
        state, _ = mujoco.rollout.rollout(
            models,
            self._threads,
            np.tile(np.asarray(self._init), (len(gains), 1)),
            np.tile(np.asarray(self._ctrl), (len(gains), 1, 1)),
            control_spec=int(mujoco.mjtState.mjSTATE_CTRL),
            persistent_pool=True,
        )
        # State after step k is the state at step k + 1: period p ends at step p * nsub - 1.
        q = state[:, self.nsub - 1 :: self.nsub, 1 : 1 + self.dof]
        first = np.tile(self.measured[:, :1], (len(gains), 1, 1))
        return np.concatenate([first, q], axis=1).reshape(len(gains), e, -1, self.dof)


def _check_motion(rec: HandRecording) -> None:
    moved = float(np.ptp(rec.target, axis=1).max())
    if moved < 0.05:
        raise SysIdError(
            f"{rec.source}: field 'target' barely moves ({moved:.3f} rad); record episodes "
            "from hand_excitation() with record_hands instead"
        )
    followed = float(np.ptp(rec.q, axis=1).max())
    if followed < 0.2 * moved:
        raise SysIdError(
            f"{rec.source}: field 'q' moves {followed:.3f} rad while the targets move "
            f"{moved:.3f} rad; the hand did not follow, record it again"
        )


def _per_joint(values: tuple[float, ...], dof: int) -> np.ndarray:
    return np.resize(np.asarray(values, dtype=float), dof)


def fit_hand(
    recordings: Sequence[HandRecording],
    nominal: WorldSpec,
    max_iter: int = 8,
    progress: bool = True,
) -> HandActuatorSpec:
    """Least-squares fit of per-joint kp and kv (one per hand joint each) to joint-angle
    errors (degrees) of the recorded episodes simulated open loop from rest."""
    for rec in recordings:
        _check_motion(rec)
    sim = HandSimulator(recordings, nominal)
    dof = sim.dof
    kp0, kv0 = _per_joint(nominal.hand.kp, dof), _per_joint(nominal.hand.kv, dof)
    finger = np.arange(dof) // _JOINTS_PER_FINGER
    slot = np.arange(dof) % _JOINTS_PER_FINGER

    def gains(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return kp0 * np.exp(x[:dof]), kv0 * np.exp(x[dof:])

    def residuals(pred: np.ndarray) -> np.ndarray:
        return np.degrees(pred - sim.measured[None]).reshape(len(pred), -1)

    bar = tqdm(total=max_iter, desc="fit hand", unit="iter", disable=not progress)

    @last_value
    def fun(x: np.ndarray) -> np.ndarray:
        res = residuals(sim.predict([gains(x)]))[0]
        bar.set_postfix(deg=f"{np.sqrt(np.mean(res**2)):.4f}")
        return res

    def jac(x: np.ndarray) -> np.ndarray:
        # Perturb joint k of every finger at once; a finger's residuals see only its own.
        groups = [(half, k) for half in (0, 1) for k in range(_JOINTS_PER_FINGER)]
        cands = []
        for half, k in groups:
            dx = np.zeros_like(x)
            dx[half * dof + np.flatnonzero(slot == k)] = _FD_STEP
            cands.append(gains(x + dx))
        diff = (residuals(sim.predict(cands)) - fun(x)[None]) / _FD_STEP
        diff = diff.reshape(len(groups), -1, dof)
        out = np.zeros((diff.shape[1], dof, 2 * dof))
        for g, (half, k) in enumerate(groups):
            for j in range(dof):
                cols = half * dof + np.flatnonzero((slot == k) & (finger == finger[j]))
                out[:, j, cols[0]] = diff[g, :, j]
        bar.update()
        return out.reshape(-1, 2 * dof)

    lo, hi = np.full(2 * dof, _LOG_BOUNDS[0]), np.full(2 * dof, _LOG_BOUNDS[1])
    sol = least_squares(
        fun, np.zeros(2 * dof), jac=jac, bounds=(lo, hi), method="trf",
        max_nfev=max_iter, xtol=1e-4,
    )  # fmt: skip
    bar.close()
    kp, kv = gains(sol.x)
    return nominal.hand.replace(kp=tuple(kp.tolist()), kv=tuple(kv.tolist()))


@dataclass(frozen=True)
class HandFit:
    """Fitted hand actuators and their validation figures, with traces for plotting."""

    hand: HandActuatorSpec
    nominal: HandActuatorSpec
    fingertip_rms_mm: float  # Median over validation episodes.
    nominal_fingertip_rms_mm: float
    episode_rms_mm: np.ndarray  # (E,) fitted, per validation episode
    nominal_episode_rms_mm: np.ndarray  # (E,)
    measured_q: np.ndarray  # (E, T, 20)
    predicted_q: np.ndarray  # (E, T, 20)
    predicted_nominal_q: np.ndarray  # (E, T, 20)
    measured_tips: np.ndarray  # (E, T, 5, 3) in the palm frame
    predicted_tips: np.ndarray  # (E, T, 5, 3)


def fingertips(q: np.ndarray, side: str) -> np.ndarray:
    """Fingertip positions (..., 5, 3) in the palm frame of joint positions (..., H)."""
    kin = HandKinematics(side)
    flat = q.reshape(-1, q.shape[-1])
    tips = np.array([kin.forward(qi)[list(TIPS)] for qi in flat])
    return tips.reshape(*q.shape[:-1], len(TIPS), 3)


def evaluate_hand(
    recordings: Sequence[HandRecording], nominal: WorldSpec, hand: HandActuatorSpec
) -> HandFit:
    """Open-loop predictions of (validation) episodes with ``hand`` and with the nominal
    actuators; fingertip RMS error per episode and its median."""
    for rec in recordings:
        _check_motion(rec)
    sim = HandSimulator(recordings, nominal)
    dof = sim.dof
    nominal_gains = (_per_joint(nominal.hand.kp, dof), _per_joint(nominal.hand.kv, dof))
    pred, pred_nom = sim.predict(
        [(_per_joint(hand.kp, dof), _per_joint(hand.kv, dof)), nominal_gains]
    )
    sides = [r.side for r in recordings for _ in range(r.episodes)]
    meas_tips, fit_tips, nom_tips = (
        np.stack([fingertips(q, s) for q, s in zip(qs, sides, strict=True)])
        for qs in (sim.measured, pred, pred_nom)
    )

    def rms(tips: np.ndarray) -> np.ndarray:
        err = 1e3 * np.linalg.norm(tips - meas_tips, axis=-1)  # (E, T, 5)
        return np.sqrt(np.mean(err**2, axis=(1, 2)))

    per, per_nom = rms(fit_tips), rms(nom_tips)
    return HandFit(
        hand, nominal.hand, float(np.median(per)), float(np.median(per_nom)), per, per_nom,
        sim.measured, pred, pred_nom, meas_tips, fit_tips,
    )  # fmt: skip
