"""Episodes grouped into shared files (``r2s2r.data.groups``): many episodes give few files,
every episode reads back exactly (through our reader and through LeRobot v3's conventions
applied by hand), a writer killed at each step of a group's closing loses nothing saved and
the dataset reopens and continues, and verify, the frame cache and the robomimic export work
on grouped files."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import av
import h5py
import numpy as np
import pyarrow.parquet as pq
import pytest

from r2s2r.data import CameraCfg, Dataset, DatasetCfg, DatasetWriter, VideoCfg, export_robomimic
from r2s2r.data import verify as run_verify
from r2s2r.data.config import FilesCfg
from r2s2r.data.layout import PENDING_DIR
from r2s2r.policy.frames import FrameCache

# Frames that differ per episode, frame and camera (shared with the killed writer's script).
FRAMES_SOURCE = textwrap.dedent(
    """
    import numpy as np

    SIZE = 32
    NAMES = ("head", "left_wrist")

    def length(e):
        return 5 + (7 * e) % 11

    def image(e, k, cam):
        rng = np.random.default_rng([e, k, cam])
        base = np.full((SIZE, SIZE, 3), (40 * e + 3 * k) % 256, dtype=np.int64)
        return (base + rng.integers(0, 24, (SIZE, SIZE, 3))).clip(0, 255).astype(np.uint8)

    def vector(e, k, dim):
        # As a cell records them: small steps, unit TCP quaternions (state 68, action 54).
        x = np.random.default_rng([e, k, dim]).normal(size=dim) * 0.01
        for q in (3, 10) if dim == 68 else (3, 30):
            x[q : q + 4] = (1.0, 0.0, 0.0, 0.0)
        return x

    def write(writer, e):
        for k in range(length(e)):
            images = {n: image(e, k, c) for c, n in enumerate(NAMES)}
            state_dim, action_dim = writer.contract.state_dim, writer.contract.action_dim
            writer.add_frame(images, vector(e, k, state_dim), vector(e, k, action_dim))
        return writer.save_episode(f"task {e % 2}", bool(e % 3), {"seed": e})
    """
)
frames_ns: dict[str, Any] = {}
exec(FRAMES_SOURCE, frames_ns)
SIZE, NAMES = frames_ns["SIZE"], frames_ns["NAMES"]
length, image, vector, write = (frames_ns[k] for k in ("length", "image", "vector", "write"))
CAMERAS = tuple(CameraCfg(name=n, height=SIZE, width=SIZE) for n in NAMES)
LOSSLESS = DatasetCfg(cameras=CAMERAS, video=VideoCfg(lossless=True, gop=4))


def cfg_with(episodes: int | None = None, **limits: float) -> DatasetCfg:
    return LOSSLESS.replace(files=FilesCfg(episodes=episodes, **limits))


def episode_files(root: Path) -> list[str]:
    return sorted(
        p.relative_to(root).as_posix()
        for p in root.rglob("*")
        if p.is_file() and p.relative_to(root).parts[0] in ("data", "videos", PENDING_DIR)
    )


def check_exact(root: Path, count: int) -> None:
    """Every episode's vectors and lossless frames come back exactly, through our reader."""
    with Dataset(root) as ds:
        assert ds.num_episodes == count
        state_dim, action_dim = ds.contract.state_dim, ds.contract.action_dim
        for e in range(count):
            n = length(e)
            arrays = ds.episode_arrays(e)
            want = np.stack([vector(e, k, state_dim) for k in range(n)]).astype(np.float32)
            np.testing.assert_array_equal(arrays["observation.state"], want)
            want = np.stack([vector(e, k, action_dim) for k in range(n)]).astype(np.float32)
            np.testing.assert_array_equal(arrays["action"], want)
            np.testing.assert_array_equal(arrays["frame_index"], np.arange(n))
            assert ds.episode(e)["seed"] == e and ds.episode(e)["tasks"] == [f"task {e % 2}"]
            for c, cam in enumerate(CAMERAS):
                captured = np.stack([image(e, k, c) for k in range(n)])
                np.testing.assert_array_equal(ds.episode_images(e, cam.key), captured)
        # Random access lands on the right frame of the right episode inside a shared file.
        starts = np.cumsum([0] + [length(e) for e in range(count)])
        for index in np.random.default_rng(1).permutation(len(ds))[:20]:
            e = int(np.searchsorted(starts, index, side="right")) - 1
            k = int(index - starts[e])
            np.testing.assert_array_equal(ds.image(CAMERAS[1].key, int(index)), image(e, k, 1))


