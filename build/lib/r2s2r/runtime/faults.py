"""Fault injection: a policy and devices that fail the way real ones do, to show that every
fault ends with the arms held or stopped inside their limits.

A fault is written ``KIND[:ARG]@START[-END]`` (times in s or ms since the episode began):

- ``latency:300ms@2s``: the inference started at or after 2 s takes 300 ms longer;
- ``nan@1.5s``: the chunk inferred at or after 1.5 s holds a NaN;
- ``workspace@1s``: the chunk inferred at or after 1 s sends the TCP targets 0.2 m above
  the supervisor's workspace box;
- ``camera:head@2s``: the head camera's frames stop updating at 2 s (it keeps delivering
  its last frame);
- ``disconnect@2s``: the policy server goes down at 2 s (the policy is served from this
  process by a real ``PolicyServer`` and driven through a real ``RemotePolicy``).

Policy faults (latency, nan, workspace) hit one inference, or with ``-END`` every inference
started in the window; device faults (camera, disconnect) last to the episode's end, or to
``END``. ``FaultInjector`` wraps a rig and a policy with them and triggers the device
faults from the runtime's step hook; what it injected is in ``injected``.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Sequence
from typing import Any, Literal, cast, get_args

import numpy as np
from pydantic import model_validator

from r2s2r.policy.base import ChunkPrefix, Policy, PolicyMetadata
from r2s2r.rig.interfaces import Rig
from r2s2r.rig.safety import SafetyLimits, SafetySupervisor
from r2s2r.runtime.episode import EpisodeStart, StepLog
from r2s2r.runtime.fault_devices import FaultyRig
from r2s2r.runtime.remote import LocalServer, takes_prefixes
from r2s2r.sim.contract import Contract
from r2s2r.sim.embodiment import Embodiment
from r2s2r.spec import Spec

log = logging.getLogger("r2s2r.runtime")
FaultKind = Literal["latency", "nan", "workspace", "camera", "disconnect"]
POLICY_FAULTS = ("latency", "nan", "workspace")
# How far above the workspace box the workspace fault sends the TCP targets.
OUTSIDE_M = 0.2
EXAMPLES = "latency:300ms@2s, nan@1.5s, workspace@1s, camera:head@2s, disconnect@2s"


class FaultError(ValueError):
    """A fault that cannot be injected as written."""


class Fault(Spec):
    """One fault (see the module docstring)."""

    kind: FaultKind
    start_s: float
    # None: a policy fault hits one inference, a device fault lasts to the episode's end.
    end_s: float | None = None
    latency_ms: float | None = None
    camera: str | None = None

    @model_validator(mode="after")
    def _check(self) -> Fault:
        if self.start_s < 0 or (self.end_s is not None and self.end_s <= self.start_s):
            raise ValueError(f"the window {self.start_s} .. {self.end_s} s is empty or negative")
        if (self.kind == "latency") != (self.latency_ms is not None):
            raise ValueError("a latency fault, and only it, takes a latency (latency:300ms@2s)")
        if self.latency_ms is not None and not self.latency_ms > 0:
            raise ValueError(f"the latency must be positive, got {self.latency_ms} ms")
        if (self.kind == "camera") != (self.camera is not None):
            raise ValueError("a camera fault, and only it, names a camera (camera:head@2s)")
        return self

    @classmethod
    def parse(cls, text: str) -> Fault:
        """A fault from its written form, or a ``FaultError`` saying what is wrong."""
        m = re.fullmatch(r"\s*([a-z]+)(?::([^@]+))?@([^-]+)(?:-(.+))?\s*", text)
        if m is None:
            raise FaultError(f"fault {text!r}: expected KIND[:ARG]@START[-END], e.g. {EXAMPLES}")
        kind, arg, start, end = m.groups()
        if kind not in get_args(FaultKind):
            raise FaultError(
                f"fault {text!r}: unknown kind {kind!r}; expected latency, nan, workspace, "
                f"camera or disconnect (e.g. {EXAMPLES})"
            )
        if kind in ("nan", "workspace", "disconnect") and arg is not None:
            raise FaultError(f"fault {text!r}: {kind} takes no argument (write {kind}@START)")
        if kind in ("latency", "camera") and arg is None:
            example = "latency:300ms@2s" if kind == "latency" else "camera:head@2s"
            raise FaultError(f"fault {text!r}: {kind} needs an argument, e.g. {example}")
        try:
            return cls(
                kind=cast(FaultKind, kind),
                start_s=_seconds(start, "s", text),
                end_s=None if end is None else _seconds(end, "s", text),
                latency_ms=None if kind != "latency" else _seconds(arg, "ms", text) * 1e3,
                camera=arg.strip() if kind == "camera" else None,
            )
        except ValueError as err:
            if isinstance(err, FaultError):
                raise
            raise FaultError(f"fault {text!r}: {err}") from None

    def text(self) -> str:
        """The written form."""
        arg = ""
        if self.latency_ms is not None:
            arg = f":{self.latency_ms:g}ms"
        elif self.camera is not None:
            arg = f":{self.camera}"
        end = "" if self.end_s is None else f"-{self.end_s:g}s"
        return f"{self.kind}{arg}@{self.start_s:g}s{end}"

    def active(self, t: float) -> bool:
        """Whether a device fault is on at episode time ``t``."""
        return t >= self.start_s and (self.end_s is None or t < self.end_s)


def _seconds(value: str, default_unit: str, text: str) -> float:
    m = re.fullmatch(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*(ms|s)?\s*", value)
    if m is None:
        raise FaultError(f"fault {text!r}: {value!r} is not a time (e.g. 2s, 1.5s, 300ms)")
    number, unit = float(m.group(1)), m.group(2) or default_unit
    return number / 1e3 if unit == "ms" else number


def parse_faults(texts: Sequence[str]) -> list[Fault]:
    return [Fault.parse(t) for t in texts]


class FaultyPolicy:
    """``policy`` with policy faults: a slower inference, a NaN in a chunk, or a chunk whose
    TCP targets leave the workspace box, on the inferences the faults hit (by the rig's
    ``clock`` since ``reset``)."""

    def __init__(
        self,
        policy: Policy,
        faults: Sequence[Fault],
        clock: Callable[[], float],
        embodiment: Embodiment,
        limits: SafetyLimits,
        note: Callable[[str], None],
    ) -> None:
        self.inner, self.clock, self.note = policy, clock, note
        self.faults = [f for f in faults if f.kind in POLICY_FAULTS]
        self.contract = Contract.of(embodiment, "tcp", ())
        self.top = float(limits.workspace_max[2]) + OUTSIDE_M
        self._t0 = clock()
        self._done: set[int] = set()

    @property
    def metadata(self) -> PolicyMetadata:
        return self.inner.metadata

    def reset(self) -> None:
        self.inner.reset()
        self._t0 = self.clock()
        self._done.clear()

    def begin(self, start: EpisodeStart) -> None:
        begin = getattr(self.inner, "begin", None)
        if begin is not None:
            begin(start)

    def infer(self, observation: dict[str, Any]) -> np.ndarray:
        return self._faulty(lambda: self.inner.infer(observation))

    def _hits(self, t: float) -> list[Fault]:
        hits = []
        for i, fault in enumerate(self.faults):
            if fault.end_s is None:
                if t >= fault.start_s and i not in self._done:
                    self._done.add(i)
                    hits.append(fault)
            elif fault.start_s <= t < fault.end_s:
                hits.append(fault)
        return hits

    def _faulty(self, infer: Callable[[], np.ndarray]) -> np.ndarray:
        t = self.clock() - self._t0
        hits = self._hits(t)
        # The chunk is computed from the observation as it was; a latency fault delays
        # its arrival, as a slow network or model does.
        chunk = np.array(infer(), dtype=np.float64)
        delay_ms = 0.0
        for fault in hits:
            if fault.kind == "nan":
                chunk[len(chunk) // 2, 0] = np.nan
                self.note(f"fault at {t:.2f} s: a NaN in action {len(chunk) // 2} of the chunk")
            elif fault.kind == "workspace":
                arm, hand = self.contract.split_action(chunk)
                arm = arm.copy()
                arm[..., 2] = self.top
                chunk = self.contract.join_action(arm, hand)
                self.note(f"fault at {t:.2f} s: the chunk's TCP targets at z = {self.top:.2f} m")
            elif fault.kind == "latency":
                assert fault.latency_ms is not None
                delay_ms += fault.latency_ms
                self.note(f"fault at {t:.2f} s: the inference takes {fault.latency_ms:g} ms more")
        if delay_ms:
            time.sleep(delay_ms / 1e3)
        return chunk


class FaultyGuidedPolicy(FaultyPolicy):
    """A ``FaultyPolicy`` of a policy that takes RTC prefixes."""

    def infer_guided(self, observation: dict[str, Any], prefix: ChunkPrefix) -> np.ndarray:
        inner: Any = self.inner
        return self._faulty(lambda: inner.infer_guided(observation, prefix))


class FaultInjector:
    """Injects ``faults`` into a deployment: ``wrap_rig`` before the runtime is built,
    ``watch`` on its supervisor, ``wrap_policy`` on the policy it runs, ``begin_episode``
    before each episode and ``on_step`` as (part of) the runtime's step hook."""

    def __init__(self, faults: Sequence[Fault]) -> None:
        self.faults = list(faults)
        self.injected: list[str] = []
        self.server: LocalServer | None = None
        self.rig: FaultyRig | None = None
        self._fired: set[int] = set()

    @classmethod
    def parse(cls, texts: Sequence[str]) -> FaultInjector:
        return cls(parse_faults(texts))

    def __bool__(self) -> bool:
        return bool(self.faults)

    def note(self, line: str) -> None:
        """Keep (and log) one line of what was injected."""
        log.warning("runtime: %s", line)
        self.injected.append(line)

    def wrap_rig(self, rig: Rig) -> Rig:
        """``rig`` with the cameras that camera faults name made freezable."""
        names = [f.camera for f in self.faults if f.camera is not None]
        unknown = [n for n in names if n not in rig.cameras]
        if unknown:
            raise FaultError(
                f"camera fault: the rig has no camera {unknown[0]!r} (it has {list(rig.cameras)})"
            )
        if not names:
            return rig
        self.rig = FaultyRig(rig, names)
        return self.rig

    def watch(self, supervisor: SafetySupervisor) -> None:
        """Make the supervisor watch the cameras the faults freeze (the runtime watches the
        policy's own)."""
        if self.rig is not None:
            for camera in self.rig.frozen.values():
                supervisor.watch_camera(camera)

    def wrap_policy(self, policy: Policy, rig: Rig, limits: SafetyLimits) -> Policy:
        """``policy`` served through a local server where a disconnect fault needs one, with
        the policy faults on top."""
        if any(f.kind == "disconnect" for f in self.faults):
            self.server = LocalServer(policy)
            policy = self.server.policy
        if not any(f.kind in POLICY_FAULTS for f in self.faults):
            return policy
        cls = FaultyGuidedPolicy if takes_prefixes(policy) else FaultyPolicy
        return cls(policy, self.faults, rig.now, rig.embodiment, limits, self.note)

    def begin_episode(self) -> None:
        """Undo the device faults of the last episode (cameras thaw, the server is back)."""
        self._fired.clear()
        if self.rig is not None:
            for camera in self.rig.frozen.values():
                camera.thaw()
        if self.server is not None:
            self.server.restart()

    def on_step(self, step: StepLog, observation: dict[str, Any] | None = None) -> None:
        """Switch the device faults on (and off) by the episode's time."""
        for i, fault in enumerate(self.faults):
            if fault.kind == "camera" and self.rig is not None:
                assert fault.camera is not None
                camera = self.rig.frozen[fault.camera]
                if fault.active(step.t) and not camera.frozen:
                    camera.freeze()
                    self.note(f"fault at {step.t:.2f} s: camera {fault.camera} stops updating")
                elif not fault.active(step.t) and camera.frozen:
                    camera.thaw()
                    self.note(f"fault over at {step.t:.2f} s: camera {fault.camera} delivers")
            elif fault.kind == "disconnect" and self.server is not None:
                if fault.active(step.t) and i not in self._fired:
                    self._fired.add(i)
                    self.server.stop()
                    self.note(f"fault at {step.t:.2f} s: the policy server disconnects")
                elif fault.end_s is not None and step.t >= fault.end_s and not self.server.up:
                    self.server.restart()
                    self.note(f"fault over at {step.t:.2f} s: the policy server is back")

    def close(self) -> None:
        if self.server is not None:
            self.server.close()
            self.server = None
