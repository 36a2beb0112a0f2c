"""Latest-value readers: a device polled by a background thread, or on demand."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")
log = logging.getLogger("r2s2r.drivers")


class LatestValue(Generic[T]):
    """Calls ``fetch`` (which blocks until the device delivers) and hands out its newest result.

    In background mode a daemon thread calls ``fetch`` in a loop and ``read()`` returns the
    newest value at once; when the device stalls the last value stays, and its stamp ages (the
    safety supervisor watches camera stamps). Without a thread, ``read()`` calls ``fetch``.
    """

    def __init__(
        self,
        fetch: Callable[[], T],
        name: str,
        background: bool,
        timeout_s: float = 2.0,
        retry_s: float = 0.01,
    ) -> None:
        self.fetch, self.name, self.timeout_s, self.retry_s = fetch, name, timeout_s, retry_s
        self._cond = threading.Condition()
        self._latest: T | None = None
        self._error: Exception | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if background:
            self._thread = threading.Thread(target=self._loop, name=f"device-{name}", daemon=True)
            self._thread.start()

    def read(self) -> T:
        """The newest value; the first call waits up to ``timeout_s`` for one."""
        if self._thread is None:
            return self.fetch()
        with self._cond:
            if self._latest is None:
                self._cond.wait_for(
                    lambda: self._latest is not None or self._error is not None, self.timeout_s
                )
            if self._latest is not None:
                return self._latest
            reason = f" (last error: {self._error})" if self._error is not None else ""
            raise TimeoutError(
                f"{self.name}: nothing received within {self.timeout_s:.1f} s{reason}"
            )

    def _loop(self) -> None:
        reported = False
        while not self._stop.is_set():
            try:
                value = self.fetch()
            except Exception as err:  # A device loop must survive a bad read and retry.
                with self._cond:
                    self._error = err
                    self._cond.notify_all()
                if not reported:
                    log.warning("%s: %s (retrying)", self.name, err)
                    reported = True
                time.sleep(self.retry_s)
                continue
            reported = False
            with self._cond:
                self._latest, self._error = value, None
                self._cond.notify_all()

    def close(self) -> None:
        """Stop the thread (it finishes its current ``fetch`` first)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2.0)
