"""Deploying a policy on a rig, live, as a service: episodes through the runtime, shown as
they run and recorded so that they can be replayed and inspected.

``deploy(request, progress, cancel, on_frame, estop)`` opens the rig (the twin, or the real
cell from its hardware YAML), builds the policy (a training run, the twin's scripted
operator, or a policy server's), the safety supervisor and the runtime, injects the faults
asked for (twin only), and runs ``request.episodes`` episodes. ``on_frame`` gets a
``LiveFrame`` every ``view_every`` periods; ``estop`` (an ``EmergencyStop``) stops the arms
from any thread. With ``record`` every episode is saved by ``EpisodeRecorder`` into a
dataset (views, state, executed actions) with its chunks, timing and safety events next to
it (``deploy/``), and each session's settings in ``deploy/sessions.jsonl``;
``inspect_deployment`` reads them back.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from pydantic import model_validator

from r2s2r import __version__
from r2s2r.app.jobs import Cancel, ProgressFn, RequestError, report
from r2s2r.app.live import LiveFrame
from r2s2r.app.rigs import refused, rig_kind
from r2s2r.rig.kinds import RigName, RigOptions, open_rig
from r2s2r.runtime.config import Execution
from r2s2r.spec import Spec

if TYPE_CHECKING:
    from r2s2r.policy.base import Policy
    from r2s2r.rig.interfaces import Rig
    from r2s2r.rig.safety import SafetySupervisor
    from r2s2r.runtime.loop import Runtime

log = logging.getLogger("r2s2r.app")
SESSIONS_FILE = "sessions.jsonl"
# Periods of history a live frame carries (3 s at 50 Hz).
LIVE_PERIODS = 150


class DeployRequest(Spec):
    """What to deploy, on which rig, and how."""

    rig: RigName = "twin"
    # The cell's hardware YAML (hardware rig only).
    config: Path | None = None
    # A training run folder, or "scripted" (the twin's scripted operator); or ``server``.
    policy: str | None = None
    # HOST:PORT of a policy server (``r2s2r serve``), and its token.
    server: str | None = None
    token: str | None = None
    # Pace the twin to the wall clock (the real cell always is).
    realtime: bool = False
    episodes: int = 1
    # Twin (and scripted operator) seed, and the twin's condition.
    seed: int = 0
    condition: str = "nominal"
    execution: Execution = "rtc"
    exec_horizon: int = 10
    # Lockstep twin only: the chunks' delay in periods (None: their measured latency).
    delay_periods: int | None = 3
    # Record the episodes into this dataset folder (created or continued).
    record: Path | None = None
    # Record every camera of the rig (else only the policy's).
    record_views: bool = True
    # Faults to inject (``r2s2r.runtime.faults``; twin only).
    faults: tuple[str, ...] = ()
    # Twin camera views, px.
    image_size: int = 128
    # Episode length limit in seconds (default: the task's episode length).
    max_seconds: float | None = None
    # Torch device of a learned policy.
    device: str = "auto"
    # Periods between live frames.
    view_every: int = 10

    @model_validator(mode="after")
    def _check(self) -> DeployRequest:
        if self.episodes < 1:
            raise ValueError(f"episodes must be at least 1, got {self.episodes}")
        if self.image_size < 16:
            raise ValueError(f"image_size must be at least 16 px, got {self.image_size}")
        if self.view_every < 1:
            raise ValueError(f"view_every must be at least 1, got {self.view_every}")
        if self.max_seconds is not None and not self.max_seconds > 0:
            raise ValueError(f"max_seconds must be positive, got {self.max_seconds}")
        return self


@dataclass(frozen=True)
class EpisodeResult:
    """How one deployed episode went (``episode_summary`` plus where it was saved)."""

    index: int
    summary: dict[str, Any]
    dataset_episode: int | None


@dataclass
class DeployResult:
    episodes: list[EpisodeResult] = field(default_factory=list)
    record: Path | None = None
    estopped: bool = False


class Stoppable(Protocol):
    """What an emergency stop stops: a runtime, or a safety supervisor."""

    def emergency_stop(self, reason: str = "emergency stop") -> None: ...


class EmergencyStop:
    """Stops the arms of a deployment (or a recording) from any thread (a key, a GUI
    button); pressed before the runtime (or the supervisor) exists, it stops them as soon as
    it does."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._runtime: Stoppable | None = None
        self._reason: str | None = None

    def trigger(self, reason: str = "emergency stop") -> None:
        with self._lock:
            self._reason = reason
            runtime = self._runtime
        if runtime is not None:
            runtime.emergency_stop(reason)

    @property
    def triggered(self) -> bool:
        return self._reason is not None

    def attach(self, runtime: Stoppable) -> None:
        with self._lock:
            self._runtime = runtime
            reason = self._reason
        if reason is not None:
            runtime.emergency_stop(reason)


