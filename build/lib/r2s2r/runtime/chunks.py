"""Joining action chunks into one action per control period.

A chunk is ``H`` actions computed from the observation of step ``start``: its action ``i``
is meant for step ``start + i``. While the next chunk is being inferred the current one
keeps running; when it arrives the executor hands over by the configured strategy:

- ``rtc``: the new chunk was generated consistent with the current one's actions over the
  inference delay (``prefix``), so the hand-over is a switch, made no earlier than the
  committed prefix ends: the committed actions are executed exactly.
- ``blend``: the old and the new chunk are mixed over ``blend_steps`` steps, weights moving
  linearly from old to new (TCP quaternions renormalized by the supervisor).
- ``sync``: the loop waited for the chunk; it runs from its first action.

``DelayEstimator`` turns measured delays (periods from observation to arrival) into the
``d`` that RTC keeps committed: a high quantile of the recent ones, ignoring warm-up calls.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

import numpy as np

from r2s2r.runtime.config import Execution


class DelayEstimator:
    """The inference delay in control periods, robust to slow first (warm-up) calls."""

    def __init__(self, warmup: int = 2, window: int = 10, quantile: float = 0.9) -> None:
        self.warmup, self.quantile = warmup, quantile
        self._warm: list[int] = []
        self._recent: deque[int] = deque(maxlen=window)

    def add(self, periods: int) -> None:
        if len(self._warm) < self.warmup:
            self._warm.append(int(periods))
        else:
            self._recent.append(int(periods))

    def estimate(self) -> int:
        """``d``: the quantile of the recent delays; before any, the fastest warm-up call's
        (a running maximum over warm-up calls would keep d inflated); 0 before any call."""
        if self._recent:
            return int(math.ceil(np.quantile(np.asarray(self._recent), self.quantile)))
        return min(self._warm) if self._warm else 0


@dataclass
class _Active:
    actions: np.ndarray  # (H, A)
    start: int  # The step of action 0.
    switch: int  # The first step it is executed at.
    index: int  # Its number among the chunks of the episode.


class ChunkExecutor:
    """The chunk being executed, the one waiting to take over, and the action of a step."""

    def __init__(self, execution: Execution, exec_horizon: int, blend_steps: int = 8) -> None:
        self.execution, self.exec_horizon, self.blend_steps = execution, exec_horizon, blend_steps
        self.reset()

    def reset(self) -> None:
        self._active: _Active | None = None
        self._next: _Active | None = None
        # The chunk blended out, and the steps of the blend.
        self._old: _Active | None = None
        self._blend: tuple[int, int] | None = None
        self.last_request: int | None = None

    # ------------------------------------------------------------------ requests
    def due(self, step: int) -> bool:
        """Whether the next inference should start at ``step``."""
        if self._next is not None:
            return False
        active = self._active
        if active is None:
            return True
        if self.execution == "sync":
            return step - active.switch >= self.exec_horizon or self._exhausted(active, step)
        return self.last_request is None or step - self.last_request >= self.exec_horizon

    def prefix(self, step: int, length: int) -> np.ndarray | None:
        """The current chunk's actions for steps ``step`` .. (at most ``length``) (n, A): what
        it will execute from ``step`` on while no other chunk takes over; None without one."""
        active = self._active
        if active is None:
            return None
        i = step - active.start
        out = active.actions[i : i + length]
        return out if len(out) else None

    # ------------------------------------------------------------------ hand-over
    def accept(self, actions: np.ndarray, start: int, step: int, committed: int, index: int) -> int:
        """Take chunk ``actions`` (H, A), computed from step ``start``'s observation, arriving
        at ``step``; RTC keeps the current chunk's first ``committed`` actions from
        ``start`` on. Returns the step at which it takes over."""
        if self.execution == "sync" or self._active is None:
            # A synchronous chunk runs from its first action now (the robot waited for it);
            # the first chunk of an episode runs from the action meant for ``step``.
            begin = step if self.execution == "sync" else start
            self._active = _Active(actions, begin, step, index)
            self._next = self._old = self._blend = None
            return step
        if self.execution == "rtc":
            switch = max(step, start + committed)
            self._next = _Active(actions, start, switch, index)
            self._promote(step)
            return switch
        # Blend: from now, over the steps both chunks cover.
        old = self._active
        overlap = min(self.blend_steps, len(old.actions) - (step - old.start))
        self._old = old if overlap > 0 else None
        self._blend = (step, max(overlap, 1))
        self._active = _Active(actions, start, step, index)
        return step

    def _promote(self, step: int) -> None:
        if self._next is not None and step >= self._next.switch:
            self._active, self._next = self._next, None

    def _exhausted(self, chunk: _Active, step: int) -> bool:
        return step - chunk.start >= len(chunk.actions)

    # ------------------------------------------------------------------ actions
    def action(self, step: int) -> tuple[np.ndarray | None, int | None]:
        """(the action for ``step`` (A,), or None where no chunk covers it; the index of the
        chunk it comes from)."""
        self._promote(step)
        active = self._active
        if active is None or self._exhausted(active, step) or step < active.start:
            return None, None
        new = active.actions[step - active.start]
        if self._old is not None and self._blend is not None:
            first, length = self._blend
            k = step - first
            old_i = step - self._old.start
            if 0 <= k < length and old_i < len(self._old.actions):
                w = (k + 1) / (length + 1)
                return (1.0 - w) * self._old.actions[old_i] + w * new, active.index
            self._old = self._blend = None
        return new, active.index

    @property
    def chunk_index(self) -> int | None:
        return None if self._active is None else self._active.index