def lerobot_frames(root: Path, episode: int, key: str) -> np.ndarray:
    """An episode's frames found as LeRobot v3 finds them: the file from info.json's
    ``video_path`` template and the episode's chunk and file index, the frames from the
    episode's ``from_timestamp`` up to its ``to_timestamp``."""
    info = json.loads((root / "meta/info.json").read_text())
    rows = pq.read_table(root / "meta/episodes/chunk-000/file-000.parquet").to_pylist()
    row = rows[episode]
    path = root / info["video_path"].format(
        video_key=key,
        chunk_index=row[f"videos/{key}/chunk_index"],
        file_index=row[f"videos/{key}/file_index"],
    )
    lo, hi = row[f"videos/{key}/from_timestamp"], row[f"videos/{key}/to_timestamp"]
    tolerance = 1e-4  # LeRobot's tolerance_s.
    with av.open(str(path)) as container:
        frames = [
            f.to_ndarray(format="rgb24")
            for f in container.decode(video=0)
            if lo - tolerance <= float(f.time) < hi - tolerance
        ]
    return np.stack(frames)


def test_many_episodes_give_few_files_and_read_back_exactly(tmp_path: Path) -> None:
    root = tmp_path / "ds"
    with DatasetWriter(root, cfg_with(episodes=8)) as writer:
        for e in range(16):
            write(writer, e)
        # Two groups are closed; a take discarded now leaves no pending folder behind.
        images = {n: image(0, 0, c) for c, n in enumerate(NAMES)}
        writer.add_frame(images, vector(0, 0, 68), vector(0, 0, 54))
        assert (root / PENDING_DIR).is_dir()
        writer.discard_episode()
        assert not (root / PENDING_DIR).exists()
        for e in range(16, 20):
            write(writer, e)
    # 20 episodes in groups of at most 8: 3 groups, each one data file and one video per camera.
    files = episode_files(root)
    assert len(files) == 3 * (1 + len(CAMERAS)), files
    assert "data/chunk-000/file-002.parquet" in files and not (root / PENDING_DIR).exists()
    report = run_verify(root, decode=True)
    assert report.ok and not report.notes, (report.faults, report.notes)
    check_exact(root, 20)
    rows = pq.read_table(root / "meta/episodes/chunk-000/file-000.parquet").to_pylist()
    assert [r["data/file_index"] for r in rows] == [0] * 8 + [1] * 8 + [2] * 4
    # LeRobot's conventions: each data file holds its episodes' rows in order, and each
    # episode's frames are those between its from and to timestamps in its group's video.
    info = json.loads((root / "meta/info.json").read_text())
    assert (info["data_files_size_in_mb"], info["video_files_size_in_mb"]) == (100.0, 200.0)
    for e in (0, 7, 8, 19):
        row = rows[e]
        table = pq.read_table(
            root / info["data_path"].format(chunk_index=0, file_index=row["data/file_index"])
        )
        owners = table.column("episode_index").to_numpy()
        index = table.column("index").to_numpy()[owners == e]
        assert list(index) == list(range(row["dataset_from_index"], row["dataset_to_index"]))
        for c, cam in enumerate(CAMERAS):
            captured = np.stack([image(e, k, c) for k in range(length(e))])
            np.testing.assert_array_equal(lerobot_frames(root, e, cam.key), captured)
    # The robomimic export reads through the same locations.
    with Dataset(root) as ds:
        out = export_robomimic(ds, tmp_path / "demo.hdf5")
    with h5py.File(out) as f:
        assert len(f["data"]) == 20
        for e in (3, 8, 19):
            captured = np.stack([image(e, k, 0) for k in range(length(e))])
            np.testing.assert_array_equal(f[f"data/demo_{e}/obs/head_image"][:], captured)


