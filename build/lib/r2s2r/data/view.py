"""Look at an episode: a contact sheet of its camera views, or a rerun recording."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import cv2
import numpy as np

from r2s2r.data.config import ACTION_KEY, STATE_KEY, DatasetError
from r2s2r.data.reader import Dataset


def contact_sheet(dataset: Dataset, episode: int, columns: int = 8) -> np.ndarray:
    """One row per camera, ``columns`` evenly spaced frames of the episode; (H, W, 3) uint8."""
    row = dataset.episode(episode)
    n = int(row["length"])
    picks = np.unique(np.linspace(0, n - 1, min(columns, n)).round().astype(int))
    start = int(row["dataset_from_index"])
    cam_rows = []
    for key in dataset.camera_keys:
        tiles = []
        for k in picks:
            tile = np.ascontiguousarray(dataset.image(key, start + int(k)))
            label = f"{key.removeprefix('observation.images.')} t={k / dataset.fps:.2f}s"
            cv2.putText(tile, label, (2, 10), cv2.FONT_HERSHEY_PLAIN, 0.7, (255, 255, 0), 1)
            tiles.append(tile)
        cam_rows.append(np.concatenate(tiles, axis=1))
    width = max(r.shape[1] for r in cam_rows)
    cam_rows = [np.pad(r, ((0, 0), (0, width - r.shape[1]), (0, 0))) for r in cam_rows]
    return np.concatenate(cam_rows, axis=0)


def write_contact_sheet(dataset: Dataset, episode: int, out: str | Path, columns: int = 8) -> Path:
    """Write ``contact_sheet`` as a PNG."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    image = contact_sheet(dataset, episode, columns)
    if not cv2.imwrite(str(out), cv2.cvtColor(image, cv2.COLOR_RGB2BGR)):
        raise DatasetError(f"{out}: could not write the image")
    return out


def _rerun() -> Any:
    """The rerun SDK, imported here only (it is optional)."""
    try:
        import rerun
    except ImportError as err:
        raise ImportError(
            f"rerun could not be imported ({err}); install it with: pip install rerun-sdk"
        ) from err
    return rerun


def log_to_rerun(
    dataset: Dataset, episode: int, spawn: bool = True, save: str | Path | None = None
) -> None:
    """Log an episode's camera frames, state and action to rerun: to a spawned viewer, or
    with ``save`` to an ``.rrd`` file (``rerun FILE.rrd`` opens it), on the ``time`` and
    ``frame_index`` timelines."""
    rr = _rerun()
    rec = rr.RecordingStream(f"r2s2r_dataset_episode_{episode}")
    if save is not None:
        Path(save).parent.mkdir(parents=True, exist_ok=True)
        rec.save(str(save))
    elif spawn:
        rec.spawn()
    row = dataset.episode(episode)
    arrays = dataset.episode_arrays(episode)
    times = np.asarray(arrays["timestamp"], dtype=float)
    frames = np.arange(int(row["length"]))
    images = {key: dataset.episode_images(episode, key) for key in dataset.camera_keys}
    for k, t in zip(frames, times, strict=True):
        rec.set_time("frame_index", sequence=int(k))
        rec.set_time("time", duration=float(t))
        for key, views in images.items():
            rec.log(key, rr.Image(views[k]))
    # State and action as one scalar series per named entry, sent column-wise.
    indexes = [rr.TimeColumn("frame_index", sequence=frames), rr.TimeColumn("time", duration=times)]
    for key in (STATE_KEY, ACTION_KEY):
        for j, name in enumerate(dataset.features[key]["names"]):
            values = np.asarray(arrays[key][:, j], dtype=float)
            rec.send_columns(f"{key}/{name}", indexes, rr.Scalars.columns(scalars=values))
    rec.flush()
    if save is not None:
        rec.disconnect()
