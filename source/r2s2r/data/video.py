"""H.264 camera streams through PyAV: a streaming encoder and a random-access decoder.

Frame ``i`` of a stream has presentation time ``i / fps``; the decoder finds frames by that
time, seeking to the keyframe before the target and decoding forward.

The same frames code to the same bytes in every process: on an x86 CPU with AVX-512 the
encoder leaves x264's AVX-512 functions out (``x264_params``).
"""

from __future__ import annotations

import contextlib
import functools
import queue
import threading
from collections import OrderedDict
from collections.abc import Iterator
from fractions import Fraction
from pathlib import Path

import av
import numpy as np

from r2s2r.data.config import DatasetError, VideoCfg

# The CPU features x264's AVX2 level needs (as /proc/cpuinfo names them; abm is LZCNT).
_AVX2_LEVEL = frozenset({"avx", "avx2", "fma", "bmi1", "bmi2", "abm", "sse4_2", "ssse3"})


def x264_params(cpu_flags: frozenset[str]) -> dict[str, str]:
    """x264 settings beyond the stream's own for a CPU with ``cpu_flags``: where it has
    AVX-512, x264 is held to its AVX2 functions (``asm=AVX2`` replaces what x264 detects,
    so it is named only where the CPU has every feature that level uses). On this project's
    2-core AMD EPYC the AVX-512 functions coded the same frames differently in about one
    process in five (one group of pictures a few bytes apart, decoding 46-50 dB from the
    usual one), so a resumed generation's videos were not an uninterrupted one's; the AVX2
    ones gave the same bytes every time, no slower (README, "Behavior: simulated
    demonstrations"). Other CPUs keep x264's own choice."""
    if "avx512f" in cpu_flags and cpu_flags >= _AVX2_LEVEL:
        return {"x264-params": "asm=AVX2"}
    return {}