def test_size_limits_close_groups_and_a_resumed_writer_continues(tmp_path: Path) -> None:
    """A group closes before an episode that would take its video past ``video_mb``; a
    reopened writer starts the next group, also over a dataset stored one file per episode."""
    root = tmp_path / "ds"
    with DatasetWriter(root, cfg_with(episodes=1)) as writer:
        for e in range(3):
            write(writer, e)
    assert len([f for f in episode_files(root) if f.endswith(".parquet")]) == 3
    # About 2.4 kB of lossless video per frame: 0.06 MB holds a few episodes, never one more.
    limit = 0.06
    with DatasetWriter(root, cfg_with(video_mb=limit)) as writer:
        assert writer.num_episodes == 3
        for e in range(3, 14):
            write(writer, e)
        assert writer.cfg.files.video_mb == limit
    with Dataset(root) as ds:
        by_file: dict[Path, list[int]] = {}
        for e in range(ds.num_episodes):
            by_file.setdefault(ds.video_file(e, CAMERAS[0].key), []).append(e)
    groups = list(by_file.values())
    assert groups[:3] == [[0], [1], [2]] and len(groups) < 11 and max(map(len, groups)) > 1
    for path, members in by_file.items():
        if len(members) > 1:
            assert path.stat().st_size <= limit * 2**20, (path, members)
    assert sorted(e for g in groups for e in g) == list(range(14))
    assert run_verify(root, decode=True).ok
    check_exact(root, 14)


def test_lossy_groups_verify_and_feed_the_frame_cache(tmp_path: Path) -> None:
    root = tmp_path / "ds"
    cfg = DatasetCfg(cameras=CAMERAS, files=FilesCfg(episodes=4))
    with DatasetWriter(root, cfg) as writer:
        for e in range(6):
            write(writer, e)
    assert run_verify(root, decode=True).ok
    with Dataset(root) as ds:
        cache = FrameCache(ds, SIZE, root=tmp_path / "cache")
        assert cache.build(threads=1) == 6 * len(CAMERAS)
        for e in (0, 3, 4, 5):
            decoded = ds.episode_images(e, CAMERAS[0].key)
            np.testing.assert_array_equal(cache.frames(e, NAMES[0]), decoded)
            captured = np.stack([image(e, k, 0) for k in range(length(e))]).astype(float)
            assert np.abs(decoded.astype(float) - captured).mean() < 8.0


# The writer saves episodes in groups of 3 and kills itself at one step of the first
# group's closing (that runs inside the third save_episode).
CRASH_SCRIPT = FRAMES_SOURCE + textwrap.dedent(
    """
    import os, signal, sys
    from pathlib import Path
    from r2s2r.data import CameraCfg, DatasetCfg, DatasetWriter, VideoCfg
    from r2s2r.data import groups, writer as writer_module
    from r2s2r.data.config import FilesCfg

    root, step = Path(sys.argv[1]), sys.argv[2]
    calls = {}

    def die_at(name, call, when="before"):
        real = getattr(groups, name)

        def wrapped(*args, **kwargs):
            calls[name] = calls.get(name, 0) + 1
            if calls[name] == call and when == "before":
                os.kill(os.getpid(), signal.SIGKILL)
            out = real(*args, **kwargs)
            if calls[name] == call and when == "after":
                os.kill(os.getpid(), signal.SIGKILL)
            return out

        setattr(groups, name, wrapped)

    cameras = len(NAMES)
    if step == "data_written":
        die_at("commit", 1)                     # the data file is written, not renamed
    elif step == "video_half_written":
        die_at("append_packets", 2)             # the first video holds one episode of three
    elif step == "data_committed":
        die_at("commit", 2)                     # the data file in place, a video not renamed
    elif step == "videos_committed":
        die_at("commit", 1 + cameras, "after")  # every file in place, the table not rewritten
    elif step == "table_committed":
        die_at("remove_pending", 1)             # the table points at the group, pending stays
    elif step == "pending_half_removed":
        die_at("remove_pending", 2)
    cams = tuple(CameraCfg(name=n, height=SIZE, width=SIZE) for n in NAMES)
    cfg = DatasetCfg(
        cameras=cams, video=VideoCfg(lossless=True, gop=4), files=FilesCfg(episodes=3)
    )
    writer = DatasetWriter(root, cfg)
    for e in range(3):
        write(writer, e)
    print("not killed")
    """
)
STEPS = (
    "data_written",
    "video_half_written",
    "data_committed",
    "videos_committed",
    "table_committed",
    "pending_half_removed",
)


