"""``DatasetWriter``: records synchronized frames into a LeRobot v3 dataset, crash-safely.

While an episode is recorded its camera streams are encoded into ``*.partial.mp4`` files and
its low-dimensional data is held in memory. ``save_episode`` finishes the videos, writes the
episode's parquet file (both alone, as a pending episode: ``layout.pending_dir``), and then
rewrites the episodes table (the commit record), the stats and ``info.json``, each under a
temporary name, flushed and renamed into place. Pending episodes are joined into their
group's shared files (``r2s2r.data.groups``) when the group is full (``DatasetCfg.files``)
and when the writer closes. A writer killed at any point therefore loses at most the episode
it was recording; reopening the folder with a new writer removes the leftovers of what was
not committed and continues after the last committed episode, its pending episodes still in
the open group.
"""

from __future__ import annotations

import contextlib
import json
import math
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

import numpy as np
import pyarrow as pa

from r2s2r.data import episodes as ep
from r2s2r.data import groups
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
from r2s2r.data.continuity import continuous
from r2s2r.data.layout import (
    EPISODES_PATH,
    INFO_PATH,
    STATS_PATH,
    TASKS_PATH,
    commit,
    data_file,
    episode_data,
    episode_files,
    episode_video,
    group_location,
    group_number,
    info_json,
    is_pending,
    partial_path,
    pending_data,
    pending_video,
    read_json,
    read_parquet,
    video_file,
    write_json,
    write_parquet,
)
from r2s2r.data.video import EncodingThread, VideoEncoder
from r2s2r.sim.contract import ENV_STATE_DIM

