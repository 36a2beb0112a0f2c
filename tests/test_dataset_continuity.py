"""Quaternion continuity in recorded data: the writer keeps each quaternion of an episode on
one hemisphere, ``r2s2r dataset verify`` names a flip or a jump with its episode and frame,
``r2s2r dataset repair`` fixes a dataset recorded before (stats follow, a rerun changes
nothing), and the runtime's state history keeps the same convention."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from typer.testing import CliRunner

from r2s2r.cli import app
from r2s2r.data import CameraCfg, Dataset, DatasetCfg, DatasetWriter, VideoCfg, verify
from r2s2r.data.continuity import discontinuities, quaternion_starts
from r2s2r.data.layout import read_parquet, write_parquet
from r2s2r.geometry.rotations import continuous_quaternions, quat_to_mat, same_hemisphere
from r2s2r.runtime.request import StateHistory

runner = CliRunner()
CFG = DatasetCfg(
    cameras=(CameraCfg(name="head", height=16, width=16),), video=VideoCfg(lossless=True)
)
CONTRACT = CFG.contract
STATE_Q = quaternion_starts(CONTRACT.state_names())
ACTION_Q = quaternion_starts(CONTRACT.action_names())


def turning(frames: int) -> np.ndarray:
    """Unit quaternions (frames, 4) turning 1.5 turns about a tilted axis, each given with
    w >= 0 as rotation helpers return them: the sign flips where w crosses 0."""
    angle = np.linspace(0, 3 * np.pi, frames)
    axis = np.array([0.3, 0.8, 0.5]) / np.linalg.norm([0.3, 0.8, 0.5])
    q = np.concatenate([np.cos(angle / 2)[:, None], np.sin(angle / 2)[:, None] * axis], axis=1)
    return q * np.where(q[:, :1] < 0, -1.0, 1.0)


def take(frames: int = 60, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """States and actions of one made-up take whose left TCP turns through w = 0."""
    rng = np.random.default_rng(seed)
    states = rng.normal(scale=0.1, size=(frames, CONTRACT.state_dim))
    actions = rng.normal(scale=0.1, size=(frames, CONTRACT.action_dim))
    q = turning(frames)
    for s in STATE_Q:
        states[:, s : s + 4] = q
    for s in ACTION_Q:
        actions[:, s : s + 4] = q
    # Smooth otherwise: a random walk of small steps.
    for x in (states, actions):
        rest = np.ones(x.shape[1], bool)
        for s in quaternion_starts(
            CONTRACT.state_names() if x is states else CONTRACT.action_names()
        ):
            rest[s : s + 4] = False
        x[:, rest] = np.cumsum(x[:, rest] * 0.05, axis=0)
    return states, actions


def write(root: Path, takes: list[tuple[np.ndarray, np.ndarray]]) -> None:
    image = {"head": np.zeros((16, 16, 3), np.uint8)}
    with DatasetWriter(root, CFG) as writer:
        for states, actions in takes:
            for s, a in zip(states, actions, strict=True):
                writer.add_frame(image, s, a)
            writer.save_episode("sort", True)


def test_quaternion_names_and_the_helpers() -> None:
    assert STATE_Q == (3, 10) and ACTION_Q == (3, 30)
    q = turning(40)
    flips = np.flatnonzero(np.einsum("ij,ij->i", q[1:], q[:-1]) < 0)
    assert len(flips) >= 1
    fixed = continuous_quaternions(q, (0,))
    assert (np.einsum("ij,ij->i", fixed[1:], fixed[:-1]) >= 0).all()
    np.testing.assert_allclose(quat_to_mat(fixed), quat_to_mat(q), atol=1e-12)
    np.testing.assert_array_equal(fixed[0], q[0])
    np.testing.assert_array_equal(same_hemisphere(fixed[10], -fixed[11], (0,)), fixed[11])


def test_the_writer_records_one_hemisphere_and_verify_passes(tmp_path: Path) -> None:
    states, actions = take()
    assert discontinuities(states, CONTRACT.state_names())  # the input flips
    write(tmp_path / "ds", [(states, actions)])
    ds = Dataset(tmp_path / "ds")
    arrays = ds.episode_arrays(0)
    for key, starts in (("observation.state", STATE_Q), ("action", ACTION_Q)):
        for s in starts:
            q = arrays[key][:, s : s + 4].astype(np.float64)
            assert (np.einsum("ij,ij->i", q[1:], q[:-1]) > 0).all(), key
            np.testing.assert_allclose(quat_to_mat(q), quat_to_mat(turning(60)), atol=1e-5)
    assert verify(tmp_path / "ds").ok


def flip_on_disk(root: Path) -> None:
    """Rewrite the data files as the writer wrote them before: w >= 0 on every frame."""
    for path in sorted((root / "data").rglob("*.parquet")):
        table = read_parquet(path)
        for key, starts in (("observation.state", STATE_Q), ("action", ACTION_Q)):
            x = np.stack(table.column(key).to_numpy(zero_copy_only=False))
            for s in starts:
                x[:, s : s + 4] *= np.where(x[:, s : s + 1] < 0, -1.0, 1.0)
            column = pa.FixedSizeListArray.from_arrays(pa.array(x.ravel()), x.shape[1])
            table = table.set_column(table.column_names.index(key), key, column)
        write_parquet(path, table)


def test_verify_names_each_flip_and_repair_fixes_them(tmp_path: Path) -> None:
    root = tmp_path / "ds"
    write(root, [take(60, 0), take(45, 1)])
    before = Dataset(root).episode_arrays(1)
    flip_on_disk(root)
    report = verify(root)
    flips = [f for f in report.faults if "flips hemisphere" in f]
    assert flips and not report.ok
    assert any("episode 0, frame" in f and "observation.state left_tcp_q*" in f for f in flips)
    assert any("episode 1, frame" in f and "action right_tcp_q*" in f for f in flips)
    assert all("r2s2r dataset repair" in f for f in flips)
    out = runner.invoke(app, ["dataset", "verify", str(root)])
    assert out.exit_code == 1

    out = runner.invoke(app, ["dataset", "repair", str(root)])
    assert out.exit_code == 0, out.output
    assert "2 episode(s) made continuous (0, 1)" in out.output
    assert verify(root).ok
    after = Dataset(root)
    np.testing.assert_array_equal(after.episode_arrays(1)["action"], before["action"])
    # The stats follow the repaired values.
    states = after.low_dim()["observation.state"]
    np.testing.assert_allclose(
        after.stats()["observation.state"]["mean"], states.mean(0), atol=1e-5
    )
    again = runner.invoke(app, ["dataset", "repair", str(root)])
    assert "0 episode(s) made continuous" in again.output


def test_verify_names_a_channel_that_jumps(tmp_path: Path) -> None:
    states, actions = take()
    states[30, 0] += 0.5  # the left TCP's x, half a metre in one frame
    names = CONTRACT.state_names()
    jumps = discontinuities(continuous_quaternions(states, STATE_Q), names)
    assert [(j.frame, j.channel) for j in jumps] == [(30, "left_tcp_x"), (31, "left_tcp_x")]
    write(tmp_path / "ds", [(states, actions)])
    faults = verify(tmp_path / "ds").faults
    assert any("episode 0, frame 30: observation.state left_tcp_x steps 0.4" in f for f in faults)


@pytest.mark.parametrize("size", [1, 5])
def test_the_runtime_history_keeps_the_recorded_convention(size: int) -> None:
    states, _ = take(30)
    history = StateHistory(size, STATE_Q)
    for s in states:
        history.push(s)
    window, _ = history.window()
    expected = continuous_quaternions(states.astype(np.float32), STATE_Q)[-size:]
    np.testing.assert_allclose(window, expected, atol=1e-6)
