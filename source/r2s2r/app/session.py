"""A connected rig, live: a thread that lets its control periods pass with the arms holding
where they are, reads every device at the camera rate for views and plots, runs requests on
the rig between periods, and stops the arms from any thread.

``RigSession(request, on_snapshot)`` opens the rig (the twin, or the real cell from its
hardware YAML) and its safety supervisor; ``on_snapshot`` gets a ``RigSnapshot`` every
``1 / snapshot_hz`` seconds of rig time, on the session's thread. ``call(fn)`` runs
``fn(rig, supervisor)`` there between two periods and returns a ``Future`` (a board view
capture, a belt speed). ``emergency_stop`` stops the arms at once from the calling thread
(under the supervisor's lock, whatever the session's thread is doing). A job that opens the
rig itself (recording, grounding, deployment) needs the session closed first: a real cell's
devices have one owner.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import model_validator

from r2s2r.app.jobs import RequestError
from r2s2r.app.live import RigSnapshot, snapshot
from r2s2r.app.rigs import refused, rig_kind
from r2s2r.rig.interfaces import Rig
from r2s2r.rig.kinds import RIGS, RigName, RigOptions, open_rig
from r2s2r.rig.safety import SafetySupervisor
from r2s2r.spec import Spec

log = logging.getLogger("r2s2r.app")


class RigRequest(Spec):
    """Which rig to connect to."""

    rig: RigName = "twin"
    # Twin seed.
    seed: int = 0
    # Pace the twin to the wall clock (else it runs as fast as the machine allows).
    realtime: bool = True
    # The cell's hardware YAML (hardware rig only).
    config: Path | None = None
    # Twin camera views, px (its cameras' own resolution with ``native_cameras``).
    image_size: int = 256
    native_cameras: bool = False
    # Snapshots per second of rig time.
    snapshot_hz: float = 25.0

    @model_validator(mode="after")
    def _check(self) -> RigRequest:
        RIGS.get(self.rig).check(RigOptions(config=self.config))
        if self.image_size < 16:
            raise ValueError(f"image_size must be at least 16 px, got {self.image_size}")
        if not self.snapshot_hz > 0:
            raise ValueError(f"snapshot_hz must be positive, got {self.snapshot_hz}")
        return self


def open_supervised(request: RigRequest) -> tuple[Rig, SafetySupervisor]:
    """The rig ``request`` names and a safety supervisor over its arms and hands."""
    from r2s2r.spec.worlds import world_at

    kind = rig_kind(request.rig)
    options = RigOptions(
        seed=request.seed,
        world=world_at(request.image_size),
        realtime=request.realtime,
        native_cameras=request.native_cameras,
        config=request.config,
    )
    with refused():
        rig = open_rig(request.rig, options)
    return rig, kind.supervise(rig)


class RigSession:
    """A rig kept alive on a thread of its own (see the module)."""

    def __init__(
        self,
        request: RigRequest,
        on_snapshot: Callable[[RigSnapshot], None] | None = None,
        on_error: Callable[[BaseException], None] | None = None,
    ) -> None:
        self.request = request
        self.kind = rig_kind(request.rig)
        self.rig, self.sup = open_supervised(request)
        self.on_snapshot, self.on_error = on_snapshot, on_error
        self._calls: queue.Queue[tuple[Callable[[Rig, SafetySupervisor], Any], Future[Any]]]
        self._calls = queue.Queue()
        self._stop = threading.Event()
        self._holds = self._current_targets()
        self.periods = 0
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="rig-session", daemon=True)
        self._thread.start()

    # ------------------------------------------------------------------ from any thread
    def call(self, fn: Callable[[Rig, SafetySupervisor], Any]) -> Future[Any]:
        """Run ``fn(rig, supervisor)`` on the session's thread between two periods."""
        future: Future[Any] = Future()
        if not self.alive:
            future.set_exception(RequestError("the rig session is closed"))
            return future
        self._calls.put((fn, future))
        return future

    def emergency_stop(self, reason: str = "emergency stop") -> None:
        """Stop every arm now and refuse commands until ``release_estop``."""
        self.sup.emergency_stop(reason)

    def release_estop(self) -> None:
        """Release the latched stop; the arms hold where they stand."""

        def release(rig: Rig, sup: SafetySupervisor) -> None:
            sup.release_estop()
            self._holds = self._current_targets()

        self.call(release).result(10)

    def set_belt_speed(self, speed: float) -> None:
        self.call(lambda rig, sup: rig.conveyor.set_speed(float(speed))).result(10)

    @property
    def alive(self) -> bool:
        return self._thread.is_alive() and not self._stop.is_set()

    def close(self, timeout: float = 10.0) -> None:
        """Stop the thread (after the period in progress) and release the rig."""
        self._stop.set()
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout)
        if self._thread.is_alive():
            log.warning("the rig session's thread did not stop within %.0f s", timeout)
            return
        while not self._calls.empty():
            _, future = self._calls.get_nowait()
            future.set_exception(RequestError("the rig session closed"))
        self.rig.close()

    def __enter__(self) -> RigSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------ the session's thread
    def _current_targets(self) -> dict[str, np.ndarray]:
        """Each arm's TCP pose now (what it is told to hold)."""
        return {
            side: np.asarray(arm.state().tcp_pose, dtype=float).copy()
            for side, arm in self.rig.arms.items()
        }

    def _run(self) -> None:
        hz = self.request.snapshot_hz
        next_shot = self.rig.now()
        try:
            while not self._stop.is_set():
                while not self._calls.empty():
                    fn, future = self._calls.get_nowait()
                    if future.set_running_or_notify_cancel():
                        try:
                            future.set_result(fn(self.rig, self.sup))
                        except BaseException as err:  # noqa: BLE001 - handed to the caller
                            future.set_exception(err)
                if not self.sup.estopped:
                    # The arms are told to stay (their watchdogs stay calm); the hands keep
                    # their last targets by themselves.
                    for side, tcp in self._holds.items():
                        self.sup.arm(side).send_tcp_target(tcp)
                self.sup.tick()
                self.rig.step()
                self.periods += 1
                if self.rig.now() + 1e-9 >= next_shot and self.on_snapshot is not None:
                    next_shot = max(next_shot + 1.0 / hz, self.rig.now())
                    self.on_snapshot(snapshot(self.rig, self.sup))
                if not self.request.realtime and not self.kind.realtime:
                    time.sleep(0)  # Let the UI thread in between periods.
        except BaseException as err:  # noqa: BLE001 - reported, then the session ends
            log.exception("the rig session stopped")
            self.error = err
            self._stop.set()
            if self.on_error is not None:
                self.on_error(err)
