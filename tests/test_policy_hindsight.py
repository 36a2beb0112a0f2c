"""Hindsight targets (policy/hindsight.py): read from a take's own proprio, checked on made-up
states and against the twin's truth on a recorded take; the windows carry them standardized,
and the model's hindsight head learns them."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from r2s2r.data import Dataset
from r2s2r.policy.hindsight import (
    HINDSIGHT_DIM,
    PLACE_DIM,
    WAIT_CAP_S,
    episode_targets,
    place_targets,
    standardization,
)
from r2s2r.sim.contract import Contract
from r2s2r.sim.scene import nominal_embodiment

FPS = 50


@pytest.fixture(scope="module")
def contract() -> Contract:
    return Contract.of(nominal_embodiment(), "tcp")


def made_up_take(contract: Contract, frames: int = 120) -> np.ndarray:
    """Both arms at home; the second arm leaves at frame 30 (1 mm a frame along x), dips from
    frame 40 to its lowest at frame 60 while its hand closes from frame 50, then rises."""
    layout = contract.state_layout()
    e = contract.embodiment
    states = np.zeros((frames, contract.state_dim))
    tcp = np.zeros((frames, e.num_arms, 7))
    tcp[:, :, 2] = 1.0
    tcp[:, :, 3] = 1.0
    t = np.arange(frames)
    tcp[:, 1, 0] = np.clip(t - 9.5, 0, None) * 1e-3  # 20.5 mm from home at frame 30
    tcp[:, 1, 2] = 1.0 - 0.002 * np.clip(20 - np.abs(t - 60), 0, None)
    hand = np.zeros((frames, e.num_arms, e.hand_dof))
    hand[:, 1, :] = np.clip((t[:, None] - 50) / 10, 0, 1) * 0.5
    states[:, layout["tcp_pose"]] = tcp.reshape(frames, -1)
    states[:, layout["hand_joints"]] = hand.reshape(frames, -1)
    return states


def test_targets_of_a_made_up_take(contract: Contract) -> None:
    states = made_up_take(contract)
    out = episode_targets(states, contract, FPS)
    assert out.shape == (len(states), HINDSIGHT_DIM) and out.dtype == np.float32
    assert out[0, 0] == pytest.approx(30 / FPS)
    assert out[29, 0] == pytest.approx(1 / FPS) and (out[30:, 0] == 0).all()
    assert (out[:, 1] == -1).all()  # the second side moved
    layout = contract.state_layout()
    lowest = states[60, layout["tcp_pose"]].reshape(2, 7)[1, :3]
    np.testing.assert_allclose(out[:, 2:], np.tile(lowest, (len(states), 1)), atol=1e-6)
    # A long wait is capped.
    late = np.concatenate([np.repeat(states[:1], 500, axis=0), states])
    assert episode_targets(late, contract, FPS)[0, 0] == pytest.approx(WAIT_CAP_S)


def test_what_a_take_does_not_show_is_nan(contract: Contract) -> None:
    states = made_up_take(contract)
    still = np.repeat(states[:1], 50, axis=0)
    assert np.isnan(episode_targets(still, contract, FPS)).all()
    open_hand = states.copy()
    open_hand[:, contract.state_layout()["hand_joints"]] = 0.0
    out = episode_targets(open_hand, contract, FPS)
    assert np.isfinite(out[:, :2]).all() and np.isnan(out[:, 2:]).all()
    assert episode_targets(states[:0], contract, FPS).shape == (0, HINDSIGHT_DIM)


def test_the_place_is_the_grasp_point_carried_back_by_the_belt(contract: Contract) -> None:
    states = made_up_take(contract)
    out = place_targets(states, contract, FPS, belt_speed=0.05)
    assert out.shape == (len(states), PLACE_DIM) and out.dtype == np.float32
    layout = contract.state_layout()
    grasp = states[60, layout["tcp_pose"]].reshape(2, 7)[1, :3]
    np.testing.assert_allclose(out[60], grasp, atol=1e-6)
    # One second before the grasp the object was 5 cm upstream, at the same side and height.
    np.testing.assert_allclose(out[10], grasp - [0.05, 0.0, 0.0], atol=1e-6)
    assert np.isnan(out[61:]).all()
    # No grasp, no speed or no frames: nothing known.
    open_hand = states.copy()
    open_hand[:, layout["hand_joints"]] = 0.0
    assert np.isnan(place_targets(open_hand, contract, FPS, 0.05)).all()
    assert np.isnan(place_targets(states, contract, FPS, float("nan"))).all()
    assert place_targets(states[:0], contract, FPS, 0.05).shape == (0, PLACE_DIM)


def test_standardization_skips_unknown_values() -> None:
    targets = np.array([[1.0, 2.0, np.nan, 5, 5], [3.0, 2.0, np.nan, 5, 7]], dtype=np.float32)
    mean, std = standardization(targets)
    np.testing.assert_allclose(mean, [2, 2, 0, 5, 6])
    np.testing.assert_allclose(std, [1, 1, 1, 1, 1])


@pytest.fixture(scope="module")
def full_take(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One whole take of the twin's scripted operator (reach, grasp, sort), 64 px views."""
    from r2s2r.app.record import RecordRequest, record

    out = tmp_path_factory.mktemp("take") / "ds"
    record(RecordRequest(out=out, episodes=1, seed=3, image_size=64))
    return out


