"""System identification on the twin: recordings, parquet files, arm and hand fits, and
the errors bad recordings raise. The twin's truth is read here only to judge the fits."""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path

import numpy as np
import pytest

from r2s2r.ground.sysid import (
    ARM_PARAMS,
    ArmRecording,
    HandRecording,
    SysIdCfg,
    SysIdError,
    SysIdRecordings,
    arm_excitation,
    evaluate_arm,
    evaluate_hand,
    fit_arm,
    fit_hand,
    hand_excitation,
    identify,
    record_arms,
    record_sysid,
)
from r2s2r.rig.safety import SafetyLimits, SafetySupervisor
from r2s2r.rig.twin import TwinRig
from r2s2r.rig.twin.imperfect import Imperfections, Unmodelled
from r2s2r.sim import robots

SHORT = SysIdCfg(
    arm_train_s=20.0,
    arm_held_out_s=8.0,
    hand_train_episodes=2,
    hand_val_episodes=1,
    hand_episode_s=3.0,
    stride_s=2.0,
)


def _supervised(
    seed: int, ideal: bool = False, imperfections: Imperfections | None = None
) -> tuple[TwinRig, SafetySupervisor]:
    logging.getLogger("r2s2r.safety").setLevel(logging.ERROR)
    rig = TwinRig(seed=seed, ideal=ideal, imperfections=imperfections)
    return rig, SafetySupervisor(rig.arms, rig.hands, rig.now, rig.embodiment)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def short() -> tuple[TwinRig, SysIdRecordings]:
    # The ideal twin: these tests check that the fit recovers the hidden parameters, which
    # only the ideal twin's surrogate can represent exactly (the full-length test below
    # grounds the imperfect one).
    rig, sup = _supervised(seed=3, ideal=True)
    return rig, record_sysid(sup, rig.step, SHORT, progress=False)


def test_arm_excitation_is_rich_and_inside_the_safety_limits() -> None:
    start = np.array([-0.35, -0.25, 1.05, 0.0, 0.7071068, -0.7071068, 0.0])
    lim = SafetyLimits()
    targets = arm_excitation(start, duration_s=40.0, seed=1, limits=lim)
    assert targets.shape == (2000, 7)
    np.testing.assert_allclose(targets[0], start, atol=1e-12)
    np.testing.assert_allclose(targets[-1], start, atol=1e-9)
    speed = np.linalg.norm(np.diff(targets[:, :3], axis=0), axis=1) * 50
    assert speed.max() <= lim.max_lin_vel and speed.max() > 0.85 * lim.max_lin_vel
    # Small and slow motion as well as fast moves.
    assert np.mean((speed > 0) & (speed < 0.1)) > 0.05
    assert (targets[:, :3] >= lim.workspace_min).all() and (
        targets[:, :3] <= lim.workspace_max
    ).all()
    turn = 2 * np.arccos(np.clip(np.abs(np.sum(targets[1:, 3:] * targets[:-1, 3:], 1)), 0, 1))
    assert turn.max() * 50 <= lim.max_ang_vel
    assert not np.allclose(targets, arm_excitation(start, duration_s=40.0, seed=2))
    ranges = robots.WUJI_HAND_JOINT_RANGES
    for episode in hand_excitation(3, ranges, duration_s=2.0, seed=0):
        assert episode.shape == (100, 20)
        assert (episode >= ranges[:, 0]).all() and (episode <= ranges[:, 1]).all()
        assert np.ptp(episode, axis=0).min() > 0.02


def test_recordings_round_trip_through_parquet(
    short: tuple[TwinRig, SysIdRecordings], tmp_path: Path
) -> None:
    _, recs = short
    arm = recs.arm_train[0]
    assert arm.t.shape == (1000,) and arm.tcp.shape == (1000, 7) and arm.hand_q.shape == (1000, 20)
    back = ArmRecording.load(arm.save(tmp_path / "arm.parquet"))
    for field in ("t", "target", "tcp", "q", "dq", "hand_q"):
        np.testing.assert_array_equal(getattr(back, field), getattr(arm, field))
    assert (back.side, back.hz, back.meta) == (arm.side, arm.hz, arm.meta)
    hand = recs.hand_train[1]
    again = HandRecording.load(hand.save(tmp_path / "hand.parquet"))
    assert again.q.shape == (2, 150, 20) and again.side == hand.side
    np.testing.assert_array_equal(again.target, hand.target)
    np.testing.assert_array_equal(again.arm_q, hand.arm_q)
    recs.save(tmp_path / "all")
    loaded = SysIdRecordings.load(tmp_path / "all")
    assert [r.side for r in loaded.arm_held_out] == ["left", "right"]
    np.testing.assert_array_equal(loaded.hand_val[0].q, recs.hand_val[0].q)