@functools.cache
def cpu_flags() -> frozenset[str]:
    """This machine's CPU feature flags from /proc/cpuinfo (empty where there is none)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return frozenset()
    for line in text.splitlines():
        if line.startswith("flags"):
            return frozenset(line.partition(":")[2].split())
    return frozenset()


class VideoEncoder:
    """Encodes (H, W, 3) uint8 RGB frames one at a time into an MP4 file."""

    def __init__(self, path: Path, width: int, height: int, fps: int, cfg: VideoCfg) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path, self.width, self.height = path, width, height
        self.count = 0
        self._container = av.open(str(path), mode="w")
        if cfg.lossless:
            # libx264rgb codes RGB planes directly; qp 0 makes it exact.
            stream = self._container.add_stream("libx264rgb", rate=fps)
            stream.pix_fmt = "rgb24"
            options: dict[str, object] = {
                "qp": "0",
                "preset": cfg.preset,
                "g": str(cfg.gop),
                "bf": "0",
            }
        else:
            stream = self._container.add_stream("libx264", rate=fps)
            stream.pix_fmt = "yuv420p"
            options = {"crf": str(cfg.crf), "preset": cfg.preset, "g": str(cfg.gop), "bf": "0"}
        stream.width, stream.height = width, height
        # One encoder thread: x264's frame threads cost a quarter more CPU per frame at these
        # sizes, and the cores are already shared (one stream per camera, renders, physics,
        # generation workers).
        stream.options = {**options, "threads": "1", **x264_params(cpu_flags())}
        stream.codec_context.time_base = Fraction(1, fps)
        self._stream = stream
        self._time_base = Fraction(1, fps)

    def add(self, frame: np.ndarray) -> None:
        """Encode one frame; (H, W, 3) uint8."""
        vf = av.VideoFrame.from_ndarray(frame, format="rgb24")
        vf.pts, vf.time_base = self.count, self._time_base
        for packet in self._stream.encode(vf):
            self._container.mux(packet)
        self.count += 1

    def close(self) -> None:
        """Flush the encoder and finish the file."""
        for packet in self._stream.encode():
            self._container.mux(packet)
        self._container.close()

    def abort(self) -> None:
        """Drop the file being written."""
        with contextlib.suppress(OSError, av.FFmpegError):
            self._container.close()
        self.path.unlink(missing_ok=True)


class EncodingThread:
    """Feeds frames to their encoders on a thread of its own, in the order they are given.

    H.264 coding and the RGB to YUV conversion run without the GIL, so a recording loop
    that hands its frames here goes on with its next period (or waits on its cameras) while
    they are coded, instead of coding three streams itself every period. ``depth`` frames
    may wait; a caller that gets further ahead waits for the thread. A failure is raised by
    ``check`` and ``finish``, the thread skipping every frame after it.
    """

    def __init__(self, depth: int) -> None:
        self._queue: queue.Queue[tuple[VideoEncoder, np.ndarray] | None] = queue.Queue(depth)
        self._failure: tuple[Path, BaseException] | None = None
        self._thread = threading.Thread(target=self._run, name="r2s2r-encode", daemon=True)
        self._thread.start()

    def add(self, encoder: VideoEncoder, frame: np.ndarray) -> None:
        """Queue ``frame`` (kept as given: the caller must not change it) for ``encoder``."""
        self._queue.put((encoder, frame))

    def finish(self) -> None:
        """Wait until every queued frame is coded, end the thread, and raise its failure."""
        if self._thread.is_alive():
            self._queue.put(None)
            self._thread.join()
        self.check()

    def check(self) -> None:
        """Raise the failure of a frame coded so far, if one failed (``DatasetError``)."""
        if self._failure is not None:
            path, err = self._failure
            raise DatasetError(f"{path}: encoding failed: {err!r}") from err

    def _run(self) -> None:
        while (item := self._queue.get()) is not None:
            if self._failure is not None:
                continue
            encoder, frame = item
            try:
                encoder.add(frame)
            except Exception as err:  # noqa: BLE001 - raised in the caller's thread instead.
                self._failure = (encoder.path, err)


def count_packets(path: Path) -> tuple[int, int, int]:
    """(frames, width, height) of a video file by demuxing it (no decoding)."""
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        frames = sum(1 for p in container.demux(stream) if p.size > 0)
        return frames, stream.codec_context.width, stream.codec_context.height


class _OpenStream:
    """An open video file and where its decoder stands."""

    def __init__(self, path: Path, fps: int) -> None:
        self.container = av.open(str(path))
        self.stream = self.container.streams.video[0]
        self.fps = fps
        # The active decode iterator, and the index of the frame it yields next.
        self.frames: Iterator[av.VideoFrame] | None = None
        self.next_index = 0

    def seek(self, index: int) -> None:
        assert self.stream.time_base is not None
        target = int(Fraction(index, self.fps) / self.stream.time_base)
        self.container.seek(target, stream=self.stream, backward=True, any_frame=False)
        self.frames = self.container.decode(self.stream)
        self.next_index = -1

    def get(self, index: int, gop: int) -> np.ndarray:
        # Decoding forward is cheaper than seeking when the target is close ahead.
        if self.frames is None or index < self.next_index or index > self.next_index + gop:
            self.seek(index)
        assert self.frames is not None
        for frame in self.frames:
            j = round(float(frame.time) * self.fps)
            self.next_index = j + 1
            if j == index:
                return frame.to_ndarray(format="rgb24")
            if j > index:
                break
        self.frames = None
        raise DatasetError(f"{self.container.name}: no frame at index {index}")


class VideoReader:
    """Random access to frames of many video files, keeping a few files open."""

    def __init__(self, fps: int, gop: int, max_open: int = 8) -> None:
        self.fps, self.gop, self.max_open = fps, gop, max_open
        self._open: OrderedDict[Path, _OpenStream] = OrderedDict()

    def frame(self, path: Path, index: int) -> np.ndarray:
        """Frame ``index`` (time ``index / fps``) of ``path``; (H, W, 3) uint8 RGB."""
        stream = self._open.pop(path, None)
        if stream is None:
            if not path.is_file():
                raise DatasetError(f"{path}: missing")
            try:
                stream = _OpenStream(path, self.fps)
            except av.FFmpegError as err:
                raise DatasetError(f"{path}: not a readable video ({err})") from err
        self._open[path] = stream
        while len(self._open) > self.max_open:
            self._open.popitem(last=False)[1].container.close()
        return stream.get(index, self.gop)

    def frames(self, path: Path, start: int, count: int) -> np.ndarray:
        """Frames ``start`` .. ``start + count - 1`` of ``path`` in order; (count, H, W, 3)
        uint8. A file shorter than that is an error naming it."""
        if not path.is_file():
            raise DatasetError(f"{path}: missing")
        out: list[np.ndarray] = []
        try:
            for j, frame in frames_from(path, start, self.fps):
                if j >= start + count:
                    break
                out.append(frame)
        except av.FFmpegError as err:
            raise DatasetError(f"{path}: not a readable video ({err})") from err
        if len(out) != count:
            raise DatasetError(
                f"{path}: {len(out)} frames from frame {start}, the episode has {count}"
            )
        return np.stack(out)

    def all_frames(self, path: Path) -> np.ndarray:
        """Every frame of ``path`` in order; (T, H, W, 3) uint8."""
        try:
            with av.open(str(path)) as container:
                frames = [f.to_ndarray(format="rgb24") for f in container.decode(video=0)]
        except av.FFmpegError as err:
            raise DatasetError(f"{path}: not a readable video ({err})") from err
        return np.stack(frames)

    def close(self) -> None:
        while self._open:
            self._open.popitem()[1].container.close()


def frames_from(path: Path, start: int, fps: int) -> Iterator[tuple[int, np.ndarray]]:
    """``(index, frame)`` for frame ``start`` of ``path`` (time ``start / fps``) and every one
    after it, in order: a seek to the keyframe before ``start``, then decoding (frames before
    ``start`` are decoded and dropped). Raises PyAV's errors."""
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        if start > 0:
            assert stream.time_base is not None
            target = int(Fraction(start, fps) / stream.time_base)
            container.seek(target, stream=stream, backward=True, any_frame=False)
        for frame in container.decode(stream):
            j = round(float(frame.time) * fps)
            if j >= start:
                yield j, frame.to_ndarray(format="rgb24")
