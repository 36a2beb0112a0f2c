"""Where a dataset's files live, and how they are written so that a crash never leaves a
half-written file under a final name.

One data file and one video file per camera are written per episode (file index = episode
index within its chunk of ``CHUNKS_SIZE`` files), so that finishing an episode never rewrites
an earlier episode's files.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from r2s2r.data.config import CHUNKS_SIZE, DatasetError

DATA_PATH = "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
VIDEO_PATH = "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4"
EPISODES_PATH = "meta/episodes/chunk-000/file-000.parquet"
INFO_PATH = "meta/info.json"
STATS_PATH = "meta/stats.json"
TASKS_PATH = "meta/tasks.parquet"
# Files being written carry this suffix until they are complete.
PARTIAL = ".partial"


def chunk_file(episode_index: int) -> tuple[int, int]:
    """The (chunk, file) index pair of an episode's data and video files."""
    return divmod(episode_index, CHUNKS_SIZE)


def data_path(root: Path, episode_index: int) -> Path:
    chunk, file = chunk_file(episode_index)
    return root / DATA_PATH.format(chunk_index=chunk, file_index=file)


def video_path(root: Path, key: str, episode_index: int) -> Path:
    chunk, file = chunk_file(episode_index)
    return root / VIDEO_PATH.format(video_key=key, chunk_index=chunk, file_index=file)


def partial_path(path: Path) -> Path:
    """The name a file has while it is being written (same folder, same extension last)."""
    return path.with_name(path.stem + PARTIAL + path.suffix)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def commit(tmp: Path, path: Path) -> None:
    """Flush ``tmp`` to disk and rename it to ``path`` (atomic on POSIX)."""
    with open(tmp, "rb+") as f:
        os.fsync(f.fileno())
    os.replace(tmp, path)
    _fsync_dir(path.parent)


def write_atomic(path: Path, write: Callable[[Path], object]) -> None:
    """Call ``write(tmp)`` and move the finished file into place."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = partial_path(path)
    write(tmp)
    commit(tmp, path)


def write_json(path: Path, data: Any) -> None:
    """Write JSON atomically."""
    text = json.dumps(data, indent=2) + "\n"
    write_atomic(path, lambda tmp: tmp.write_text(text))


def write_parquet(path: Path, table: pa.Table) -> None:
    """Write a parquet file atomically (a parquet file is unreadable until its footer is)."""
    write_atomic(path, lambda tmp: pq.write_table(table, tmp))


def read_json(path: Path) -> Any:
    """Read a JSON file, naming the file in any error."""
    if not path.is_file():
        raise DatasetError(f"{path}: missing")
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise DatasetError(f"{path}: not readable JSON ({err})") from err


def read_parquet(path: Path) -> pa.Table:
    """Read a parquet file, naming the file in any error."""
    if not path.is_file():
        raise DatasetError(f"{path}: missing")
    try:
        return pq.read_table(path)
    except (OSError, pa.ArrowException) as err:
        raise DatasetError(f"{path}: not a readable parquet file ({err})") from err


def check_root(root: Path) -> Path:
    """``root`` if it holds a dataset, else a clear error."""
    root = Path(root)
    if not root.is_dir():
        raise DatasetError(f"{root}: not a folder")
    if not (root / INFO_PATH).is_file():
        raise DatasetError(f"{root}: not a dataset (no {INFO_PATH})")
    return root


def info_json(
    cfg_json: dict[str, Any],
    features: dict[str, Any],
    episodes: int,
    frames: int,
    tasks: int,
    data_mb: float,
    video_mb: float,
) -> dict[str, Any]:
    """The ``meta/info.json`` document."""
    return {
        "codebase_version": "v3.0",
        "robot_type": cfg_json["embodiment"]["name"],
        "total_episodes": episodes,
        "total_frames": frames,
        "total_tasks": tasks,
        "chunks_size": CHUNKS_SIZE,
        "data_files_size_in_mb": round(data_mb, 3),
        "video_files_size_in_mb": round(video_mb, 3),
        "fps": cfg_json["fps"],
        "splits": {"train": f"0:{episodes}"},
        "data_path": DATA_PATH,
        "video_path": VIDEO_PATH,
        "features": features,
        # This project's writer settings, so that a reopened dataset continues unchanged.
        "r2s2r": cfg_json,
    }