def test_arm_fit_recovers_the_controller_and_beats_nominal(
    short: tuple[TwinRig, SysIdRecordings],
) -> None:
    rig, recs = short
    fitted = fit_arm(recs.arm_train, rig.nominal, stride_s=SHORT.stride_s, progress=False)
    report = evaluate_arm(recs.arm_held_out, rig.nominal, fitted)
    assert report.tcp_rms_mm <= 2.0 and report.tcp_rms_deg <= 0.5
    assert report.nominal_tcp_rms_mm > 2.0 and report.nominal_tcp_rms_mm > 5 * report.tcp_rms_mm
    assert report.nominal_tcp_rms_deg > 5 * report.tcp_rms_deg
    assert len(report.predicted) == 2 and report.predicted[0].shape == report.measured[0].shape
    truth = rig.reveal_truth().world.controller
    for name in ("kp_pos", "kp_rot", "damping_ratio", "max_lin_vel", "max_lin_acc"):
        assert getattr(fitted, name) == pytest.approx(getattr(truth, name), rel=0.05), name
    assert fitted.delay_s == pytest.approx(truth.delay_s, abs=0.002)
    # The ideal twin's joints have no friction, and the fit finds none.
    assert truth.joint_friction == 0.0 and fitted.joint_friction < 0.01


def test_arm_fit_finds_joint_friction_that_the_gains_cannot_stand_in_for() -> None:
    # The ideal twin but for Coulomb friction in every arm joint, which the surrogate's one
    # joint_friction represents exactly (the imperfect twin's differs from joint to joint).
    friction = 0.3
    flaws = Imperfections(dynamics=Unmodelled(arm_friction_nm=(friction,) * 7))
    rig, sup = _supervised(seed=3, imperfections=flaws)
    start = sup.arm("left").state().tcp_pose

    def run(duration_s: float, seed: int) -> list[ArmRecording]:
        targets = {"left": arm_excitation(start, duration_s, seed=seed, limits=sup.limits)}
        return list(record_arms(sup, targets, rig.step, progress=False).values())

    train, held_out = run(20.0, 0), run(8.0, 1000)
    fitted = fit_arm(train, rig.nominal, stride_s=SHORT.stride_s, progress=False)
    assert fitted.joint_friction == pytest.approx(friction, rel=0.02)
    truth = rig.reveal_truth().world.controller
    for name in ("kp_pos", "kp_rot", "damping_ratio", "delay_s", "max_lin_vel", "max_lin_acc"):
        assert getattr(fitted, name) == pytest.approx(getattr(truth, name), rel=0.05), name
    report = evaluate_arm(held_out, rig.nominal, fitted)
    assert report.tcp_rms_mm <= 0.1 and report.tcp_rms_deg <= 0.05
    # Without the term the fit bends the gains and the delay to mimic the friction's lag and
    # deadband, and still misses the held-out run by far more.
    no_friction = [p for p in ARM_PARAMS if p != "joint_friction"]
    without = fit_arm(train, rig.nominal, no_friction, stride_s=SHORT.stride_s, progress=False)
    missed = evaluate_arm(held_out, rig.nominal, without)
    assert without.joint_friction == 0.0
    assert missed.tcp_rms_mm > 10 * report.tcp_rms_mm
    assert missed.tcp_rms_deg > 10 * report.tcp_rms_deg


def test_hand_fit_meets_the_fingertip_target_and_beats_nominal(
    short: tuple[TwinRig, SysIdRecordings],
) -> None:
    rig, recs = short
    hand = fit_hand(recs.hand_train, rig.nominal, max_iter=5, progress=False)
    report = evaluate_hand(recs.hand_val, rig.nominal, hand)
    assert report.fingertip_rms_mm <= 1.0
    assert report.nominal_fingertip_rms_mm > 1.0
    assert report.nominal_fingertip_rms_mm > 5 * report.fingertip_rms_mm
    assert report.measured_tips.shape == (2, 150, 5, 3) and len(report.episode_rms_mm) == 2
    truth = rig.reveal_truth().world.hand
    assert len(hand.kp) == len(hand.kv) == 20
    kp_err = np.abs(np.array(hand.kp) / np.array(truth.kp) - 1)
    assert np.median(kp_err) < 0.05


def test_recording_without_motion_is_refused() -> None:
    rig, sup = _supervised(seed=0)
    still = {s: np.tile(rig.arms[s].state().tcp_pose, (100, 1)) for s in ("left",)}
    recs = record_arms(sup, still, rig.step, settle_s=0.2, progress=False)
    with pytest.raises(SysIdError, match="barely moves.*arm_excitation"):
        fit_arm(list(recs.values()), rig.nominal, progress=False)
    # A run the supervisor had to slow down is not what the recording says was sent.
    fast = still["left"].copy()
    fast[50:, 0] += 0.1
    with pytest.raises(SysIdError, match="supervisor intervened"):
        record_arms(sup, {"left": fast}, rig.step, settle_s=0.2, progress=False)


