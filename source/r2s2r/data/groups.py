"""Joining a group of pending episodes into shared files, as LeRobot v3 stores episodes.

An episode is saved alone (``layout.pending_dir``): its parquet file and one H.264 file per
camera. When its group is closed the group's episodes are joined into one data file (their
frame rows in order) and one video file per camera: the encoded packets of each episode's
file are copied in order, their timestamps shifted by the frames before them, so nothing is
decoded or re-encoded and lossless videos stay bit-exact. Each joined file is written under
a ``.partial`` name and committed (flushed and renamed); the writer then rewrites the
episodes table to point at them, and only then removes the pending files. A crash before
that rewrite leaves the pending episodes as they were (the joined files are unreferenced and
a reopening writer removes them); a crash after it leaves unreferenced pending files, also
removed on reopening.
"""

from __future__ import annotations

import contextlib
import math
import shutil
from collections.abc import Sequence
from fractions import Fraction
from pathlib import Path

import av
import pyarrow as pa
import pyarrow.parquet as pq

from r2s2r.data.config import DatasetError, FilesCfg
from r2s2r.data.layout import DATA_PATH, PARTIAL, PENDING_DIR, commit, partial_path, pending_dir

# The folders holding episodes' files (what a reopening writer may clean up).
FILE_DIRS = (DATA_PATH.split("/")[0], "videos", PENDING_DIR)


def over_limits(sizes: Sequence[Sequence[int]], limits: FilesCfg, strict: bool) -> bool:
    """Whether episodes of ``sizes`` (each: data bytes, then video bytes per camera) are more
    than one group holds (``strict``), or fill it."""
    mb = 1024 * 1024
    count = limits.episodes or math.inf
    data = sum(s[0] for s in sizes)
    video = max((sum(col) for col in zip(*(s[1:] for s in sizes), strict=True)), default=0)
    if strict:
        return len(sizes) > count or data > limits.data_mb * mb or video > limits.video_mb * mb
    return len(sizes) >= count or data >= limits.data_mb * mb or video >= limits.video_mb * mb


def join_data(sources: list[Path], out: Path) -> None:
    """Write the frame rows of ``sources`` (episode parquet files, in order) as one file."""
    tables = []
    for path in sources:
        try:
            tables.append(pq.read_table(path))
        except (OSError, pa.ArrowException) as err:
            raise DatasetError(f"{path}: not a readable parquet file ({err})") from err
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = partial_path(out)
    pq.write_table(pa.concat_tables(tables), tmp)
    commit(tmp, out)


def join_videos(sources: list[Path], fps: int, out: Path) -> list[float]:
    """Copy the packets of ``sources`` (episode videos, each starting at time 0, in order)
    into one video; returns the time (s) each source starts at in it."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = partial_path(out)
    starts: list[float] = []
    offset = Fraction(0)
    with av.open(str(sources[0])) as first:
        template = first.streams.video[0]
        extradata = template.codec_context.extradata
        with av.open(str(tmp), mode="w", format="mp4") as container:
            stream = container.add_stream_from_template(template)
            for path in sources:
                starts.append(float(offset))
                frames = append_packets(container, stream, path, offset, extradata)
                offset += Fraction(frames, fps)
    commit(tmp, out)
    return starts


def append_packets(
    container: av.container.OutputContainer,
    stream: av.video.stream.VideoStream,
    path: Path,
    offset: Fraction,
    extradata: bytes | None,
) -> int:
    """Mux every packet of ``path`` into ``stream``, ``offset`` seconds later; returns the
    number of frames."""
    try:
        source = av.open(str(path))
    except av.FFmpegError as err:
        raise DatasetError(f"{path}: not a readable video ({err})") from err
    with source:
        src = source.streams.video[0]
        if src.codec_context.extradata != extradata:
            # Streams coded with other parameters cannot share one file's header.
            raise DatasetError(f"{path}: coded with other parameters than its group's first video")
        assert src.time_base is not None
        ticks = offset / src.time_base
        if ticks.denominator != 1:
            raise DatasetError(f"{path}: time base {src.time_base} cannot place {offset} s")
        frames = 0
        for packet in source.demux(src):
            if packet.dts is None:  # The demuxer's final empty packet.
                continue
            assert packet.pts is not None
            packet.pts += int(ticks)
            packet.dts += int(ticks)
            packet.stream = stream
            container.mux(packet)
            frames += 1
    return frames


def stream_header(path: Path) -> bytes | None:
    """The codec parameters (``extradata``) of a video's stream."""
    try:
        with av.open(str(path)) as container:
            return container.streams.video[0].codec_context.extradata
    except av.FFmpegError as err:
        raise DatasetError(f"{path}: not a readable video ({err})") from err


def remove_unreferenced(root: Path, referenced: set[Path]) -> None:
    """Delete partial files, and files in the episodes' folders that no committed episode
    references (``referenced``): those of an episode or a group whose commit never came, and
    pending files of episodes already joined into their group."""
    for path in list(root.rglob("*")):
        if not path.is_file():
            continue
        top = path.relative_to(root).parts[0]
        if PARTIAL in path.name or (top in FILE_DIRS and path not in referenced):
            path.unlink()
    pending = root / PENDING_DIR
    if pending.is_dir():
        for folder in pending.iterdir():
            if folder.is_dir() and not any(folder.iterdir()):
                shutil.rmtree(folder)
        with contextlib.suppress(OSError):
            pending.rmdir()


def remove_pending(root: Path, episode_index: int) -> None:
    """Delete a pending episode's files (after its group's files are referenced, or when its
    take is discarded), and the pending folder once it is empty."""
    shutil.rmtree(pending_dir(root, episode_index), ignore_errors=True)
    with contextlib.suppress(OSError):  # Not empty while another episode is pending.
        (root / PENDING_DIR).rmdir()
