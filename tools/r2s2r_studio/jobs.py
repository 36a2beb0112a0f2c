"""Long work off the UI thread: a ``Job`` runs a service call on a thread of its own and
reports back through Qt signals (queued onto the UI thread); ``Latest`` hands the UI only
the newest of a fast stream (camera frames), so nothing queues up when it falls behind."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from PySide6.QtCore import QObject, Qt, Signal

from r2s2r.app.jobs import Cancel, Cancelled, Progress, ProgressFn

log = logging.getLogger("r2s2r.studio")


def error_text(err: BaseException) -> str:
    """What the CLI prints for ``err`` (``error: ...``)."""
    return f"error: {err}"


class Job(QObject):
    """``fn(cancel, progress)`` on a worker thread; ``finished`` gets its result, ``failed``
    the CLI's message for an error, ``cancelled`` fires when it stopped on ``cancel()``.

    ``running`` is the worker thread's life; ``done`` turns true on the UI thread once its
    last signal (``ended``) is delivered there, so every slot of ``finished`` has run by then.
    The thread can end before its queued signals are delivered: wait on ``done`` for results."""

    progress = Signal(object)
    finished = Signal(object)
    failed = Signal(str)
    cancelled = Signal(str)
    ended = Signal()

    def __init__(self, name: str, fn: Callable[[Cancel, ProgressFn], Any]) -> None:
        super().__init__()
        self.name, self.fn = name, fn
        self.cancel_flag = Cancel()
        self.error: str | None = None
        self.done = False
        self.ended.connect(self._mark_done, Qt.ConnectionType.QueuedConnection)
        self._thread = threading.Thread(target=self._run, name=f"studio-{name}", daemon=True)

    def start(self) -> Job:
        self._thread.start()
        return self

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def cancel(self) -> None:
        self.cancel_flag.cancel()

    def stop(self, timeout: float = 30.0) -> bool:
        """Cancel and wait up to ``timeout`` s; whether the thread ended."""
        self.cancel_flag.cancel()
        if self._thread.is_alive():
            self._thread.join(timeout)
        return not self._thread.is_alive()

    def _mark_done(self) -> None:
        self.done = True

    def _report(self, p: Progress) -> None:
        self.progress.emit(p)

    def _run(self) -> None:
        try:
            result = self.fn(self.cancel_flag, self._report)
        except Cancelled as err:
            log.info("%s: %s", self.name, err)
            self.cancelled.emit(str(err))
        except Exception as err:  # noqa: BLE001 - every error is shown in the window
            self.error = error_text(err)
            log.error("%s failed: %s", self.name, err, exc_info=True)
            self.failed.emit(self.error)
        else:
            if self.cancel_flag.cancelled:
                self.cancelled.emit(f"{self.name} cancelled")
            self.finished.emit(result)
        finally:
            self.ended.emit()


class Latest(QObject):
    """The newest value of a stream, from any thread; ``ready`` fires once per batch of
    puts and ``take()`` returns the newest (older ones are dropped)."""

    ready = Signal()

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()
        self._value: Any = None
        self._pending = False
        self.dropped = 0

    def put(self, value: Any) -> None:
        with self._lock:
            if self._pending:
                self.dropped += 1
            self._value = value
            notify = not self._pending
            self._pending = True
        if notify:
            self.ready.emit()

    def take(self) -> Any:
        with self._lock:
            self._pending = False
            value, self._value = self._value, None
            return value
