"""Teleoperated recording: synchronized 50 Hz episodes from a rig into a dataset.

Every control period the recorder samples all streams on one tick: the three camera views,
the proprio state, the hand tracker; the tracker reading goes through the teleop path
(calibration, retargeting, safety supervisor) and the commanded action is stored with the
observation it was computed from. Frames are stamped with the tick's time on the 50 Hz grid;
the rig clock's actual capture times are kept per take (``Take.capture_times``).

Takes are controlled by keys (``s`` start, ``e`` end and save, ``f`` end and save as failed
(hardware, where no judge is available), ``d`` discard, ``r`` redo, ``q`` quit). In scripted
mode takes start by themselves and end on the rig's verdict or at the time limit; keys still
discard, redo or quit. A discarded take is dropped from the writer before anything of it is
committed, so it never reaches the dataset.
"""

from __future__ import annotations

import logging
import queue
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from r2s2r.data import DatasetError, DatasetWriter
from r2s2r.rig.interfaces import HandTracker, Rig
from r2s2r.rig.observe import observe
from r2s2r.rig.safety import SafetySupervisor
from r2s2r.rig.teleop import TeleopSession
from r2s2r.sim.contract import Contract, ContractError
from r2s2r.spec import TaskSpec, WorldSpec
from r2s2r.spec.worlds import sorting_arm

log = logging.getLogger("r2s2r.record")
KEYS_HELP = "s start, e end+save, f end+save as failed, d discard, r redo, q quit"


class KeySource(Protocol):
    def poll(self) -> str | None:
        """The next key pressed, or None."""
        ...


class QueuedKeys:
    """Keys pushed by code (a GUI, a test): ``push('d')``; optionally at a given frame of a
    given take with ``schedule``."""

    def __init__(self) -> None:
        self._queue: queue.Queue[str] = queue.Queue()
        self._plan: dict[tuple[int, int], str] = {}

    def push(self, key: str) -> None:
        self._queue.put(key)

    def schedule(self, take: int, frame: int, key: str) -> None:
        """Press ``key`` when frame ``frame`` of take ``take`` (0-based, counting discarded
        takes) is about to be recorded."""
        self._plan[(take, frame)] = key

    def at(self, take: int, frame: int) -> None:
        key = self._plan.pop((take, frame), None)
        if key is not None:
            self.push(key)

    def poll(self) -> str | None:
        try:
            return self._queue.get_nowait()
        except queue.Empty:
            return None


class StdinKeys(QueuedKeys):
    """Single keys read from stdin by a background thread (raw keys on a terminal)."""

    def __init__(self) -> None:
        super().__init__()
        self._saved: Any = None
        if sys.stdin.isatty():
            import termios
            import tty

            self._saved = termios.tcgetattr(sys.stdin.fileno())
            tty.setcbreak(sys.stdin.fileno())
        self._thread = threading.Thread(target=self._read, daemon=True, name="record-keys")
        self._thread.start()

    def _read(self) -> None:
        while True:
            ch = sys.stdin.read(1)
            if not ch:
                return
            if not ch.isspace():
                self.push(ch.lower())

    def close(self) -> None:
        """Give the terminal back its line mode."""
        if self._saved is not None:
            import termios

            termios.tcsetattr(sys.stdin.fileno(), termios.TCSADRAIN, self._saved)
            self._saved = None


@dataclass
class Take:
    """What happened to one take."""

    index: int
    object_name: str
    arm: str
    belt_speed: float
    frames: int = 0
    outcome: str = "pending"  # The rig's verdict on the object, or the operator's.
    success: bool = False
    ended_by: str = ""  # verdict | timeout | key:<k>
    decision: str = ""  # saved | discarded | redo | quit
    episode_index: int | None = None
    capture_times: list[float] = field(default_factory=list)


@dataclass(frozen=True)
class FrameRecord:
    """One recorded frame, handed to ``on_frame`` (viewers, tests)."""

    take: int
    frame: int
    timestamp: float
    images: dict[str, np.ndarray]
    state: np.ndarray
    action: np.ndarray
    env_state: np.ndarray | None = None


