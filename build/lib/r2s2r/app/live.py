"""The live view of a deployment: what the loop is doing, as one picture.

``LiveFrame`` is what the deploy service hands its ``on_frame`` callback every few periods:
the rig's camera views and the recent control periods and chunks. ``compose`` draws it into
one RGB image with OpenCV (the three views side by side over a strip of the chunk timing),
which the CLI shows in a window or writes as a refreshed PNG, and ``timing_line`` says it in
one line of text.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import cv2
import numpy as np

from r2s2r.runtime.episode import ChunkLog, StepLog

BUDGET_MS = 20.0
# The strip's vertical scale: periods this long or longer fill it.
STRIP_MAX_MS = 60.0
VIEW_HEIGHT = 192
STRIP_HEIGHT = 120
TEXT_HEIGHT = 64
# BGR-free colours (the image is RGB).
_OK = (60, 200, 80)
_SLOW = (240, 170, 40)
_LATE = (230, 50, 50)
_HELD = (90, 90, 90)
_ASKED = (240, 220, 60)
_ARRIVED = (60, 200, 240)
_REJECTED = (240, 60, 200)
_TEXT = (235, 235, 235)
_BACKGROUND = (24, 24, 28)


@dataclass(frozen=True)
class LiveFrame:
    """The state of a deployment at one period."""

    episode: int
    step: int
    t: float  # Rig seconds since the episode began.
    views: dict[str, np.ndarray]  # Camera name -> (H, W, 3) uint8 RGB.
    steps: Sequence[StepLog]  # The recent control periods, oldest first.
    chunks: Sequence[ChunkLog]  # The episode's recent chunks, oldest first.
    status: str = ""
    events: list[str] = field(default_factory=list)  # Recent safety events, as text.


def _period_stats(steps: Sequence[StepLog]) -> tuple[float, float, float]:
    periods = np.array([s.period_ms for s in steps[1:]]) if len(steps) > 1 else np.zeros(1)
    return (
        float(np.quantile(periods, 0.5)),
        float(np.quantile(periods, 0.99)),
        float(periods.max()),
    )


def timing_line(frame: LiveFrame) -> str:
    """The frame's chunk timing in one line of text."""
    p50, p99, worst = _period_stats(frame.steps)
    held = sum(s.action is None for s in frame.steps)
    head = f"ep {frame.episode} step {frame.step} t {frame.t:6.2f} s"
    chunk = "no chunk yet"
    done = [c for c in frame.chunks if c.arrived_step is not None]
    if done:
        c = done[-1]
        state = "ok" if c.accepted else f"REJECTED ({c.reason})"
        latency = "" if c.latency_ms is None else f", {c.latency_ms:.1f} ms"
        chunk = (
            f"chunk {c.index} asked {c.requested_step} arrived {c.arrived_step} "
            f"(d={c.delay}{latency}) {state}"
        )
    periods = f"period p50 {p50:.1f} p99 {p99:.1f} max {worst:.1f} ms (budget {BUDGET_MS:g})"
    tail = f" | {frame.status}" if frame.status else ""
    return f"{head} | {chunk} | {periods} | held {held}{tail}"


def _views_row(views: dict[str, np.ndarray], height: int) -> np.ndarray:
    tiles = []
    for name in sorted(views):
        image = np.asarray(views[name])
        if image.ndim == 2:
            image = np.repeat(image[..., None], 3, axis=2)
        h, w = image.shape[:2]
        tile = cv2.resize(image.astype(np.uint8), (max(1, round(w * height / h)), height))
        cv2.putText(tile, name, (6, 18), cv2.FONT_HERSHEY_SIMPLEX, 0.5, _TEXT, 1, cv2.LINE_AA)
        tiles.append(tile)
    if not tiles:
        blank = np.full((height, height * 3, 3), _BACKGROUND, np.uint8)
        cv2.putText(blank, "no views", (10, height // 2), cv2.FONT_HERSHEY_SIMPLEX, 0.6, _TEXT, 1)
        return blank
    return np.concatenate(tiles, axis=1)


def _strip(frame: LiveFrame, width: int) -> np.ndarray:
    """The chunk timing strip (STRIP_HEIGHT, width, 3): one column band per recent period,
    as tall as the period took, coloured by how it kept the budget; grey where the arms
    held; ticks where chunks were asked for (yellow, top) and arrived (blue, bottom; magenta
    when rejected); the budget as a line."""
    strip = np.full((STRIP_HEIGHT, width, 3), _BACKGROUND, np.uint8)
    steps = list(frame.steps)
    if not steps:
        return strip
    first = steps[0].step
    n = max(len(steps), 1)
    col = width / n
    top, bottom = 8, STRIP_HEIGHT - 8

    def y_of(ms: float) -> int:
        return int(bottom - (bottom - top) * min(ms, STRIP_MAX_MS) / STRIP_MAX_MS)

    for i, s in enumerate(steps):
        x0, x1 = int(i * col), max(int((i + 1) * col) - 1, int(i * col))
        if s.action is None:
            cv2.rectangle(strip, (x0, top), (x1, bottom), _HELD, -1)
        colour = _OK if s.period_ms <= BUDGET_MS * 1.1 else _SLOW
        if s.period_ms > 2 * BUDGET_MS:
            colour = _LATE
        cv2.rectangle(strip, (x0, y_of(s.period_ms)), (x1, bottom), colour, -1)
    for c in frame.chunks:
        for at, colour, y0, y1 in (
            (c.requested_step, _ASKED, 0, top + 6),
            (c.arrived_step, _ARRIVED if c.accepted else _REJECTED, bottom - 6, STRIP_HEIGHT),
        ):
            if at is not None and first <= at <= steps[-1].step:
                x = int((at - first + 0.5) * col)
                cv2.line(strip, (x, y0), (x, y1), colour, 2)
    y = y_of(BUDGET_MS)
    cv2.line(strip, (0, y), (width - 1, y), _TEXT, 1)
    cv2.putText(strip, f"{BUDGET_MS:g} ms", (4, y - 4), cv2.FONT_HERSHEY_SIMPLEX, 0.4, _TEXT, 1)
    return strip


def compose(frame: LiveFrame, view_height: int = VIEW_HEIGHT) -> np.ndarray:
    """The live picture (H, W, 3) uint8 RGB: the views over the timing strip over the timing
    line and the latest safety event."""
    views = _views_row(frame.views, view_height)
    width = views.shape[1]
    text = np.full((TEXT_HEIGHT, width, 3), _BACKGROUND, np.uint8)
    line = timing_line(frame)
    # The line cut in two (it is too long for the picture), then the latest safety event.
    parts = line.split(" | ")
    half = (len(parts) + 1) // 2
    rows = [" | ".join(parts[:half]), " | ".join(parts[half:])]
    rows.append(f"safety: {frame.events[-1]}" if frame.events else "safety: no event")
    for row, words in enumerate(rows):
        cv2.putText(
            text, words, (6, 17 + 20 * row), cv2.FONT_HERSHEY_SIMPLEX, 0.42, _TEXT, 1, cv2.LINE_AA
        )
    return np.concatenate([views, _strip(frame, width), text], axis=0)


def write_png(image: np.ndarray, path: str) -> None:
    """Write ``image`` (H, W, 3) RGB as a PNG, replacing the last one at once (a viewer that
    refreshes it never reads half a file)."""
    import os

    tmp = f"{path}.partial.png"
    if not cv2.imwrite(tmp, cv2.cvtColor(image, cv2.COLOR_RGB2BGR)):
        raise OSError(f"{path}: could not write the preview image")
    os.replace(tmp, path)