def test_a_recorded_takes_targets_agree_with_the_twins_truth(full_take: Path) -> None:
    ds = Dataset(full_take)
    assert ds.episodes[0].get("success"), "the scripted take should sort its object"
    low = ds.low_dim()
    states, objects = low["observation.state"], low["observation.environment_state"]
    out = episode_targets(states, ds.contract, ds.fps)
    assert np.isfinite(out).all()
    tcp = states[:, ds.contract.state_layout()["tcp_pose"]].reshape(len(states), 2, 7)[..., :3]
    arm = 0 if out[0, 1] > 0 else 1
    moved = np.linalg.norm(tcp - tcp[:1], axis=-1)  # (T, arms)
    start = int(np.argmax(out[:, 0] == 0))
    assert moved[start, arm] >= 0.02 > moved[start - 1, arm]
    assert moved[:, 1 - arm].max() < moved[:, arm].max()
    # The grasp point is the hand at the object: within a hand's reach of where the object
    # was when the hand got there (measured: 4-6 cm, the TCP sits behind the palm).
    at = int(np.argmin(np.linalg.norm(tcp[:, arm] - out[0, 2:], axis=-1)))
    assert np.linalg.norm(out[0, 2:4] - objects[at, :2]) < 0.08


def test_a_recorded_takes_place_follows_the_object_on_the_belt(full_take: Path) -> None:
    ds = Dataset(full_take)
    low = ds.low_dim()
    states, objects = low["observation.state"], low["observation.environment_state"]
    speed = float(ds.episodes[0]["belt_speed"])
    out = place_targets(states, ds.contract, ds.fps, speed)
    known = np.flatnonzero(np.isfinite(out[:, 0]))
    assert known[0] == 0 and len(known) > 50
    # Until the grasp the place moves with the object: their offset stays within a few cm
    # while the object rides tens of cm (measured on 100 takes: offsets 1.9 +- 2.6 cm along
    # the belt, 0.9 +- 2.1 cm aside).
    offset = out[known, :2] - objects[known, :2]
    assert np.ptp(objects[known, 0]) > 0.15
    assert np.ptp(offset[:, 0]) < 0.01 and np.abs(offset).max() < 0.08


def test_windows_carry_standardized_targets(full_take: Path, tmp_path: Path) -> None:
    from r2s2r.policy.windows import WindowDataset

    windows = WindowDataset(full_take, 64, 2, 4, cache_dir=tmp_path)
    values = np.stack([windows[i]["hindsight"] for i in range(len(windows))])
    assert values.shape == (len(windows), HINDSIGHT_DIM)
    known = np.isfinite(values).all(axis=0)
    np.testing.assert_allclose(values[:, known].mean(axis=0), 0.0, atol=1e-4)
    # The wait falls as the take goes on.
    assert values[0, 0] > values[len(values) // 2, 0]
    # The place rides the belt in metres, unknown after the grasp.
    place = np.stack([windows[i]["place"] for i in range(len(windows))])
    assert place.shape == (len(windows), PLACE_DIM)
    assert np.isfinite(place[0]).all() and np.isnan(place[-1]).all()
    assert place[10, 0] > place[0, 0]
