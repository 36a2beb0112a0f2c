"""The teleop path: the tracker calibration, commands through the safety supervisor, and
the scripted human operator driving the twin."""

from __future__ import annotations

import logging

import numpy as np
import pytest
from scipy.spatial.transform import Rotation

from r2s2r.rig.bench import run_operator_episode
from r2s2r.rig.interfaces import HandKeypoints, HandTracker
from r2s2r.rig.safety import SafetySupervisor
from r2s2r.rig.teleop import TeleopSession, TrackerCalibration
from r2s2r.rig.teleop.operator import ScriptedOperator, TwinEyes
from r2s2r.rig.twin import TwinRig
from r2s2r.spec.worlds import sorting_arm

# Operator success on a fixed seed set (no cameras), against the target of 80 %.
# Measured on this project's machine: 20 of seeds 0-19, 50 of seeds 0-49 and 46 of seeds
# 50-99. The twin and the operator are deterministic per seed, so this is a regression floor
# at the target, not a statistical claim.
OPERATOR_SEEDS = range(20)
OPERATOR_FLOOR = 0.8


def _session(seed: int) -> tuple[TwinRig, SafetySupervisor, TeleopSession, ScriptedOperator]:
    rig = TwinRig(seed=seed)
    cal = TrackerCalibration.twin()
    sup = SafetySupervisor(rig.arms, rig.hands, rig.now, rig.embodiment)
    op = ScriptedOperator(seed, TwinEyes(rig), rig.task, rig.nominal, cal)
    return rig, sup, TeleopSession(rig, sup, cal), op


def _begin(rig: TwinRig, teleop: TeleopSession, op: ScriptedOperator) -> str:
    name = rig.presenter.present()
    side = sorting_arm(rig.task, rig.nominal, name)
    teleop.begin(side)
    op.begin(name, side)
    return side


def test_calibration_round_trips() -> None:
    cal = TrackerCalibration.twin()
    rng = np.random.default_rng(0)
    for _ in range(20):
        quat = Rotation.random(random_state=rng).as_quat(scalar_first=True)
        quat *= np.sign(quat[0])
        tcp = np.concatenate([rng.uniform(-0.5, 0.5, 3) + [0, 0, 1.0], quat])
        wrist = cal.wrist_from_tcp(tcp)
        assert not np.allclose(wrist[:3], tcp[:3], atol=0.1)  # A real change of frame.
        np.testing.assert_allclose(cal.tcp_from_wrist(wrist), tcp, atol=1e-9)
        np.testing.assert_allclose(cal.wrist_from_tcp(cal.tcp_from_wrist(wrist)), wrist, atol=1e-9)
    again = TrackerCalibration.from_dict(cal.to_dict())
    np.testing.assert_array_equal(again.T_cell_tracker, cal.T_cell_tracker)
    with pytest.raises(ValueError, match="rigid"):
        TrackerCalibration.from_dict({"T_cell_tracker": np.ones((4, 4)), "T_wrist_tcp": np.eye(4)})


def test_operator_is_a_hand_tracker_in_the_tracker_frame() -> None:
    rig, _, teleop, op = _session(1)
    side = _begin(rig, teleop, op)
    reading = op.read()
    assert isinstance(op, HandTracker)
    assert reading.keypoints.shape == (21, 3) and reading.wrist_pose.shape == (7,)
    np.testing.assert_allclose(reading.keypoints[0], 0.0, atol=0.005)  # The wrist frame.
    tcp = rig.arms[side].state().tcp_pose
    # The wrist pose is the tracker's, not the robot's; the calibration maps it onto the TCP.
    assert np.linalg.norm(reading.wrist_pose[:3] - tcp[:3]) > 0.5
    np.testing.assert_allclose(
        teleop.calibration.tcp_from_wrist(reading.wrist_pose)[:3], tcp[:3], atol=0.01
    )


def test_teleop_commands_go_through_the_supervisor_and_bad_frames_hold(
    caplog: pytest.LogCaptureFixture,
) -> None:
    rig, sup, teleop, op = _session(2)
    side = _begin(rig, teleop, op)
    other = "right" if side == "left" else "left"
    held = rig.arms[other].state().tcp_pose.copy()
    actions = []
    for _ in range(150):  # Until the operator is reaching.
        actions.append(teleop.step(op.read()))
        sup.tick()
        rig.step()
    action = actions[-1].reshape(2, 27)
    i = 0 if side == "left" else 1
    assert np.isfinite(action).all()
    np.testing.assert_allclose(action[1 - i, :7], held)  # The other arm holds.
    assert np.linalg.norm(rig.arms[other].state().tcp_pose[:3] - held[:3]) < 0.005
    # The supervisor accepted the operator's commands: no rejection, hold or stop so far.
    assert not [e for e in sup.events if e.kind in ("rejected", "hold", "stop")]

    good = op.read()
    bad = HandKeypoints(good.stamp, np.full((21, 3), np.nan), good.wrist_pose)
    hand_before = action[i, 7:].copy()
    with caplog.at_level(logging.INFO):
        bad_action = teleop.step(bad).reshape(2, 27)
    assert teleop.rejected_frames == 1
    assert any(e.kind == "hold" and e.device == f"{side}_arm" for e in sup.events)
    np.testing.assert_array_equal(bad_action[i, 7:], hand_before)  # The hand keeps its target.
    stop = rig.arms[side].state().tcp_pose
    np.testing.assert_allclose(bad_action[i, :7], stop)
    for _ in range(5):
        sup.tick()
        rig.step()
    assert np.linalg.norm(rig.arms[side].state().tcp_pose[:3] - stop[:3]) < 0.02

    nan_wrist = HandKeypoints(good.stamp, good.keypoints, np.full(7, np.nan))
    teleop.step(nan_wrist)
    assert any(e.kind == "rejected" and e.device == f"{side}_arm" for e in sup.events)
    assert teleop.rejected_frames == 2


def test_operator_success_rate_on_fixed_seeds() -> None:
    wins = sum(run_operator_episode(seed)[1] for seed in OPERATOR_SEEDS)
    assert wins / len(OPERATOR_SEEDS) >= OPERATOR_FLOOR


@pytest.mark.long
def test_operator_success_rate_on_a_hundred_seeds() -> None:
    outcomes = [run_operator_episode(seed) for seed in range(100)]
    assert sum(ok for _, ok in outcomes) >= 80, outcomes
