"""``r2s2r dataset bench``: the dataset writer's throughput against plain PyAV on the same frames.

The peer encodes the same frames, camera by camera in the same interleaved order, straight
into one H.264 file per camera through PyAV with the writer's video settings; the ratio of
the two shows what the writer adds (checks, channel histograms, parquet, stats, metadata).
"""

from __future__ import annotations

import shutil
import tempfile
import time
from fractions import Fraction
from pathlib import Path
from typing import Any

import av
import numpy as np

from r2s2r.data.config import CameraCfg, DatasetCfg, VideoCfg
from r2s2r.data.writer import DatasetWriter
from r2s2r.sim.bench import machine
from r2s2r.spec.world import CAMERA_NAMES


def bench_frames(count: int, size: int, cameras: int, seed: int = 0) -> np.ndarray:
    """Camera frames that compress like rendered ones: a smooth pattern with sensor-like noise
    (pure noise would be incompressible) moving a pixel per frame; (T, C, H, W, 3) uint8."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[:size, :size]
    phase = np.arange(3)
    pattern = 128 + 60 * np.sin(xx[..., None] / 9.0) * np.cos(yy[..., None] / 13.0 + phase)
    base = np.clip(pattern + rng.normal(0, 3, (size, size, 3)), 0, 255).astype(np.uint8)
    # Each camera sees the pattern from its own offset.
    views = [np.roll(base, 37 * c, axis=0) for c in range(cameras)]
    return np.stack([[np.roll(v, k, axis=1) for v in views] for k in range(count)])


def _folder_bytes(root: Path) -> int:
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file())


def write_with_writer(root: Path, frames: np.ndarray, cfg: DatasetCfg) -> float:
    """Seconds to record ``frames`` (T, C, H, W, 3) as one episode through ``DatasetWriter``."""
    names = [c.name for c in cfg.cameras]
    contract = cfg.contract
    state, action = np.zeros(contract.state_dim), np.zeros(contract.action_dim)
    start = time.perf_counter()
    with DatasetWriter(root, cfg) as writer:
        for views in frames:
            writer.add_frame(dict(zip(names, views, strict=True)), state, action)
        writer.save_episode("bench", True)
    return time.perf_counter() - start


def write_with_pyav(folder: Path, frames: np.ndarray, fps: int, video: VideoCfg) -> float:
    """Seconds to encode ``frames`` (T, C, H, W, 3) into one MP4 per camera with plain PyAV and
    the writer's lossy H.264 settings (libx264, yuv420p, crf, preset, gop, no B-frames)."""
    folder.mkdir(parents=True, exist_ok=True)
    height, width = frames.shape[2:4]
    time_base = Fraction(1, fps)
    start = time.perf_counter()
    outputs = []
    for c in range(frames.shape[1]):
        container = av.open(str(folder / f"camera_{c}.mp4"), mode="w")
        stream = container.add_stream("libx264", rate=fps)
        stream.pix_fmt = "yuv420p"
        stream.width, stream.height = width, height
        stream.options = {
            "crf": str(video.crf),
            "preset": video.preset,
            "g": str(video.gop),
            "bf": "0",
        }
        stream.codec_context.time_base = time_base
        outputs.append((container, stream))
    for k, views in enumerate(frames):
        for (container, stream), img in zip(outputs, views, strict=True):
            vf = av.VideoFrame.from_ndarray(img, format="rgb24")
            vf.pts, vf.time_base = k, time_base
            for packet in stream.encode(vf):
                container.mux(packet)
    for container, stream in outputs:
        for packet in stream.encode():
            container.mux(packet)
        container.close()
    return time.perf_counter() - start


def run_bench(frames: int = 250, size: int = 256, repeats: int = 3) -> dict[str, Any]:
    """Every figure of ``r2s2r dataset bench``: ``frames`` frames of the three camera views at
    ``size`` pixels square, through the writer and through plain PyAV, alternating ``repeats``
    times (so that machine noise hits both alike) and keeping the best of each."""
    if frames < 1 or repeats < 1 or size < 2 or size % 2:
        raise ValueError(
            "dataset bench: frames and repeats must be positive and size even, "
            f"got frames={frames} repeats={repeats} size={size}"
        )
    cfg = DatasetCfg(
        cameras=tuple(CameraCfg(name=name, height=size, width=size) for name in CAMERA_NAMES)
    )
    clip = bench_frames(frames, size, len(cfg.cameras))
    writer_s = pyav_s = float("inf")
    writer_bytes = pyav_bytes = 0
    tmp = Path(tempfile.mkdtemp(prefix="r2s2r-dataset-bench-"))
    try:
        for i in range(repeats):
            root, folder = tmp / f"writer_{i}", tmp / f"pyav_{i}"
            writer_s = min(writer_s, write_with_writer(root, clip, cfg))
            pyav_s = min(pyav_s, write_with_pyav(folder, clip, cfg.fps, cfg.video))
            writer_bytes, pyav_bytes = _folder_bytes(root), _folder_bytes(folder)
            shutil.rmtree(root)
            shutil.rmtree(folder)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    mb, v = 1e6, cfg.video
    return {
        "machine": machine(),
        "pyav": av.__version__,
        "video": f"3 x {size}x{size} H.264 crf {v.crf} preset {v.preset} gop {v.gop}",
        "frames": frames,
        "writer_frames_per_s": frames / writer_s,
        "writer_mb_per_s_written": writer_bytes / mb / writer_s,
        "writer_raw_mb_per_s_in": clip.nbytes / mb / writer_s,
        "pyav_frames_per_s": frames / pyav_s,
        "pyav_mb_per_s_written": pyav_bytes / mb / pyav_s,
        # Above 1 the writer is faster than plain encoding; below 1 its overhead shows.
        "writer_over_pyav": pyav_s / writer_s,
    }
