"""``verify``: check that every file of a dataset is there, readable and consistent."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import av
import numpy as np

from r2s2r.data.config import ACTION_KEY, STATE_KEY, DatasetError
from r2s2r.data.continuity import discontinuities
from r2s2r.data.layout import EPISODES_PATH, INFO_PATH, PARTIAL, PENDING_DIR, STATS_PATH, read_json
from r2s2r.data.reader import Dataset
from r2s2r.data.video import VideoReader, count_packets

# Discontinuities listed per episode and vector before the rest are counted.
MAX_JUMPS_SHOWN = 3
# How far a timestamp may be from ``frame_index / fps`` (LeRobot's default tolerance).
TOLERANCE_S = 1e-4


@dataclass
class Report:
    """What ``verify`` found: faults make the dataset invalid, notes do not."""

    faults: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    episodes: int = 0
    frames: int = 0

    @property
    def ok(self) -> bool:
        return not self.faults


def verify(root: str | Path, decode: bool = False) -> Report:
    """Check the dataset at ``root``; ``decode`` also decodes every video frame."""
    report = Report()
    try:
        ds = Dataset(root)
        read_json(ds.root / STATS_PATH)
    except DatasetError as err:
        report.faults.append(str(err))
        return report
    root = ds.root
    report.episodes, report.frames = ds.num_episodes, len(ds)
    info = ds.info
    if (info["total_episodes"], info["total_frames"]) != (ds.num_episodes, len(ds)):
        report.faults.append(
            f"{root / INFO_PATH}: totals ({info['total_episodes']} episodes, "
            f"{info['total_frames']} frames) differ from {EPISODES_PATH} ({ds.num_episodes}, "
            f"{len(ds)}); an interrupted save? Reopening with DatasetWriter repairs it"
        )
    expected_start = 0
    # Per video file: (frames, width, height) or None where unreadable, and the frames its
    # episodes take, which must tile it.
    videos: dict[Path, tuple[int, int, int] | None] = {}
    spans: dict[Path, list[tuple[int, int, int]]] = {}
    for i, row in enumerate(ds.episodes):
        if row["episode_index"] != i or row["dataset_from_index"] != expected_start:
            report.faults.append(
                f"{root / EPISODES_PATH}: row {i} has episode_index {row['episode_index']}, "
                f"from_index {row['dataset_from_index']} (expected {i}, {expected_start})"
            )
        expected_start = row["dataset_to_index"]
        _check_data(ds, i, report)
        for key in ds.camera_keys:
            _check_video(ds, i, key, decode, report, videos, spans)
    for path, taken in spans.items():
        _check_tiling(path, taken, videos.get(path), report)
    referenced = set(ds.files())
    for path in sorted(root.rglob("*")):
        top = path.relative_to(root).parts[0]
        data_file = path.suffix in (".parquet", ".mp4") and top in ("data", "videos", PENDING_DIR)
        if data_file and path.is_file() and (PARTIAL in path.name or path not in referenced):
            report.notes.append(
                f"{path}: not part of any saved episode (left by an interrupted writer; "
                "reopening with DatasetWriter removes it)"
            )
    ds.close()
    return report


def _check_data(ds: Dataset, i: int, report: Report) -> None:
    row = ds.episodes[i]
    path = ds.data_file(i)
    try:
        arrays = ds.episode_arrays(i)
    except DatasetError as err:
        report.faults.append(str(err))
        return
    n = int(row["length"])
    length = len(arrays["timestamp"])
    if length != n or row["dataset_to_index"] - row["dataset_from_index"] != n:
        report.faults.append(f"{path}: {length} frames of episode {i}, the episodes table says {n}")
        return
    for key in ds.vector_keys:
        dim = ds.features[key]["shape"][0]
        if arrays[key].shape[1] != dim:
            report.faults.append(f"{path}: {key} has {arrays[key].shape[1]} entries, not {dim}")
    if not (arrays["episode_index"] == i).all():
        report.faults.append(f"{path}: episode_index column is not {i} throughout")
    if not (arrays["frame_index"] == np.arange(n)).all():
        report.faults.append(f"{path}: frame_index is not 0..{n - 1}")
    if not (arrays["index"] == np.arange(row["dataset_from_index"], row["dataset_to_index"])).all():
        report.faults.append(f"{path}: index column does not match the episodes table")
    if (
        ds.tasks
        and not ((arrays["task_index"] >= 0) & (arrays["task_index"] < len(ds.tasks))).all()
    ):
        report.faults.append(f"{path}: task_index outside meta/tasks.parquet")
    for key in (STATE_KEY, ACTION_KEY):
        if key not in arrays:
            continue
        jumps = discontinuities(arrays[key], ds.features[key].get("names"))
        for jump in jumps[:MAX_JUMPS_SHOWN]:
            report.faults.append(
                f"{path}: episode {i}, frame {jump.frame}: {key} {jump.channel} {jump.detail}"
                + (
                    "; `r2s2r dataset repair` makes quaternions continuous"
                    if "flips" in jump.detail
                    else ""
                )
            )
        if len(jumps) > MAX_JUMPS_SHOWN:
            report.faults.append(
                f"{path}: episode {i}: {len(jumps) - MAX_JUMPS_SHOWN} more discontinuities in {key}"
            )
    ts = arrays["timestamp"].astype(np.float64)
    if n > 1 and not (np.diff(ts) > 0).all():
        report.faults.append(f"{path}: timestamps are not strictly increasing")
    off = np.abs(ts - ts[0] - np.arange(n) / ds.fps)
    if off.max(initial=0.0) > TOLERANCE_S:
        k = int(off.argmax())
        report.faults.append(
            f"{path}: timestamp of frame {k} is {ts[k]:.6f}, {off[k]:.6f} s off the 1/{ds.fps} s "
            "grid"
        )


def _check_video(
    ds: Dataset,
    i: int,
    key: str,
    decode: bool,
    report: Report,
    videos: dict[Path, tuple[int, int, int] | None],
    spans: dict[Path, list[tuple[int, int, int]]],
) -> None:
    row = ds.episodes[i]
    path = ds.video_file(i, key)
    if path not in videos:
        videos[path] = None
        if not path.is_file():
            report.faults.append(f"{path}: missing")
            return
        try:
            videos[path] = count_packets(path)
        except (av.FFmpegError, DatasetError, OSError) as err:
            report.faults.append(f"{path}: not a readable video ({err})")
            return
    found = videos[path]
    if found is None:
        return
    frames, width, height = found
    n = int(row["length"])
    start_s = float(row[f"videos/{key}/from_timestamp"])
    start = round(start_s * ds.fps)
    if abs(start_s - start / ds.fps) > TOLERANCE_S:
        report.faults.append(
            f"{path}: episode {i} starts at {start_s:.6f} s, off the 1/{ds.fps} s frame grid"
        )
    spans.setdefault(path, []).append((start, n, i))
    h, w, _ = ds.features[key]["shape"]
    if (width, height) != (w, h) and len(spans[path]) == 1:
        report.faults.append(f"{path}: {width}x{height}, info.json says {w}x{h}")
    span = row[f"videos/{key}/to_timestamp"] - start_s
    if abs(span - n / ds.fps) > TOLERANCE_S:
        report.faults.append(
            f"{path}: the episodes table spans {span:.4f} s for {n} frames at {ds.fps} fps"
        )
    if start + n > frames:
        report.faults.append(
            f"{path}: {frames} frames, episode {i} needs frames {start} to {start + n - 1}"
        )
        return
    if decode:
        try:
            VideoReader(ds.fps, 1).frames(path, start, n)
        except DatasetError as err:
            report.faults.append(str(err))


def _check_tiling(
    path: Path,
    taken: list[tuple[int, int, int]],
    found: tuple[int, int, int] | None,
    report: Report,
) -> None:
    """The episodes in one video file take its frames in order, each frame once."""
    if found is None:
        return
    at = 0
    for start, n, i in sorted(taken):
        if start != at:
            report.faults.append(
                f"{path}: episode {i} starts at frame {start}, the one before ends at {at}"
            )
        at = start + n
    if at != found[0]:
        report.faults.append(f"{path}: {found[0]} frames, its episodes take {at}")
