"""Where a dataset's files live, and how they are written so that a crash never leaves a
half-written file under a final name.

Episodes share files, as in LeRobot v3: a group of episodes has one data file and one video
file per camera, ``data/chunk-{c}/file-{f}.parquet`` and ``videos/{key}/chunk-{c}/file-{f}.mp4``
(group ``g`` is chunk ``g // CHUNKS_SIZE``, file ``g % CHUNKS_SIZE``), and the episodes table
says where each episode is: its group's chunk and file index and, per camera, the span
(``from_timestamp`` .. ``to_timestamp``) its frames take in the video. An episode of the
group still open is stored alone under ``pending/episode-{index}/`` until the group is closed
(``r2s2r.data.groups``); its rows carry chunk and file index ``PENDING``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable
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
# Episodes saved but not yet joined into their group's files.
PENDING_DIR = "pending"
# The chunk and file index of a pending episode in the episodes table.
PENDING = -1


def group_location(group: int) -> tuple[int, int]:
    """The (chunk, file) index pair of group ``group``'s files."""
    return divmod(group, CHUNKS_SIZE)


def group_number(chunk: int, file: int) -> int:
    """The inverse of ``group_location``."""
    return chunk * CHUNKS_SIZE + file


def data_file(root: Path, chunk: int, file: int) -> Path:
    return root / DATA_PATH.format(chunk_index=chunk, file_index=file)


def video_file(root: Path, key: str, chunk: int, file: int) -> Path:
    return root / VIDEO_PATH.format(video_key=key, chunk_index=chunk, file_index=file)


def pending_dir(root: Path, episode_index: int) -> Path:
    """Where a pending episode's files are."""
    return root / PENDING_DIR / f"episode-{episode_index:06d}"


def pending_data(root: Path, episode_index: int) -> Path:
    return pending_dir(root, episode_index) / "data.parquet"


def pending_video(root: Path, key: str, episode_index: int) -> Path:
    return pending_dir(root, episode_index) / f"{key}.mp4"


def is_pending(row: dict[str, Any]) -> bool:
    """Whether an episodes-table row is of a pending episode."""
    return int(row["data/chunk_index"]) == PENDING


def episode_data(root: Path, row: dict[str, Any]) -> Path:
    """The file holding the frames of the episode of ``row`` (an episodes-table row)."""
    chunk, file = int(row["data/chunk_index"]), int(row["data/file_index"])
    if chunk == PENDING:
        return pending_data(root, int(row["episode_index"]))
    return data_file(root, chunk, file)


def episode_video(root: Path, key: str, row: dict[str, Any]) -> Path:
    """The video file holding camera ``key``'s frames of the episode of ``row``."""
    chunk = int(row[f"videos/{key}/chunk_index"])
    file = int(row[f"videos/{key}/file_index"])
    if chunk == PENDING:
        return pending_video(root, key, int(row["episode_index"]))
    return video_file(root, key, chunk, file)


def episode_files(root: Path, row: dict[str, Any], keys: Iterable[str]) -> list[Path]:
    """The data file and the video files (of cameras ``keys``) holding an episode."""
    return [episode_data(root, row), *(episode_video(root, k, row) for k in keys)]


def partial_path(path: Path) -> Path:
    """The name a file has while it is being written (same folder, same extension last)."""
    return path.with_name(path.stem + PARTIAL + path.suffix)


def fsync_dir(path: Path) -> None:
    """Flush a folder's entries (renames, removals) to disk."""
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
    fsync_dir(path.parent)


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
    files: dict[str, Any],
) -> dict[str, Any]:
    """The ``meta/info.json`` document."""
    return {
        "codebase_version": "v3.0",
        "robot_type": cfg_json["embodiment"]["name"],
        "total_episodes": episodes,
        "total_frames": frames,
        "total_tasks": tasks,
        "chunks_size": CHUNKS_SIZE,
        # The largest a data file and a video file grow, as in LeRobot v3.
        "data_files_size_in_mb": files["data_mb"],
        "video_files_size_in_mb": files["video_mb"],
        "fps": cfg_json["fps"],
        "splits": {"train": f"0:{episodes}"},
        "data_path": DATA_PATH,
        "video_path": VIDEO_PATH,
        "features": features,
        # This project's writer settings, so that a reopened dataset continues unchanged.
        "r2s2r": cfg_json,
    }
