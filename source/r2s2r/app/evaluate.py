"""Evaluating a policy under a protocol, as a service: ``r2s2r eval`` and the GUIs call it.

``evaluate(request, progress, cancel)`` opens the policy (a run, a server, the twin's
scripted operator or the planner) and the rig, and runs the protocol's trials not yet in
``request.out`` (``r2s2r.eval.runner``). Cancelling drops the trial in progress and keeps
every logged one; the same request continues where it stopped.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import field_validator, model_validator

from r2s2r.app.jobs import Cancel, ProgressFn, RequestError, report
from r2s2r.app.rigs import refused, rig_kind
from r2s2r.data.record import KeySource
from r2s2r.eval.runner import EvalResult, video_every
from r2s2r.rig.kinds import RigName, RigOptions, open_rig
from r2s2r.runtime import RuntimeCfg
from r2s2r.scaleout import check_address
from r2s2r.spec import Spec
from r2s2r.spec.base import NonNegInt, PosInt

if TYPE_CHECKING:
    from r2s2r.eval.protocol import ProtocolSpec


class EvalRequest(Spec):
    """One evaluation: the policy, the rig, the protocol and where the trials go."""

    out: Path
    # A training run folder, "scripted" (the twin's operator) or "planned" (the planner);
    # or ``server`` "HOST:PORT" of a policy server (exactly one of the two).
    policy: str | None = None
    server: str | None = None
    # The policy server's token, if it asks for one.
    token: str | None = None
    rig: RigName = "twin"
    # The cell's hardware YAML (--rig hardware).
    config: Path | None = None
    # The twin's hidden cell hosting every trial (None: each trial seed's own cell).
    cell: int | None = None
    # A training run's own training instances ("train": the protocol's name, --trials of
    # them) or the protocol's trials with none of them ("unseen"); None: the protocol as is.
    instances: Literal["train", "unseen"] | None = None
    # A learned policy's flow noise: None, one fixed draw for every trial; N, each trial's
    # own draw from N and the trial's index (the same trial gets the same draw every time).
    noise_seed: NonNegInt | None = None
    # A protocol name (``r2s2r.eval.protocol.PROTOCOLS``) or a protocol YAML.
    protocol: str = "paper"
    # Run the first N trials of the protocol's list (None: all).
    trials: PosInt | None = None
    # The protocol seed: the trial list's.
    seed: NonNegInt = 0
    runtime: RuntimeCfg = RuntimeCfg()
    # Trials recorded into DIR/rollouts (with video): all, none, or every N-th ("N").
    video: str = "all"
    # The twin's camera views, px (even: they are H.264 videos).
    image_size: PosInt = 256
    # Where a learned policy runs ("auto": CUDA where there is a GPU).
    device: str = "auto"
    # Twin trials run at once in worker processes (1: one after another), or as Ray tasks on
    # the cluster ``ray`` names (an address, ``auto``, or ``local``); the outcomes are the
    # same. The real cell runs one trial at a time.
    workers: PosInt = 1
    ray: str | None = None

    _ray = field_validator("ray")(check_address)

    @field_validator("video")
    @classmethod
    def _video(cls, value: str) -> str:
        video_every(value)
        return value

    @field_validator("image_size")
    @classmethod
    def _even(cls, value: int) -> int:
        if value % 2 or value < 16:
            raise ValueError(f"expected an even size of at least 16 px, got {value}")
        return value

    @model_validator(mode="after")
    def _one_policy(self) -> EvalRequest:
        if (self.policy is None) == (self.server is None):
            raise ValueError(
                "name the policy: --policy RUN|scripted|planned or --server HOST:PORT (exactly one)"
            )
        return self


def check_request(request: EvalRequest) -> None:
    """Refuse a request that cannot run, before anything is opened."""
    kind = rig_kind(request.rig)
    if not kind.parallel and (request.workers > 1 or request.ray is not None):
        raise RequestError(
            f"--workers {request.workers}"
            + (f" --ray {request.ray}" if request.ray else "")
            + f": the {kind.world} cell runs one trial at a time; use --workers 1 and no --ray "
            f"with --rig {request.rig}"
        )
    rig_kind(request.rig, RigOptions(config=request.config))
    if not kind.truth and request.policy in ("scripted", "planned"):
        raise RequestError(
            f"--policy {request.policy} runs only on the twin: the scripted operator reads the "
            "twin's cell, the planner needs object poses the real cell does not track"
        )


def _instances_protocol(request: EvalRequest, protocol: ProtocolSpec) -> ProtocolSpec:
    """The protocol of ``request.instances`` for its training run (``RequestError`` where the
    policy is not one, or its instances cannot be named)."""
    from r2s2r.eval.instances import InstanceError, instance_protocol, training_instances

    if request.policy in (None, "scripted", "planned") or not rig_kind(request.rig).truth:
        raise RequestError(
            f"--instances {request.instances}: needs a training run (--policy RUN) on the twin"
        )
    assert request.policy is not None
    try:
        trained = training_instances(Path(request.policy))
        return instance_protocol(
            request.instances or "unseen", protocol, request.seed, trained, request.trials
        )
    except InstanceError as err:
        raise RequestError(str(err)) from err


def evaluate(
    request: EvalRequest,
    progress: ProgressFn | None = None,
    cancel: Cancel | None = None,
    keys: KeySource | None = None,
    prompt: Callable[[str], str] = input,
    on_trial: Callable[[Any], None] | None = None,
) -> EvalResult:
    """Run the request's trials not yet logged in ``request.out``. On the real cell the
    operator is asked (``prompt``) to set each trial up and judges it by ``keys``.
    ``on_trial`` gets each trial's ``TrialRecord`` as it is logged (a success table)."""
    from r2s2r.eval.parallel import TwinTrials
    from r2s2r.eval.policies import open_policy
    from r2s2r.eval.protocol import load_protocol
    from r2s2r.eval.runner import EvalSetup, TwinRigs
    from r2s2r.eval.runner import evaluate as run_trials

    check_request(request)
    kind = rig_kind(request.rig)
    if kind.operator and keys is None:
        raise RequestError(
            f"--rig {request.rig} needs a key source: the operator judges each trial"
        )
    protocol = load_protocol(request.protocol)
    trials = request.trials
    if request.instances is not None:
        protocol = _instances_protocol(request, protocol)
        trials = None if request.instances == "train" else trials
    # Where the operator judges, every trial's video is kept: the verdict can be checked.
    video = "all" if kind.operator else request.video
    setup = EvalSetup(
        out=request.out,
        protocol=protocol,
        protocol_seed=request.seed,
        trials=trials,
        rig=request.rig,
        runtime=request.runtime,
        video=video,
        cell=request.cell if kind.truth else None,
        workers=request.workers,
        ray=request.ray,
        instances=request.instances,
    )
    # Workers open the policy where they run (a Ray worker's folder is not this one's).
    named = request.policy
    if named is not None and named not in ("scripted", "planned"):
        named = str(Path(named).resolve())
    spawn = TwinTrials(
        named,
        request.server,
        request.token,
        request.device,
        request.image_size,
        request.cell,
        request.noise_seed,
    )
    source = open_policy(
        request.policy, request.server, request.token, request.device, noise_seed=request.noise_seed
    )
    rigs: Any = None
    try:
        judge: Any = None
        if kind.operator:
            assert keys is not None
            rigs, judge = _operated(request, keys, prompt)
        else:
            rigs = TwinRigs(request.image_size, cell=request.cell)

        def hook(done: int, total: int, successes: int, last: Any) -> None:
            text = f"sorted {successes}/{done}" + (f", last {last.outcome}" if last else "")
            report(progress, "eval", done, total, text)
            if on_trial is not None and last is not None:
                on_trial(last)

        stop = (lambda: cancel.cancelled) if cancel is not None else None
        return run_trials(setup, source, rigs, judge, hook, stop, spawn)
    finally:
        source.close()
        if rigs is not None and hasattr(rigs, "close"):
            rigs.close()


def _operated(request: EvalRequest, keys: KeySource, prompt: Callable[[str], str]) -> Any:
    """The real cell's rig session, whose operator sets each trial up, and their judge."""
    from r2s2r.eval.hardware import HardwareRigs, KeyJudge
    from r2s2r.rig.hardware import HardwareRig

    kind = rig_kind(request.rig)
    with refused():
        rig = open_rig(request.rig, RigOptions(config=request.config, prompt=prompt))
    assert isinstance(rig, HardwareRig)  # The operator's session drives the real cell.
    task, world = kind.setting(rig)
    return HardwareRigs(rig, task, world, prompt), KeyJudge(keys)


def write_report(dirs: list[Path], out: Path) -> Path:
    """``r2s2r report DIRS --out OUT``: the evaluation report of ``dirs``; its HTML file."""
    from r2s2r.eval.report import write_report as write

    return Path(write(dirs, out).html)