def test_bad_files_and_fields_raise_clear_errors(
    short: tuple[TwinRig, SysIdRecordings], tmp_path: Path
) -> None:
    _, recs = short
    arm = recs.arm_held_out[0]
    path = arm.save(tmp_path / "arm.parquet")
    truncated = tmp_path / "truncated.parquet"
    truncated.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    with pytest.raises(SysIdError, match="truncated.parquet.*not a readable parquet"):
        ArmRecording.load(truncated)
    with pytest.raises(SysIdError, match="no such recording"):
        ArmRecording.load(tmp_path / "missing.parquet")
    hand_path = recs.hand_val[0].save(tmp_path / "hand.parquet")
    with pytest.raises(SysIdError, match="holds a 'hand' recording"):
        ArmRecording.load(hand_path)
    with pytest.raises(SysIdError, match="field 'tcp' has 399 rows but 't' has 400"):
        dataclasses.replace(arm, tcp=arm.tcp[:-1])
    with pytest.raises(SysIdError, match="field 'q' contains NaN"):
        dataclasses.replace(arm, q=np.where(np.arange(400)[:, None] == 7, np.nan, arm.q))
    with pytest.raises(SysIdError, match="not sampled at 50 Hz"):
        dataclasses.replace(arm, t=arm.t * 2)
    hand = recs.hand_val[0]
    with pytest.raises(SysIdError, match="field 'q' has 149 rows"):
        dataclasses.replace(hand, q=hand.q[:, :-1])
    still = dataclasses.replace(hand, target=np.repeat(hand.target[:, :1], 150, axis=1))
    with pytest.raises(SysIdError, match="barely moves.*hand_excitation"):
        fit_hand([still], TwinRig(seed=0).nominal, progress=False)
    with pytest.raises(SysIdError, match="no arm_train_<side>.parquet recordings"):
        SysIdRecordings.load(tmp_path)
    # The format holds any embodiment's joint counts, the same for every field of one kind;
    # the fit refuses a recording of another embodiment than the cell's, naming the field.
    with pytest.raises(SysIdError, match="field 'dq' has 6 arm joints but 'q' has 7"):
        dataclasses.replace(arm, dq=arm.dq[:, :6])
    other = dataclasses.replace(arm, hand_q=arm.hand_q[:, :16])
    back = ArmRecording.load(other.save(tmp_path / "other.parquet"))
    assert back.hand_q.shape == (400, 16)
    with pytest.raises(
        SysIdError, match="other.parquet: field 'hand_q' holds 16 hand joints.*has 20"
    ):
        fit_arm([back], TwinRig(seed=0).nominal, progress=False)
    with pytest.raises(SysIdError, match="other_hand.parquet: field 'q' holds 12 hand joints"):
        narrow = dataclasses.replace(hand, target=hand.target[..., :12], q=hand.q[..., :12])
        fit_hand(
            [HandRecording.load(narrow.save(tmp_path / "other_hand.parquet"))],
            TwinRig(seed=0).nominal,
            progress=False,
        )


# CI (make test-slow) identifies seed 0's twin; make test-long the other three.
@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, *(pytest.param(s, marks=pytest.mark.long) for s in (1, 2, 3))])
def test_full_length_identification_meets_the_reference_figures(seed: int) -> None:
    rig, sup = _supervised(seed)
    recs = record_sysid(sup, rig.step, SysIdCfg(), progress=False)
    assert recs.arm_train[0].duration_s == pytest.approx(80.0, abs=0.05)
    assert sum(r.episodes for r in recs.hand_train) == 12
    assert sum(r.episodes for r in recs.hand_val) == 6
    report = identify(recs, rig.nominal, progress=False)
    s = report.summary()
    # With its joint friction fitted the surrogate leaves 0.14-0.24 deg on seeds 0-3; without
    # it, the imperfect twin's friction held the orientation at 0.44-0.52 deg (README).
    assert s["tcp_rms_mm"] <= 2.0 and s["tcp_rms_deg"] <= 0.5
    assert s["nominal_tcp_rms_mm"] > 5 * s["tcp_rms_mm"]
    assert s["fingertip_rms_mm"] <= 1.0
    assert s["nominal_fingertip_rms_mm"] > 5 * s["fingertip_rms_mm"]
    grounded = report.world(rig.nominal)
    assert grounded.controller == report.arm.controller and grounded.hand == report.hand.hand