@pytest.mark.parametrize("step", STEPS)
def test_writer_killed_while_closing_a_group_loses_nothing(tmp_path: Path, step: str) -> None:
    root = tmp_path / "ds"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run(
        [sys.executable, "-c", CRASH_SCRIPT, str(root), step],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == -signal.SIGKILL, (done.stdout, done.stderr)
    # Before the table is rewritten the three episodes are pending and the group's files
    # (whole or partial) unreferenced; after it they are in the group and the pending files
    # unreferenced. Either way every saved episode reads back, and verify only notes.
    assert any((root / PENDING_DIR).rglob("*.parquet"))
    rows = pq.read_table(root / "meta/episodes/chunk-000/file-000.parquet").to_pylist()
    grouped = step in ("table_committed", "pending_half_removed")
    assert [r["data/file_index"] for r in rows] == ([0] * 3 if grouped else [-1] * 3)
    partial = list(root.rglob("*.partial.*"))
    assert bool(partial) == (step in STEPS[:3]), partial
    report = run_verify(root, decode=True)
    assert report.ok, report.faults
    assert all("not part of any saved episode" in n for n in report.notes)
    check_exact(root, 3)
    # Reopened, the writer removes the leftovers, keeps the open group and continues.
    with DatasetWriter(root) as writer:
        assert writer.num_episodes == 3
        assert not list(root.rglob("*partial*"))
        for e in range(3, 5):
            write(writer, e)
    report = run_verify(root, decode=True)
    assert report.ok and not report.notes, (report.faults, report.notes)
    check_exact(root, 5)
    assert not (root / PENDING_DIR).exists() or not any((root / PENDING_DIR).iterdir())
    # Five episodes, at most two groups: the interrupted one (closed or reopened) and the rest.
    assert len([f for f in episode_files(root) if f.endswith(".parquet")]) == 2


def test_videos_coded_with_other_parameters_start_a_new_group(tmp_path: Path) -> None:
    """A pending episode whose videos were coded with other parameters (as after a resume
    under another encoder version) does not share a file with the episodes after it."""
    from r2s2r.data.layout import pending_video
    from r2s2r.data.video import VideoEncoder

    root = tmp_path / "ds"
    with DatasetWriter(root, cfg_with(episodes=5)) as writer:
        write(writer, 0)
        # Episode 0's first camera, coded again with the same frames and another preset.
        path = pending_video(root, CAMERAS[0].key, 0)
        other = VideoCfg(lossless=True, gop=4, preset="slow")
        encoder = VideoEncoder(path.with_name("other.mp4"), SIZE, SIZE, 50, other)
        for k in range(length(0)):
            encoder.add(image(0, k, 0))
        encoder.close()
        encoder.path.replace(path)
        for e in range(1, 4):
            write(writer, e)
    with Dataset(root) as ds:
        files = [ds.data_file(e).name for e in range(4)]
    assert files == ["file-000.parquet"] + ["file-001.parquet"] * 3
    assert run_verify(root, decode=True).ok
    check_exact(root, 4)


def test_group_limits_count_episodes_data_and_the_largest_camera() -> None:
    from r2s2r.data.groups import over_limits

    mb = 2**20
    limits = FilesCfg(data_mb=1.0, video_mb=2.0, episodes=3)
    # (data bytes, video bytes of camera 0, camera 1)
    small = (mb // 4, mb // 4, mb // 2)
    assert not over_limits([small, small], limits, strict=False)
    assert over_limits([small] * 3, limits, strict=False)  # Full at 3 episodes.
    assert not over_limits([small] * 3, limits, strict=True)  # Not more than it holds.
    assert over_limits([small] * 4, limits, strict=True)
    # Camera 1 reaches 2 MB first; camera 0's total never counts against camera 1's.
    wide = (1, 1, mb)
    assert over_limits([wide, wide], FilesCfg(data_mb=1.0, video_mb=2.0), strict=False)
    assert not over_limits([wide, wide], FilesCfg(data_mb=1.0, video_mb=2.0), strict=True)
    assert over_limits([(mb, 0, 0), (1, 0, 0)], FilesCfg(), strict=False) is False
    assert over_limits([(mb + 1, 0, 0)], FilesCfg(data_mb=1.0), strict=True)