def parse_server(text: str) -> tuple[str, int]:
    """(host, port) of ``HOST:PORT`` (``[v6]:PORT`` for an IPv6 address)."""
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise RequestError(f"--server {text!r}: expected HOST:PORT, e.g. 127.0.0.1:8000")
    return host.strip("[]"), int(port)


def check_request(request: DeployRequest) -> None:
    """Refuse a request that cannot run, before anything is opened."""
    from r2s2r.runtime.faults import FaultError, parse_faults
    from r2s2r.spec.conditions import CONDITIONS

    if (request.policy is None) == (request.server is None):
        raise RequestError("give one of --policy RUN|scripted and --server HOST:PORT")
    if request.server is not None:
        parse_server(request.server)
    kind = rig_kind(request.rig, RigOptions(config=request.config))
    if request.policy == "scripted" and not kind.truth:
        raise RequestError("the scripted operator drives only the twin (--rig twin)")
    if request.faults and not kind.simulated:
        raise RequestError("fault injection runs on the twin only (--rig twin)")
    if kind.truth:
        CONDITIONS.get(request.condition)
    try:
        faults = parse_faults(request.faults)
    except FaultError as err:
        raise RequestError(str(err)) from None
    lockstep = not kind.realtime and not request.realtime
    if lockstep and request.delay_periods is not None and any(f.kind == "latency" for f in faults):
        raise RequestError(
            "a latency fault does nothing on the lockstep twin with a fixed delay (chunks "
            f"arrive {request.delay_periods} periods late whatever the inference takes): use "
            "--realtime or --lockstep-delay measured"
        )
    if any(f.kind == "disconnect" for f in faults) and request.server is not None:
        raise RequestError(
            "the disconnect fault serves the policy from this process so that it can stop "
            "the server: use --policy RUN|scripted, not --server"
        )
    if request.policy not in (None, "scripted") and not Path(request.policy).is_dir():
        raise RequestError(
            f"--policy {request.policy!r}: no such training run folder (expected a folder "
            "written by r2s2r train, or 'scripted')"
        )


def _open_rig(request: DeployRequest) -> tuple[Rig, SafetySupervisor, Any, Any]:
    """The rig, its supervisor, the task and the nominal world."""
    from r2s2r.spec.worlds import world_at

    kind = rig_kind(request.rig)
    options = RigOptions(
        seed=request.seed,
        world=world_at(request.image_size),
        realtime=request.realtime,
        condition=request.condition,
        config=request.config,
    )
    with refused():
        rig = open_rig(request.rig, options)
    try:
        sup = kind.supervise(rig)
    except BaseException:
        rig.close()
        raise
    task, world = kind.setting(rig)
    return rig, sup, task, world


def _policy(request: DeployRequest) -> Policy:
    """A learned policy or a policy server's (before the rig opens: a bad run or an
    unreachable server fails before any device is connected)."""
    if request.server is not None:
        from r2s2r.policy.client import PolicyServerGone, RemotePolicy
        from r2s2r.runtime.remote import request_form

        host, port = parse_server(request.server)
        try:
            return request_form(RemotePolicy(host, port, token=request.token))
        except PolicyServerGone as err:
            raise RequestError(str(err)) from err
    from r2s2r.policy.learned import load_policy

    assert request.policy is not None
    return load_policy(Path(request.policy), device=request.device)


def _runtime_cfg(request: DeployRequest) -> Any:
    from r2s2r.runtime.config import RuntimeCfg

    return RuntimeCfg(
        execution=request.execution,
        exec_horizon=request.exec_horizon,
        delay_periods=request.delay_periods,
        max_s=request.max_seconds,
    )


