"""Write RGB frames to an H.264 MP4 with PyAV."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import av
import numpy as np


def write_video(
    path: str | Path, frames: Iterable[np.ndarray], fps: int = 50, crf: int = 23
) -> int:
    """Encode (H, W, 3) uint8 frames; returns the number written. Even sizes are required."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.stem + ".partial" + path.suffix)
    count = 0
    with av.open(str(tmp), mode="w") as container:
        stream = None
        for frame in frames:
            if stream is None:
                h, w = frame.shape[:2]
                if h % 2 or w % 2:
                    raise ValueError(f"H.264 needs even frame sizes, got {w}x{h}")
                stream = container.add_stream("libx264", rate=fps)
                stream.width, stream.height = w, h
                stream.pix_fmt = "yuv420p"
                stream.options = {"crf": str(crf), "preset": "veryfast"}
            for packet in stream.encode(av.VideoFrame.from_ndarray(frame, format="rgb24")):
                container.mux(packet)
            count += 1
        if stream is not None:
            for packet in stream.encode():
                container.mux(packet)
    # Only a complete file takes the final name.
    tmp.replace(path)
    return count
