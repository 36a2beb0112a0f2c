"""Inference off the control loop: one thread runs the policy on one request at a time."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from r2s2r.policy.base import ChunkPrefix, GuidedPolicy, Policy


@dataclass(frozen=True)
class Inference:
    """One finished request: its chunk (H, A), or the error the policy raised."""

    step: int  # The step whose observation it was computed from.
    actions: np.ndarray | None
    error: BaseException | None
    latency_ms: float  # From submission to the result (queueing included).
    guided: bool


class InferenceWorker:
    """Runs ``policy.infer`` (``infer_guided`` where a prefix is given and the policy takes
    one) in a background thread; ``submit`` never blocks the caller."""

    def __init__(self, policy: Policy) -> None:
        self.policy = policy
        self._cond = threading.Condition()
        self._request: tuple[dict[str, Any], ChunkPrefix | None, int, float] | None = None
        self._result: Inference | None = None
        self._busy = False
        self._closed = False
        # When the request in flight was submitted (perf_counter); None when none is.
        self._submitted: float | None = None
        self._thread = threading.Thread(target=self._run, daemon=True, name="r2s2r-inference")
        self._thread.start()

    @property
    def busy(self) -> bool:
        """A request is submitted and its result not yet taken."""
        with self._cond:
            return self._busy

    @property
    def submitted_at(self) -> float | None:
        """When the request in flight was submitted (``time.perf_counter``), while it runs
        and until its result is taken; None when no request is in flight."""
        with self._cond:
            return self._submitted

    def submit(self, observation: dict[str, Any], prefix: ChunkPrefix | None, step: int) -> None:
        with self._cond:
            if self._busy:
                raise RuntimeError("InferenceWorker.submit: a request is already in flight")
            self._busy = True
            self._result = None
            self._submitted = time.perf_counter()
            self._request = (observation, prefix, step, self._submitted)
            self._cond.notify_all()

    def poll(self) -> Inference | None:
        """The finished result, once (None while it runs or when nothing was submitted)."""
        with self._cond:
            return self._take()

    def wait(self, timeout: float | None = None) -> Inference | None:
        """Block until the result is ready (or ``timeout`` seconds pass), then take it."""
        with self._cond:
            self._cond.wait_for(lambda: self._result is not None or not self._busy, timeout)
            return self._take()

    def _take(self) -> Inference | None:
        result, self._result = self._result, None
        if result is not None:
            self._busy = False
            self._submitted = None
        return result

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._thread.join(timeout=5.0)

    def _run(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._closed or self._request is not None)
                if self._closed:
                    return
                assert self._request is not None
                observation, prefix, step, t0 = self._request
                self._request = None
            actions: np.ndarray | None = None
            error: BaseException | None = None
            guided = prefix is not None and isinstance(self.policy, GuidedPolicy)
            try:
                if guided:
                    assert prefix is not None
                    out = self.policy.infer_guided(observation, prefix)  # type: ignore[attr-defined]
                else:
                    out = self.policy.infer(observation)
                actions = np.asarray(out, dtype=np.float64)
            except Exception as err:  # noqa: BLE001 - handed to the control loop, which acts on it
                error = err
            result = Inference(step, actions, error, (time.perf_counter() - t0) * 1e3, guided)
            with self._cond:
                if self._busy:
                    self._result = result
                self._cond.notify_all()