def deploy(
    request: DeployRequest,
    progress: ProgressFn | None = None,
    cancel: Cancel | None = None,
    on_frame: Callable[[LiveFrame], None] | None = None,
    estop: EmergencyStop | None = None,
) -> DeployResult:
    """Run ``request.episodes`` episodes of the policy on the rig (see the module)."""
    from r2s2r.data import DatasetWriter
    from r2s2r.runtime.episode import start_episode
    from r2s2r.runtime.faults import FaultInjector
    from r2s2r.runtime.loop import Runtime
    from r2s2r.runtime.record import EpisodeRecorder, deploy_dataset_cfg, episode_summary

    check_request(request)
    kind = rig_kind(request.rig)
    cancel = cancel or Cancel()
    result = DeployResult(record=request.record)
    policy: Policy | None = None if request.policy == "scripted" else _policy(request)
    try:
        base, sup, task, world = _open_rig(request)
    except BaseException:
        _close(policy)
        raise
    injector = FaultInjector.parse(request.faults)
    writer: DatasetWriter | None = None
    runtime: Runtime | None = None
    try:
        if policy is None:
            from r2s2r.rig.twin import TwinRig
            from r2s2r.runtime.scripted import OperatorPolicy

            assert isinstance(base, TwinRig)
            policy = OperatorPolicy.for_twin(base, request.seed)
        rig = injector.wrap_rig(base)
        injector.watch(sup)
        # The policy as built is the one to close; the runtime runs it with the faults.
        runtime = Runtime(
            rig, injector.wrap_policy(policy, rig, sup.limits), sup, _runtime_cfg(request)
        )
        if estop is not None:
            estop.attach(runtime)
        recorder = None
        if request.record is not None:
            cameras = tuple(rig.cameras) if request.record_views else runtime.contract.cameras
            writer = DatasetWriter(request.record, deploy_dataset_cfg(rig, cameras))
            recorder = EpisodeRecorder(rig, writer)
            _log_session(request, runtime, writer.num_episodes)
        max_s = request.max_seconds or task.episode_s
        for i in range(request.episodes):
            if cancel.cancelled or sup.estopped:
                result.estopped = sup.estopped
                break
            start = start_episode(rig, task, world)
            injector.begin_episode()
            n_notes = len(injector.injected)
            hook = _StepHook(i, rig, runtime, request.view_every, on_frame, recorder, injector)
            episode = runtime.run_episode(
                start, max_s, on_step=hook, should_stop=lambda: cancel.cancelled
            )
            episode.messages.extend(injector.injected[n_notes:])
            index = None
            if recorder is not None and episode.steps:
                meta = {
                    "seed": request.seed,
                    "condition": request.condition if kind.truth else None,
                    "world": kind.world,
                    "behavior": "deploy",
                }
                index = recorder.save(episode, meta)
            summary = episode_summary(episode)
            result.episodes.append(EpisodeResult(i, summary, index))
            report(progress, "deploy", i + 1, request.episodes, f"last: {episode.outcome}")
            if episode.ended_by == "estop":
                result.estopped = True
                break
    finally:
        if runtime is not None:
            runtime.close()
        if writer is not None:
            writer.close()
        injector.close()
        _close(policy)
        base.close()
    return result


def _close(policy: Policy | None) -> None:
    close = getattr(policy, "close", None)
    if close is not None:
        close()


class _StepHook:
    """The runtime's step hook of one episode: the recorder, the faults, the live view."""

    def __init__(
        self,
        episode: int,
        rig: Rig,
        runtime: Runtime,
        view_every: int,
        on_frame: Callable[[LiveFrame], None] | None,
        recorder: Any,
        injector: Any,
    ) -> None:
        self.episode, self.rig, self.runtime = episode, rig, runtime
        self.view_every, self.on_frame = view_every, on_frame
        self.recorder, self.injector = recorder, injector

    def __call__(self, step: Any, observation: dict[str, Any] | None) -> None:
        if self.recorder is not None:
            self.recorder.on_step(step, observation)
        self.injector.on_step(step, observation)
        if self.on_frame is not None and step.step % self.view_every == 0:
            self.on_frame(self.frame(step, observation))

    def frame(self, step: Any, observation: dict[str, Any] | None) -> LiveFrame:
        episode = self.runtime.episode
        assert episode is not None
        views = dict((observation or {}).get("images") or {})
        for name, camera in self.rig.cameras.items():
            if name not in views:
                views[name] = camera.read().image
        events = [f"{e.device} {e.kind}: {e.detail}" for e in self.runtime.sup.events[-3:]]
        from r2s2r.app.live import snapshot

        return LiveFrame(
            self.episode,
            step.step,
            step.t,
            views,
            episode.steps[-LIVE_PERIODS:],
            episode.chunks[-12:],
            events=events,
            rig=snapshot(self.rig, self.runtime.sup, views),
        )


def _log_session(request: DeployRequest, runtime: Runtime, first_episode: int) -> None:
    """Append what this session runs with to ``deploy/sessions.jsonl`` of the dataset."""
    import dataclasses

    from r2s2r.runtime.record import DEPLOY_DIR

    assert request.record is not None
    path = request.record / DEPLOY_DIR / SESSIONS_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    meta = runtime.policy.metadata
    line = {
        "first_episode": first_episode,
        "request": request.model_dump(mode="json", exclude={"token"}),
        "runtime": runtime.cfg.model_dump(mode="json"),
        "execution": runtime.execution,
        "policy": {**dataclasses.asdict(meta), "cameras": list(meta.cameras)},
        "version": __version__,
        "started": time.strftime("%Y-%m-%dT%H:%M:%S"),
    }
    with path.open("a") as f:
        f.write(json.dumps(line) + "\n")