class Recorder:
    """Records takes from ``rig`` driven by ``tracker`` through ``teleop`` into ``writer``.

    Where the rig judges its episodes (``episode_outcome()``: the twin) a take ends on its
    verdict; elsewhere the operator's keys end it and label it. ``tracker`` is one tracker,
    or one per arm side (a glove and tracker per hand); it may have
    ``begin(object_name, arm)`` (the scripted operator does).
    The dataset's contract must fit the rig's (``ContractError`` otherwise): the same
    embodiment in the tcp action mode, and cameras the rig has.
    """

    def __init__(
        self,
        rig: Rig,
        tracker: HandTracker | dict[str, HandTracker],
        teleop: TeleopSession,
        writer: DatasetWriter,
        task: TaskSpec,
        world: WorldSpec,
        meta: dict[str, Any] | None = None,
        max_s: float | None = None,
        on_frame: Callable[[FrameRecord], None] | None = None,
    ) -> None:
        self.rig, self.tracker, self.teleop, self.writer = rig, tracker, teleop, writer
        self.sup: SafetySupervisor = teleop.sup
        self.task, self.world = task, world
        self.meta = dict(meta or {})
        self.fps = writer.cfg.fps
        self.max_frames = int(round((max_s or task.episode_s) * self.fps))
        self.on_frame = on_frame
        self.takes: list[Take] = []
        self.contract = writer.contract
        rig_contract = Contract.of(rig.embodiment, "tcp", tuple(rig.cameras))
        rig_contract.check_compatible(
            self.contract, what=f"dataset {writer.root}", this="this rig", views="subset"
        )
        self.cameras = list(self.contract.cameras)
        self.write_s = 0.0  # Wall time spent in the dataset writer.

    # ------------------------------------------------------------------ sessions
    def run(
        self,
        episodes: int,
        keys: KeySource | None = None,
        interactive: bool = False,
        progress: Any = None,
    ) -> list[Take]:
        """Record until ``episodes`` are saved or ``q`` is pressed; returns every take."""
        saved = discarded = 0
        redo = False
        while saved < episodes:
            if interactive and not redo:
                log.info("ready: press s to start a take (%s)", KEYS_HELP)
                if self._wait_for(keys, "sq") == "q":
                    break
            take = self.take(keys, interactive)
            redo = take.decision == "redo"
            if take.decision == "saved":
                saved += 1
                if progress is not None:
                    progress.update(1)
            else:
                discarded += 1
            if progress is not None:
                progress.set_postfix(saved=saved, discarded=discarded, last=take.outcome)
            if take.decision == "quit":
                break
        return self.takes

    def take(self, keys: KeySource | None = None, interactive: bool = False) -> Take:
        """Record one take; it is saved or discarded before this returns."""
        rig = self.rig
        name = rig.presenter.present()
        arm = sorting_arm(self.task, self.world, name)
        take = Take(len(self.takes), name, arm, float(rig.conveyor.speed()))
        self.takes.append(take)
        self.teleop.begin(arm)
        tracker = self.tracker[arm] if isinstance(self.tracker, dict) else self.tracker
        begin = getattr(tracker, "begin", None)
        if begin is not None:
            begin(name, arm)
        t0 = rig.now()
        key: str | None = None
        for k in range(self.max_frames):
            if isinstance(keys, QueuedKeys):
                keys.at(take.index, k)
            key = keys.poll() if keys is not None else None
            if key in ("e", "f", "d", "r", "q"):
                take.ended_by = f"key:{key}"
                break
            self._record_frame(take, k, rig.now() - t0, tracker)
            rig.step()
            if self._judged(take):
                take.ended_by = "verdict"
                key = None
                break
        else:
            take.ended_by = "timeout"
            key = None
        self._judged(take)
        if key is None and interactive:
            log.info("take over (%s): e save, d discard, r redo, q quit", take.outcome)
            key = self._wait_for(keys, "efdrq")
        if key == "f":
            take.success, take.outcome = False, "failed"
        elif key == "e" and rig.episode_outcome() is None:
            take.success, take.outcome = True, "sorted"
        self._finish(take, key)
        return take

    # ----------------------------------------------------------------- internals
    def _record_frame(self, take: Take, k: int, captured: float, tracker: HandTracker) -> None:
        try:
            obs = observe(
                self.rig,
                self.contract,
                self.instruction(take.object_name),
                environment_state=self.writer.cfg.env_state,
            )
        except ContractError as err:
            raise DatasetError(
                f"{err}; record into a dataset created without observation.environment_state"
            ) from None
        images, env_state = obs.get("images", {}), obs.get("environment_state")
        state = self.contract.state(obs)
        action = self.teleop.step(tracker.read())
        self.sup.tick()
        stamp = k / self.fps
        start = time.perf_counter()
        self.writer.add_frame(images, state, action, timestamp=stamp, env_state=env_state)
        self.write_s += time.perf_counter() - start
        take.capture_times.append(captured)
        take.frames += 1
        if self.on_frame is not None:
            self.on_frame(FrameRecord(take.index, k, stamp, images, state, action, env_state))

    def _judged(self, take: Take) -> bool:
        outcome = self.rig.episode_outcome()
        if outcome is None:
            return False
        take.outcome, take.success, done = outcome
        return bool(done)

    def _finish(self, take: Take, key: str | None) -> None:
        if key in ("d", "r", "q") or take.frames == 0:
            self.writer.discard_episode()
            take.decision = {"d": "discarded", "r": "redo", "q": "quit"}.get(key or "", "discarded")
            log.info("take %d discarded (%s)", take.index, take.decision)
            return
        meta = {
            **self.meta,
            "belt_speed": take.belt_speed,
            "object_ids": [take.object_name],
            "embodiment_id": self.contract.embodiment.id,
        }
        start = time.perf_counter()
        take.episode_index = self.writer.save_episode(
            self.instruction(take.object_name), take.success, meta
        )
        self.write_s += time.perf_counter() - start
        take.decision = "saved"
        log.info("take %d saved as episode %d (%s)", take.index, take.episode_index, take.outcome)

    def instruction(self, object_name: str) -> str:
        """The task instruction for ``object_name``."""
        return self.task.instruction_for(object_name)

    @staticmethod
    def _wait_for(keys: KeySource | None, allowed: str) -> str:
        if keys is None:
            raise RuntimeError("interactive recording needs a key source")
        while True:
            key = keys.poll()
            if key is not None and key in allowed:
                return key
            time.sleep(0.02)