# Frames per camera that may wait for the encoding thread (half a second at 50 frames/s).
ENCODE_QUEUE_FRAMES = 25

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

    # The episode being recorded (``_reset_buffer``): its encoders, the thread that feeds
    # them, and its image histograms.
    _encoders: dict[str, VideoEncoder]
    _encoding: EncodingThread | None
    _hist: dict[str, np.ndarray]

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
        # The next group's number, and the sizes (bytes) of the pending episodes' files.
        self._next_group = 1 + max(
            (
                group_number(r["data/chunk_index"], r["data/file_index"])
                for r in self._rows
                if not is_pending(r)
            ),
            default=-1,
        )
        self._pending_sizes = {
            int(r["episode_index"]): self._sizes_of(int(r["episode_index"]))
            for r in self._rows
            if is_pending(r)
        }
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
        if self._encoding is not None:
            self._encoding.check()
        # Everything is checked: now the frame goes in. Its images are coded on the writer's
        # encoding thread (copies: the caller may reuse its arrays).
        for cam in cfg.cameras:
            if cam.name not in self._encoders:
                final = pending_video(self.root, cam.key, self.num_episodes)
                self._encoders[cam.name] = VideoEncoder(
                    partial_path(final), cam.width, cam.height, cfg.fps, cfg.video
                )
            if self._encoding is None:
                self._encoding = EncodingThread(ENCODE_QUEUE_FRAMES * len(cfg.cameras))
            self._encoding.add(self._encoders[cam.name], frames[cam.name].copy())
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
        if self._next_group >= CHUNKS_SIZE * 1000:
            raise DatasetError(f"a dataset holds at most {CHUNKS_SIZE * 1000} files per camera")
        if self._encoding is not None:
            try:
                self._encoding.finish()
            except DatasetError as err:
                self.discard_episode()
                raise DatasetError(f"{err}; the episode was discarded") from err
        for cam in self.cfg.cameras:
            encoder = self._encoders.pop(cam.name)
            encoder.close()
            commit(encoder.path, pending_video(self.root, cam.key, index))
        new_task = task not in self._tasks
        task_index = self._tasks.setdefault(task, len(self._tasks))
        # Each quaternion stays on one hemisphere through the episode (data/continuity.py).
        vectors = {
            STATE_KEY: continuous(np.stack(self._states), self.contract.state_names()),
            ACTION_KEY: continuous(np.stack(self._actions), self.contract.action_names()),
        }
        if self.cfg.env_state:
            vectors[ENV_STATE_KEY] = np.stack(self._env_states)
        table = frame_table(
            index, self.num_frames, task_index, np.asarray(self._timestamps), vectors
        )
        write_parquet(pending_data(self.root, index), table)
        if new_task:
            write_parquet(self.root / TASKS_PATH, self._tasks_table())
        vec_stats = {key: st.vector_stats(x.astype(np.float32)) for key, x in vectors.items()}
        row = ep.make_row(
            self.cfg, index, task, n, self.num_frames, success, row_meta, vec_stats, self._hist
        )
        self._rows.append(row)
        self._write_meta()
        self._reset_buffer()
        self._pending_sizes[index] = self._sizes_of(index)
        self._close_full_groups()
        return index

    def make_continuous(self) -> list[int]:
        """Rewrite the saved episodes' state and action columns with each quaternion on one
        hemisphere through its episode (data/continuity.py), for datasets recorded before the
        writer kept them so; returns the episodes that changed. Each data file is replaced
        atomically and every episode's stats are recomputed from what is on disk, so a repair
        cut short is finished by running it again."""
        if self._timestamps:
            raise DatasetError("make_continuous: an episode is being recorded; save it first")
        names = {STATE_KEY: self.contract.state_names(), ACTION_KEY: self.contract.action_names()}
        by_file: dict[Path, list[int]] = {}
        for i, row in enumerate(self._rows):
            by_file.setdefault(episode_data(self.root, row), []).append(i)
        changed: list[int] = []
        for path, members in by_file.items():
            table = read_parquet(path)
            owners = table.column("episode_index").to_numpy()
            rewritten = False
            for key, entry_names in names.items():
                before = np.stack(table.column(key).to_numpy(zero_copy_only=False))
                after = before.copy()
                for i in members:
                    rows = owners == int(self._rows[i]["episode_index"])
                    after[rows] = continuous(before[rows], entry_names)
                    if not np.array_equal(after[rows], before[rows]):
                        changed.append(int(self._rows[i]["episode_index"]))
                    stats = st.vector_stats(after[rows].astype(np.float32))
                    for name in st.VECTOR_STATS:
                        self._rows[i][f"stats/{key}/{name}"] = np.ravel(stats[name]).tolist()
                if not np.array_equal(after, before):
                    flat = pa.array(np.ascontiguousarray(after, dtype=np.float32).ravel())
                    column = pa.FixedSizeListArray.from_arrays(flat, after.shape[1])
                    table = table.set_column(table.column_names.index(key), key, column)
                    rewritten = True
            if rewritten:
                write_parquet(path, table)
        self._write_meta()
        return sorted(set(changed))

    def video_file(self, index: int, camera_key: str) -> Path:
        """The file holding saved episode ``index``'s frames of one camera (pending or in its
        group's file)."""
        return episode_video(self.root, camera_key, self._rows[index])

    def close_group(self) -> None:
        """Join the pending episodes into the next group's files (see the module docstring)."""
        indices = sorted(self._pending_sizes)
        if not indices:
            return
        chunk, file = group_location(self._next_group)
        groups.join_data(
            [pending_data(self.root, i) for i in indices], data_file(self.root, chunk, file)
        )
        starts: list[dict[str, float]] = [{} for _ in indices]
        for cam in self.cfg.cameras:
            sources = [pending_video(self.root, cam.key, i) for i in indices]
            out = video_file(self.root, cam.key, chunk, file)
            times = groups.join_videos(sources, self.cfg.fps, out)
            for start, t in zip(starts, times, strict=True):
                start[cam.key] = t
        for i, start in zip(indices, starts, strict=True):
            self._rows[i] = ep.grouped(self.cfg, self._rows[i], chunk, file, start)
        self._write_episodes()  # The commit: the episodes are now in the group's files.
        self._next_group += 1
        self._pending_sizes.clear()
        for i in indices:
            groups.remove_pending(self.root, i)

    def _close_full_groups(self) -> None:
        """Close the open group before the newest episode if that one would take it past a
        limit or its videos were coded with other parameters (another encoder version, after
        a resume), and with it if the group is then full."""
        indices = sorted(self._pending_sizes)

        def over(members: list[int], strict: bool) -> bool:
            sizes = [self._pending_sizes[i] for i in members]
            return groups.over_limits(sizes, self.cfg.files, strict)

        if len(indices) > 1 and (
            over(indices, strict=True) or self._headers(indices[0]) != self._headers(indices[-1])
        ):
            newest = indices[-1]
            kept = self._pending_sizes.pop(newest)
            self.close_group()
            self._pending_sizes[newest] = kept
        if self._pending_sizes and over(sorted(self._pending_sizes), strict=False):
            self.close_group()

    def _headers(self, index: int) -> list[bytes | None]:
        """The codec parameters of a pending episode's videos (they must match to share a
        file)."""
        return [
            groups.stream_header(pending_video(self.root, c.key, index)) for c in self.cfg.cameras
        ]

    def _sizes_of(self, index: int) -> tuple[int, ...]:
        """(data bytes, video bytes per camera) of a pending episode."""
        paths = [pending_data(self.root, index)]
        paths += [pending_video(self.root, c.key, index) for c in self.cfg.cameras]
        missing = [p for p in paths if not p.is_file()]
        if missing:
            raise DatasetError(f"{missing[0]}: missing (episode {index} is pending)")
        return tuple(p.stat().st_size for p in paths)

    def discard_episode(self) -> None:
        """Drop the episode being recorded; nothing of it stays on disk."""
        if self._encoding is not None:
            with contextlib.suppress(DatasetError):
                self._encoding.finish()
        for encoder in self._encoders.values():
            encoder.abort()
        if self._encoders:
            groups.remove_pending(self.root, self.num_episodes)
        self._reset_buffer()

    def close(self) -> None:
        """Discard an unsaved episode, release the encoders and close the open group."""
        self.discard_episode()
        self.close_group()

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
        self._encoders = {}
        self._encoding = None
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
        if cfg is not None and not cfg.same_content(stored):
            raise DatasetError(f"{self.root}: exists with a different config: {stored}")
        if (self.root / EPISODES_PATH).is_file():
            self._rows = read_parquet(self.root / EPISODES_PATH).to_pylist()
        if (self.root / TASKS_PATH).is_file():
            table = read_parquet(self.root / TASKS_PATH)
            tasks = table.column("task").to_pylist()
            indices = table.column("task_index").to_pylist()
            self._tasks = dict(zip(tasks, indices, strict=True))
        keys = [c.key for c in stored.cameras]
        groups.remove_unreferenced(
            self.root, {p for r in self._rows for p in episode_files(self.root, r, keys)}
        )
        # A reopened dataset continues with the caller's group limits, if given.
        return stored if cfg is None else stored.replace(files=cfg.files)

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

    def _write_episodes(self) -> None:
        """Rewrite the episodes table: the commit record."""
        if self._rows:
            table = pa.Table.from_pylist(self._rows, schema=ep.schema(self.cfg))
            write_parquet(self.root / EPISODES_PATH, table)

    def _write_meta(self) -> None:
        """Rewrite the episodes table (the commit), then the stats and ``info.json``."""
        cfg = self.cfg
        self._write_episodes()
        write_json(self.root / STATS_PATH, st.to_json(ep.dataset_stats(cfg, self._rows)))
        info = info_json(
            cfg.to_json(),
            cfg.features(),
            episodes=self.num_episodes,
            frames=self.num_frames,
            tasks=len(self._tasks),
            files=cfg.files.model_dump(),
        )
        write_json(self.root / INFO_PATH, info)
