"""``DatasetWriter``: records synchronized frames into a LeRobot v3 dataset, crash-safely.

While an episode is recorded its camera streams are encoded into ``*.partial.mp4`` files and
its low-dimensional data is held in memory. ``save_episode`` finishes the videos, writes the
episode's parquet file, and then rewrites the episodes table (the commit record), the stats
and ``info.json``, each under a temporary name, flushed and renamed into place. A writer
killed at any point therefore loses at most the episode it was recording; reopening the
folder with a new writer removes that episode's leftovers and continues after the last
committed episode.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

import numpy as np
import pyarrow as pa

from r2s2r.data import episodes as ep
from r2s2r.data import stats as st
from r2s2r.data.config import (
    ACTION_KEY,
    CHUNKS_SIZE,
    ENV_STATE_KEY,
    IMAGE_PREFIX,
    STATE_KEY,
    DatasetCfg,
    DatasetError,
)
from r2s2r.data.layout import (
    EPISODES_PATH,
    INFO_PATH,
    PARTIAL,
    STATS_PATH,
    TASKS_PATH,
    commit,
    data_path,
    info_json,
    partial_path,
    read_json,
    read_parquet,
    video_path,
    write_json,
    write_parquet,
)
from r2s2r.data.video import VideoEncoder
from r2s2r.sim.contract import ENV_STATE_DIM

_TASKS_PANDAS_META = {
    "index_columns": ["task"],
    "column_indexes": [
        {
            "name": None,
            "field_name": None,
            "pandas_type": "unicode",
            "numpy_type": "object",
            "metadata": {"encoding": "UTF-8"},
        }
    ],
    "columns": [
        {
            "name": "task_index",
            "field_name": "task_index",
            "pandas_type": "int64",
            "numpy_type": "int64",
            "metadata": None,
        },
        {
            "name": "task",
            "field_name": "task",
            "pandas_type": "unicode",
            "numpy_type": "object",
            "metadata": None,
        },
    ],
    "creator": {"library": "pyarrow", "version": pa.__version__},
    "pandas_version": "2.2.3",
}
_FILE_RE = re.compile(r"chunk-(\d+)/file-(\d+)\.(parquet|mp4)$")


def frame_table(
    episode_index: int,
    from_index: int,
    task_index: int,
    timestamps: np.ndarray,
    vectors: Mapping[str, np.ndarray],
) -> pa.Table:
    """The frame rows of one episode; ``vectors`` maps each vector feature (state, action,
    environment state) to its (T, D) values."""
    n = len(timestamps)

    def column(x: np.ndarray) -> pa.Array:
        flat = pa.array(np.ascontiguousarray(x, dtype=np.float32).ravel())
        return pa.FixedSizeListArray.from_arrays(flat, x.shape[1])

    return pa.table(
        {
            "index": pa.array(np.arange(from_index, from_index + n, dtype=np.int64)),
            "episode_index": pa.array(np.full(n, episode_index, dtype=np.int64)),
            "frame_index": pa.array(np.arange(n, dtype=np.int64)),
            "timestamp": pa.array(timestamps.astype(np.float32)),
            "task_index": pa.array(np.full(n, task_index, dtype=np.int64)),
            **{key: column(x) for key, x in vectors.items()},
        }
    )


class DatasetWriter:
    """Creates a dataset at ``root`` (with ``cfg``, default ``DatasetCfg()``) or reopens the
    one there and continues it (``cfg``, if given, must match the stored one). Frames follow
    the config's ``contract``: its proprio vector and its action."""

    def __init__(self, root: str | Path, cfg: DatasetCfg | None = None) -> None:
        self.root = Path(root)
        self._rows: list[dict[str, Any]] = []
        self._tasks: dict[str, int] = {}
        if (self.root / INFO_PATH).is_file():
            self.cfg = self._reopen(cfg)
        else:
            if self.root.exists() and any(self.root.iterdir()):
                raise DatasetError(f"{self.root}: not empty and not a dataset (no {INFO_PATH})")
            self.cfg = cfg or DatasetCfg()
            self.root.mkdir(parents=True, exist_ok=True)
        self.contract = self.cfg.contract
        self._sizes = self._file_sizes()
        self._write_meta()
        self._reset_buffer()

    # Recording.

    @property
    def num_episodes(self) -> int:
        """Committed episodes."""
        return len(self._rows)

    @property
    def num_frames(self) -> int:
        """Committed frames."""
        return self._rows[-1]["dataset_to_index"] if self._rows else 0

    @property
    def buffered_frames(self) -> int:
        """Frames of the episode being recorded."""
        return len(self._timestamps)

    def add_frame(
        self,
        images: Mapping[str, np.ndarray],
        state: np.ndarray,
        action: np.ndarray,
        timestamp: float | None = None,
        env_state: np.ndarray | None = None,
    ) -> None:
        """Buffer one frame: (H, W, 3) uint8 per camera (short name or feature key), state
        (contract.state_dim,), action (contract.action_dim,), the time since the episode's
        start (default index / fps) and, in a dataset with ``env_state``, the presented
        object's pose (7,)."""
        cfg = self.cfg
        state = self._vector(STATE_KEY, state, self.contract.state_dim)
        action = self._vector(ACTION_KEY, action, self.contract.action_dim)
        if cfg.env_state != (env_state is not None):
            raise DatasetError(
                f"{ENV_STATE_KEY}: this dataset "
                + ("needs one per frame" if cfg.env_state else "was created without it")
            )
        env = None if env_state is None else self._vector(ENV_STATE_KEY, env_state, ENV_STATE_DIM)
        frames = {k.removeprefix(IMAGE_PREFIX): v for k, v in images.items()}
        names = [c.name for c in cfg.cameras]
        if set(frames) != set(names):
            raise DatasetError(
                f"images: expected cameras {names}, got {sorted(images)}"
                f" (keys may be short names or '{IMAGE_PREFIX}<name>')"
            )
        for cam in cfg.cameras:
            img = np.asarray(frames[cam.name])
            want = (cam.height, cam.width, 3)
            if img.shape != want or img.dtype != np.uint8:
                raise DatasetError(
                    f"{cam.key}: expected shape {want} uint8, got {img.shape} {img.dtype}"
                )
            frames[cam.name] = img
        n = len(self._timestamps)
        t = n / cfg.fps if timestamp is None else float(timestamp)
        if not math.isfinite(t) or (n and t <= self._timestamps[-1]):
            last = self._timestamps[-1] if n else None
            raise DatasetError(f"timestamp: {t} must be finite and after the last one ({last})")
        # Everything is checked: now the frame goes in.
        for cam in cfg.cameras:
            if cam.name not in self._encoders:
                final = video_path(self.root, cam.key, self.num_episodes)
                self._encoders[cam.name] = VideoEncoder(
                    partial_path(final), cam.width, cam.height, cfg.fps, cfg.video
                )
            self._encoders[cam.name].add(frames[cam.name])
            self._hist[cam.key] += st.channel_histogram(frames[cam.name])
        self._states.append(state)
        self._actions.append(action)
        if env is not None:
            self._env_states.append(env)
        self._timestamps.append(t)

    def save_episode(self, task: str, success: bool, meta: Mapping[str, Any] | None = None) -> int:
        """Write the buffered episode and commit it; returns its episode index."""
        if not self._timestamps:
            raise DatasetError("save_episode: no frames were added since the last episode")
        row_meta = ep.check_meta(meta or {})
        index, n = self.num_episodes, len(self._timestamps)
        if index >= CHUNKS_SIZE * 1000:
            raise DatasetError(f"a dataset holds at most {CHUNKS_SIZE * 1000} episodes")
        for cam in self.cfg.cameras:
            encoder = self._encoders.pop(cam.name)
            encoder.close()
            final = video_path(self.root, cam.key, index)
            commit(encoder.path, final)
            self._sizes["video"] += final.stat().st_size
        new_task = task not in self._tasks
        task_index = self._tasks.setdefault(task, len(self._tasks))
        vectors = {STATE_KEY: np.stack(self._states), ACTION_KEY: np.stack(self._actions)}
        if self.cfg.env_state:
            vectors[ENV_STATE_KEY] = np.stack(self._env_states)
        table = frame_table(
            index, self.num_frames, task_index, np.asarray(self._timestamps), vectors
        )
        path = data_path(self.root, index)
        write_parquet(path, table)
        self._sizes["data"] += path.stat().st_size
        if new_task:
            write_parquet(self.root / TASKS_PATH, self._tasks_table())
        vec_stats = {key: st.vector_stats(x.astype(np.float32)) for key, x in vectors.items()}
        row = ep.make_row(
            self.cfg, index, task, n, self.num_frames, success, row_meta, vec_stats, self._hist
        )
        self._rows.append(row)
        self._write_meta()
        self._reset_buffer()
        return index

    def discard_episode(self) -> None:
        """Drop the episode being recorded; nothing of it stays on disk."""
        for encoder in self._encoders.values():
            encoder.abort()
        self._reset_buffer()

    def close(self) -> None:
        """Discard an unsaved episode and release the encoders."""
        self.discard_episode()

    def __enter__(self) -> DatasetWriter:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # Internals.

    def _reset_buffer(self) -> None:
        self._encoders: dict[str, VideoEncoder] = {}
        self._states: list[np.ndarray] = []
        self._actions: list[np.ndarray] = []
        self._env_states: list[np.ndarray] = []
        self._timestamps: list[float] = []
        self._hist = {c.key: np.zeros((3, 256), dtype=np.int64) for c in self.cfg.cameras}

    @staticmethod
    def _vector(name: str, value: np.ndarray, dim: int) -> np.ndarray:
        arr = np.asarray(value, dtype=np.float64)
        if arr.shape != (dim,):
            raise DatasetError(f"{name}: expected shape ({dim},), got {arr.shape}")
        if not np.isfinite(arr).all():
            bad = np.flatnonzero(~np.isfinite(arr)).tolist()
            raise DatasetError(f"{name}: non-finite values at entries {bad}")
        return arr

    def _reopen(self, cfg: DatasetCfg | None) -> DatasetCfg:
        info = read_json(self.root / INFO_PATH)
        if "r2s2r" not in info:
            raise DatasetError(
                f"{self.root / INFO_PATH}: not written by r2s2r's DatasetWriter; cannot append"
            )
        stored = DatasetCfg.from_json(info["r2s2r"])
        if cfg is not None and cfg != stored:
            raise DatasetError(f"{self.root}: exists with a different config: {stored}")
        if (self.root / EPISODES_PATH).is_file():
            self._rows = read_parquet(self.root / EPISODES_PATH).to_pylist()
        if (self.root / TASKS_PATH).is_file():
            table = read_parquet(self.root / TASKS_PATH)
            tasks = table.column("task").to_pylist()
            indices = table.column("task_index").to_pylist()
            self._tasks = dict(zip(tasks, indices, strict=True))
        self._remove_orphans()
        return stored

    def _remove_orphans(self) -> None:
        """Delete partial files and files of episodes that were never committed."""
        for path in list(self.root.rglob("*")):
            if not path.is_file():
                continue
            if PARTIAL in path.name:
                path.unlink()
                continue
            rel = path.relative_to(self.root).as_posix()
            match = _FILE_RE.search(rel)
            if match and rel.startswith(("data/", "videos/")):
                index = int(match[1]) * CHUNKS_SIZE + int(match[2])
                if index >= len(self._rows):
                    path.unlink()

    def _file_sizes(self) -> dict[str, int]:
        sizes = {"data": 0, "video": 0}
        for i in range(len(self._rows)):
            sizes["data"] += data_path(self.root, i).stat().st_size
            for cam in self.cfg.cameras:
                sizes["video"] += video_path(self.root, cam.key, i).stat().st_size
        return sizes

    def _tasks_table(self) -> pa.Table:
        table = pa.table(
            {
                "task_index": pa.array(list(self._tasks.values()), type=pa.int64()),
                "task": pa.array(list(self._tasks), type=pa.string()),
            }
        )
        # LeRobot reads this file with pandas and looks tasks up by the frame's index, which
        # pandas takes from this metadata.
        return table.replace_schema_metadata({"pandas": json.dumps(_TASKS_PANDAS_META)})

    def _write_meta(self) -> None:
        """Rewrite the episodes table (the commit), then the stats and ``info.json``."""
        cfg = self.cfg
        if self._rows:
            table = pa.Table.from_pylist(self._rows, schema=ep.schema(cfg))
            write_parquet(self.root / EPISODES_PATH, table)
        write_json(self.root / STATS_PATH, st.to_json(ep.dataset_stats(cfg, self._rows)))
        mb = 1024 * 1024
        info = info_json(
            cfg.to_json(),
            cfg.features(),
            episodes=self.num_episodes,
            frames=self.num_frames,
            tasks=len(self._tasks),
            data_mb=self._sizes["data"] / mb,
            video_mb=self._sizes["video"] / mb,
        )
        write_json(self.root / INFO_PATH, info)
