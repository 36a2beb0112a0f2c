"""A dataset's episodes for browsing and playback: the list with success labels, and one
episode's views and actions."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np


@dataclass(frozen=True)
class EpisodeInfo:
    """One episode of a dataset, as its episode list shows it."""

    index: int
    frames: int
    task: str
    success: bool
    objects: tuple[str, ...]


@dataclass(frozen=True)
class EpisodePlayback:
    """One episode to play back: every camera's frames and the recorded actions."""

    index: int
    fps: int
    views: dict[str, np.ndarray]  # Camera name -> (T, H, W, 3) uint8 RGB.
    actions: np.ndarray  # (T, action_dim).
    timestamps: np.ndarray  # (T,) seconds.


def list_episodes(root: str | Path) -> list[EpisodeInfo]:
    """The episodes of the dataset at ``root`` (none where it has no episode yet)."""
    from r2s2r.data import Dataset

    root = Path(root)
    if not (root / "meta" / "info.json").is_file():
        return []
    with Dataset(root) as ds:
        rows = list(ds.episodes)
    return [
        EpisodeInfo(
            index=i,
            frames=int(row["length"]),
            task=row["tasks"][0] if row.get("tasks") else "",
            success=bool(row.get("success", False)),
            objects=tuple(row.get("object_ids") or ()),
        )
        for i, row in enumerate(rows)
    ]


def load_episode(root: str | Path, index: int) -> EpisodePlayback:
    """Episode ``index`` of the dataset at ``root``, decoded."""
    from r2s2r.data import Dataset
    from r2s2r.data.config import ACTION_KEY

    with Dataset(root) as ds:
        arrays = ds.episode_arrays(index)
        views = {
            key.removeprefix("observation.images."): ds.episode_images(index, key)
            for key in ds.camera_keys
        }
        return EpisodePlayback(index, ds.fps, views, arrays[ACTION_KEY], arrays["timestamp"])
