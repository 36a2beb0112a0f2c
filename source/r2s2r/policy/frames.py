"""A decode-once frame cache: every episode's camera views at training resolution, as uint8
``.npy`` files read through memory maps.

Layout: ``<root>/<fingerprint>/<size>px/<camera>/episode_<index>.npy`` (T, s, s, 3). The
fingerprint hashes the dataset's ``info.json``, its episodes table and the sizes of its data
and video files, so a changed dataset gets a new folder and a stale cache is never read.
Each file is written under a temporary name and renamed when complete, so a crash never
leaves a half file under a final name; a rerun decodes only what is missing.
"""

from __future__ import annotations

import hashlib
import os
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import Protocol

import av
import cv2
import numpy as np

from r2s2r.data.config import DatasetError
from r2s2r.data.layout import EPISODES_PATH, INFO_PATH, commit
from r2s2r.data.reader import Dataset
from r2s2r.data.video import frames_from

CACHE_ENV = "R2S2R_CACHE_DIR"


class ProgressFn(Protocol):
    """Called as work advances: ``progress(stage, done, total)``."""

    def __call__(self, stage: str, done: int, total: int) -> None: ...


def default_root() -> Path:
    """``$R2S2R_CACHE_DIR``, else ``~/.cache/r2s2r/frames``."""
    env = os.environ.get(CACHE_ENV)
    return Path(env) if env else Path.home() / ".cache" / "r2s2r" / "frames"


def fingerprint(ds: Dataset) -> str:
    """A hash of what a dataset holds: info.json, the episodes table, data and video sizes."""
    h = hashlib.sha256()
    for rel in (INFO_PATH, EPISODES_PATH):
        path = ds.root / rel
        h.update(rel.encode())
        h.update(path.read_bytes() if path.is_file() else b"")
    for path in ds.files():
        size = path.stat().st_size if path.is_file() else -1
        h.update(f"{path.relative_to(ds.root)}:{size}\n".encode())
    return h.hexdigest()[:20]


def resize(frame: np.ndarray, size: int) -> np.ndarray:
    """(h, w, 3) uint8 -> (size, size, 3) uint8 with area interpolation."""
    if frame.shape[:2] == (size, size):
        return np.ascontiguousarray(frame)
    return cv2.resize(frame, (size, size), interpolation=cv2.INTER_AREA)


class FrameCache:
    """Decoded, resized views of one dataset (see the module docstring)."""

    def __init__(self, dataset: Dataset, image_size: int, root: Path | None = None) -> None:
        if image_size < 1:
            raise DatasetError(f"image_size: expected a positive size, got {image_size}")
        self.dataset = dataset
        self.image_size = image_size
        self.fingerprint = fingerprint(dataset)
        self.folder = (root or default_root()) / self.fingerprint / f"{image_size}px"
        self._open: dict[tuple[int, str], np.ndarray] = {}

    def path(self, episode: int, camera: str) -> Path:
        """Where episode ``episode``'s frames from ``camera`` (short name) are stored."""
        return self.folder / camera / f"episode_{episode:06d}.npy"

    def _cameras(self) -> list[str]:
        return [k.removeprefix("observation.images.") for k in self.dataset.camera_keys]

    def _valid(self, episode: int, camera: str) -> bool:
        path = self.path(episode, camera)
        if not path.is_file():
            return False
        try:
            arr = np.load(path, mmap_mode="r")
        except (OSError, ValueError):
            return False
        s = self.image_size
        want = (int(self.dataset.episode(episode)["length"]), s, s, 3)
        return arr.shape == want and arr.dtype == np.uint8

    def missing(self) -> list[tuple[int, str]]:
        """The (episode, camera) pairs not cached yet."""
        return [
            (i, c)
            for i in range(self.dataset.num_episodes)
            for c in self._cameras()
            if not self._valid(i, c)
        ]

    def build(self, progress: ProgressFn | None = None, threads: int | None = None) -> int:
        """Decode every (episode, camera) not cached yet, ``threads`` streams at a time
        (default: one per core; PyAV and OpenCV release the GIL while they work); returns
        how many streams were decoded."""
        todo = self.missing()
        if progress is not None:
            progress("frame cache", 0, len(todo))
        threads = max(1, min(threads or os.cpu_count() or 1, len(todo)))
        with ThreadPoolExecutor(threads) as pool:
            jobs = [pool.submit(self._decode, episode, camera) for episode, camera in todo]
            for done, job in enumerate(as_completed(jobs)):
                job.result()
                if progress is not None:
                    progress("frame cache", done + 1, len(todo))
        return len(todo)

    def _decode(self, episode: int, camera: str) -> None:
        ds, s = self.dataset, self.image_size
        row = ds.episode(episode)
        length = int(row["length"])
        key = "observation.images." + camera
        src = ds.video_file(episode, key)
        first = ds.video_start(episode, key)
        final = self.path(episode, camera)
        final.parent.mkdir(parents=True, exist_ok=True)
        # A per-process temporary name: two builders never write one file.
        tmp = final.with_name(f"{final.stem}.{os.getpid()}.partial.npy")
        out = np.lib.format.open_memmap(tmp, mode="w+", dtype=np.uint8, shape=(length, s, s, 3))
        count = 0
        try:
            for j, frame in frames_from(src, first, ds.fps):
                if j >= first + length:
                    break
                out[count] = resize(frame, s)
                count += 1
            if count != length:
                raise DatasetError(f"{src}: {count} frames, the episodes table says {length}")
            out.flush()
            del out
            commit(tmp, final)
        except av.FFmpegError as err:
            tmp.unlink(missing_ok=True)
            raise DatasetError(f"{src}: not a readable video ({err})") from err
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise

    def frames(self, episode: int, camera: str) -> np.ndarray:
        """Episode ``episode``'s frames from ``camera``: a read-only memmap (T, s, s, 3)."""
        arr = self._open.get((episode, camera))
        if arr is None:
            path = self.path(episode, camera)
            if not path.is_file():
                raise DatasetError(f"{path}: not cached (call FrameCache.build first)")
            arr = np.load(path, mmap_mode="r")
            self._open[(episode, camera)] = arr
        return arr

    def __getstate__(self) -> dict[str, object]:
        # Memory maps are reopened in the process that unpickles the cache.
        return {**self.__dict__, "_open": {}}
