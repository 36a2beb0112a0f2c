"""``Dataset``: random access to a dataset's frames and policy windows.

The episodes table is the source of truth for what the dataset holds and where: each
episode's data file and, per camera, its video file and the span its frames take there
(``r2s2r.data.layout``). Low-dimensional data of every episode is read into memory on first
use (about 0.5 kB per frame); video frames are decoded on demand.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from r2s2r.data.config import (
    ACTION_KEY,
    ENV_STATE_KEY,
    STATE_KEY,
    CameraCfg,
    DatasetCfg,
    DatasetError,
)
from r2s2r.data.layout import (
    EPISODES_PATH,
    INFO_PATH,
    STATS_PATH,
    TASKS_PATH,
    check_root,
    episode_data,
    episode_files,
    episode_video,
    read_json,
    read_parquet,
)
from r2s2r.data.video import VideoReader
from r2s2r.sim.contract import Contract


def vectors(table: pa.Table, name: str, path: Path) -> np.ndarray:
    """A fixed-size list column as a (N, D) array."""
    if name not in table.column_names:
        raise DatasetError(f"{path}: no column {name!r}")
    col = table.column(name).combine_chunks()
    if not pa.types.is_fixed_size_list(col.type) and not pa.types.is_list(col.type):
        raise DatasetError(f"{path}: column {name!r} is {col.type}, expected a list")
    flat = col.flatten().to_numpy(zero_copy_only=False)
    return flat.reshape(len(col), -1)


class Dataset:
    """A dataset folder written by ``DatasetWriter`` (or another LeRobot v3 dataset)."""

    def __init__(self, root: str | Path) -> None:
        self.root = check_root(Path(root))
        self.info: dict[str, Any] = read_json(self.root / INFO_PATH)
        if self.info.get("codebase_version") != "v3.0":
            raise DatasetError(
                f"{self.root / INFO_PATH}: codebase_version "
                f"{self.info.get('codebase_version')!r}, expected 'v3.0'"
            )
        self.fps = int(self.info["fps"])
        self.features: dict[str, Any] = self.info["features"]
        self.camera_keys = [k for k, f in self.features.items() if f["dtype"] == "video"]
        # The per-frame vector features: state, action and, where recorded, environment state.
        self.vector_keys = tuple(
            k for k in (STATE_KEY, ACTION_KEY, ENV_STATE_KEY) if k in self.features
        )
        if (self.root / EPISODES_PATH).is_file():
            self.episodes = read_parquet(self.root / EPISODES_PATH).to_pylist()
        else:
            self.episodes = []
        self.tasks: list[str] = []
        if (self.root / TASKS_PATH).is_file():
            table = read_parquet(self.root / TASKS_PATH)
            order = np.argsort(table.column("task_index").to_numpy())
            self.tasks = [table.column("task")[int(i)].as_py() for i in order]
        self._starts = np.array([e["dataset_from_index"] for e in self.episodes], dtype=np.int64)
        # The keyframe interval bounds how far the decoder reads ahead before it seeks.
        gop = 250
        if self.camera_keys:
            gop = int(self.features[self.camera_keys[0]].get("info", {}).get("video.g", 250))
        self._video = VideoReader(self.fps, gop)
        self._low: dict[str, np.ndarray] | None = None
        # The data file read last, with its episode_index column: episodes share files.
        self._table: tuple[Path, pa.Table, np.ndarray] | None = None

    @property
    def cfg(self) -> DatasetCfg | None:
        """The writer's config, when the dataset was written by ``DatasetWriter``."""
        data = self.info.get("r2s2r")
        return DatasetCfg.from_json(data) if data else None

    @property
    def contract(self) -> Contract:
        """What the frames hold (embodiment, action mode, cameras), to check the dataset
        against an env or a rig with ``Contract.check_compatible``."""
        cfg = self.cfg
        if cfg is None:
            raise DatasetError(
                f"{self.root / INFO_PATH}: not written by r2s2r's DatasetWriter, so it records "
                "no embodiment to check against"
            )
        return cfg.contract

    @property
    def cameras(self) -> list[CameraCfg]:
        """Camera streams, by short name and size."""
        out = []
        for key in self.camera_keys:
            h, w, _ = self.features[key]["shape"]
            out.append(CameraCfg(name=key.removeprefix("observation.images."), height=h, width=w))
        return out

    def __len__(self) -> int:
        return int(self.episodes[-1]["dataset_to_index"]) if self.episodes else 0

    @property
    def num_episodes(self) -> int:
        return len(self.episodes)

    def episode(self, i: int) -> dict[str, Any]:
        """Episode ``i``'s row of the episodes table (metadata, index range, files, stats)."""
        if not 0 <= i < self.num_episodes:
            raise IndexError(f"episode {i} out of range (dataset has {self.num_episodes})")
        return self.episodes[i]

    def stats(self) -> dict[str, dict[str, np.ndarray]]:
        """``meta/stats.json`` as arrays."""
        raw = read_json(self.root / STATS_PATH)
        return {f: {k: np.asarray(v) for k, v in s.items()} for f, s in raw.items()}

    def low_dim(self) -> dict[str, np.ndarray]:
        """Every frame's state (N, state_dim), action (N, action_dim), timestamp (N,),
        episode_index (N,),
        frame_index (N,) and task_index (N,), in global index order."""
        if self._low is None:
            parts: dict[str, list[np.ndarray]] = {}
            for i in range(self.num_episodes):
                for key, value in self.episode_arrays(i).items():
                    parts.setdefault(key, []).append(value)
            keys = (*self.vector_keys, "timestamp", "episode_index", "frame_index")
            self._low = {
                k: np.concatenate(parts[k]) if parts else np.zeros(0) for k in (*keys, "task_index")
            }
        return self._low

    def data_file(self, i: int) -> Path:
        """The parquet file holding episode ``i``'s frame rows."""
        return episode_data(self.root, self.episode(i))

    def video_file(self, i: int, camera_key: str) -> Path:
        """The video file holding episode ``i``'s frames of one camera."""
        return episode_video(self.root, camera_key, self.episode(i))

    def video_start(self, i: int, camera_key: str) -> int:
        """The frame of ``video_file(i, camera_key)`` that episode ``i`` starts at."""
        start = self.episode(i).get(f"videos/{camera_key}/from_timestamp") or 0.0
        return round(float(start) * self.fps)

    def files(self) -> list[Path]:
        """Every data and video file the episodes table references, once each."""
        out: dict[Path, None] = {}
        for row in self.episodes:
            out.update(dict.fromkeys(episode_files(self.root, row, self.camera_keys)))
        return list(out)

    def episode_arrays(self, i: int) -> dict[str, np.ndarray]:
        """Episode ``i``'s frame rows read from its parquet file."""
        path = self.data_file(i)
        if self._table is None or self._table[0] != path:
            whole = read_parquet(path)
            if "episode_index" not in whole.column_names:
                raise DatasetError(f"{path}: no column 'episode_index'")
            self._table = (path, whole, whole.column("episode_index").to_numpy())
        _, whole, owners = self._table
        episode = int(self.episode(i)["episode_index"])
        rows = np.flatnonzero(owners == episode)
        if len(rows) and rows[-1] - rows[0] + 1 != len(rows):
            raise DatasetError(f"{path}: the rows of episode {episode} are not contiguous")
        table = whole.slice(int(rows[0]), len(rows)) if len(rows) else whole.slice(0, 0)
        out = {key: vectors(table, key, path) for key in self.vector_keys}
        for key in ("timestamp", "episode_index", "frame_index", "index", "task_index"):
            if key not in table.column_names:
                raise DatasetError(f"{path}: no column {key!r}")
            out[key] = table.column(key).to_numpy()
        return out

    def locate(self, index: int) -> tuple[int, int]:
        """(episode, frame within it) of global frame ``index``."""
        if not 0 <= index < len(self):
            raise IndexError(f"frame {index} out of range (dataset has {len(self)})")
        ep = int(np.searchsorted(self._starts, index, side="right")) - 1
        return ep, index - int(self._starts[ep])

    def image(self, camera_key: str, index: int) -> np.ndarray:
        """Global frame ``index`` of one camera; (H, W, 3) uint8."""
        ep, frame = self.locate(index)
        path = self.video_file(ep, camera_key)
        return self._video.frame(path, frame + self.video_start(ep, camera_key))

    def episode_images(self, i: int, camera_key: str) -> np.ndarray:
        """Every frame of episode ``i`` from one camera; (T, H, W, 3) uint8."""
        path, start = self.video_file(i, camera_key), self.video_start(i, camera_key)
        return self._video.frames(path, start, int(self.episode(i)["length"]))

    def frame(self, index: int) -> dict[str, Any]:
        """Global frame ``index``: state (S,), action (A,), environment state (7,) where
        recorded, timestamp, indices, task and one (H, W, 3) uint8 image per camera key."""
        low = self.low_dim()
        ep, frame = self.locate(index)
        out: dict[str, Any] = {
            **{key: low[key][index] for key in self.vector_keys},
            "timestamp": float(low["timestamp"][index]),
            "index": index,
            "episode_index": ep,
            "frame_index": frame,
            "task": self.tasks[int(low["task_index"][index])] if self.tasks else None,
        }
        for key in self.camera_keys:
            out[key] = self.image(key, index)
        return out

    def window(
        self, index: int, past_states: int = 20, future_actions: int = 40
    ) -> dict[str, np.ndarray]:
        """The policy's view at global frame ``index``: the last ``past_states`` states up to
        and including it (P, S), the next ``future_actions`` actions from it (F, A), and
        masks ``state_is_pad`` (P,) / ``action_is_pad`` (F,) that are True where the window
        ran past the episode's start or end and repeats its first state or last action."""
        low = self.low_dim()
        ep, _ = self.locate(index)
        first = int(self._starts[ep])
        last = int(self.episodes[ep]["dataset_to_index"]) - 1
        past = np.arange(index - past_states + 1, index + 1)
        future = np.arange(index, index + future_actions)
        return {
            STATE_KEY: low[STATE_KEY][np.clip(past, first, last)],
            "state_is_pad": past < first,
            ACTION_KEY: low[ACTION_KEY][np.clip(future, first, last)],
            "action_is_pad": future > last,
        }

    def close(self) -> None:
        """Close open video files."""
        self._video.close()

    def __enter__(self) -> Dataset:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
