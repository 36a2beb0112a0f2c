"""What every service shares: progress reports (the CLI shows them as progress bars, a GUI
as widgets), cancellation from any thread, and request errors."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Progress:
    """How far one stage of a job has come (``total`` None: open-ended)."""

    stage: str
    done: int
    total: int | None = None
    message: str = ""


ProgressFn = Callable[[Progress], None]


class RequestError(ValueError):
    """A request that cannot run as given (a missing option, an unavailable rig)."""


class Cancelled(RuntimeError):
    """A job stopped because it was cancelled; what it had written is kept and resumable."""


class Cancel:
    """A cancellation flag a job polls between units of work (a take, an attempt, a step)."""

    def __init__(self) -> None:
        self._event = threading.Event()

    def cancel(self) -> None:
        """Ask the job to stop at its next check (thread-safe)."""
        self._event.set()

    @property
    def cancelled(self) -> bool:
        return self._event.is_set()

    def check(self, what: str = "job") -> None:
        """Raise ``Cancelled`` if cancellation was asked for."""
        if self._event.is_set():
            raise Cancelled(f"{what} cancelled")


def report(
    progress: ProgressFn | None, stage: str, done: int, total: int | None, msg: str = ""
) -> None:
    """Send one report if anyone listens."""
    if progress is not None:
        progress(Progress(stage, done, total, msg))
