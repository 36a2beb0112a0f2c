"""The study from one request: record → ground → generate → train → evaluate → report,
each stage one of the services beside this one, with files between them.

``run_study(request)`` walks ``r2s2r.study.plan``'s stages in order. A stage whose outputs
were made from the same inputs and settings (its fingerprint, in ``DIR/study.json``) is
skipped; one that stopped part-way (a crash, SIGKILL, Ctrl-C) continues through its own
resume (recording at the next demo, generation at the next attempt, training from its newest
checkpoint, evaluation at the next trial); one whose settings or inputs changed is made
afresh, its old outputs removed. Every demo, dataset and trial is a function of the study's
seeds, so a study stopped anywhere and restarted ends with what an uninterrupted one does.

Each kind of stage runs through its runner, a function here (``_record_stage`` ...
``_report_stage``) registered in ``STAGES`` (``r2s2r.study.stages``) at the end of this
module: the one table from a kind to the code that runs it. A kind ``plan`` makes that the
table leaves out fails this module's import.

Layout of ``DIR``: ``real/`` (the demos), ``ground/`` (``grounded.yaml`` and its report),
``sim/<world>-<behavior>/``, ``runs/<policy>/``, ``eval/<policy>/`` (with ``latent/``),
``report/`` (``report.html``, ``report.json``) and ``study.json``.
"""

from __future__ import annotations

import json
import logging
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from r2s2r.app.jobs import Cancel, ProgressFn, RequestError, report
from r2s2r.app.rigs import rig_kind
from r2s2r.data.record import KeySource
from r2s2r.rig.kinds import RigKind, RigName
from r2s2r.spec import Spec
from r2s2r.spec.registry import Registry
from r2s2r.study.config import StudyCfg, load_study
from r2s2r.study.plan import Decision, Ledger, Stage, decide, fingerprints, plan, select
from r2s2r.study.stages import StageRunner, stage_registry

if TYPE_CHECKING:
    from r2s2r.policy.train import TrainCfg

log = logging.getLogger("r2s2r.study")


class StudyRequest(Spec):
    """One study: its preset (or config), its rig and its directory."""

    out: Path
    preset: str = "smoke"
    rig: RigName = "twin"
    # The cell's hardware YAML and tracker calibration (``--rig hardware``).
    config: Path | None = None
    calibration: Path | None = None
    # Run only these stages (kinds or names: ``generate``, ``train:real-only``); None: all.
    stages: tuple[str, ...] | None = None
    # A Ray cluster for generation and evaluation trials (None: local worker processes).
    ray: str | None = None


@dataclass
class StageRun:
    """What happened to one stage in this call."""

    name: str
    decision: Decision
    seconds: float = 0.0
    summary: dict[str, Any] = field(default_factory=dict)


@dataclass
class StudyResult:
    out: Path
    cfg: StudyCfg
    stages: list[StageRun]
    # The report (None until the report stage has run).
    report_html: Path | None = None
    report_json: Path | None = None
    table: str = ""


# (index, total, stage, decision): called as each stage starts.
StageFn = Callable[[int, int, Stage, Decision], None]


@dataclass(frozen=True)
class StageContext:
    """What every stage's runner reads (``STAGES``): the study's config, the request, the
    study directory, the rig's kind, and the caller's progress, cancel, keys and prompt."""

    cfg: StudyCfg
    request: StudyRequest
    root: Path
    rig_kind: RigKind
    progress: ProgressFn | None
    cancel: Cancel | None
    keys: KeySource | None
    prompt: Callable[[str], str]


def check_request(request: StudyRequest, cfg: StudyCfg) -> None:
    """Refuse a request that cannot run, before anything is touched."""
    if rig_kind(request.rig).operator:
        # A person records the demos through the cell's gloves and trackers.
        if request.config is None:
            raise RequestError(
                f"--rig {request.rig} needs --config PATH (the cell's hardware YAML; see "
                "r2s2r/presets/rig/hardware.example.yaml)"
            )
        if request.calibration is None:
            raise RequestError(
                f"--rig {request.rig} needs --calibration PATH (the tracker calibration YAML: "
                "T_cell_tracker, T_wrist_tcp) to record the real demos"
            )
        for path in (request.config, request.calibration):
            if not Path(path).is_file():
                raise RequestError(f"{path}: not found")


def study_stages(request: StudyRequest) -> tuple[StudyCfg, list[Stage], dict[str, str]]:
    """The request's config, its stages (all of them, in order) and their fingerprints."""
    cfg = load_study(request.preset)
    check_request(request, cfg)
    stages = plan(cfg, request.rig)
    return cfg, stages, fingerprints(stages)


def run_study(
    request: StudyRequest,
    progress: ProgressFn | None = None,
    cancel: Cancel | None = None,
    on_stage: StageFn | None = None,
    keys: KeySource | None = None,
    prompt: Callable[[str], str] = input,
) -> StudyResult:
    """Run the request's stages (see the module docstring). ``progress`` gets each stage's
    own reports; ``on_stage`` is told as each stage starts and whether it runs."""
    cfg, stages, prints = study_stages(request)
    _load_torch_first()
    try:
        chosen = select(stages, list(request.stages) if request.stages else None)
    except ValueError as err:
        raise RequestError(str(err)) from None
    root = Path(request.out)
    root.mkdir(parents=True, exist_ok=True)
    ledger = Ledger(root)
    _check_unowned(chosen, ledger, root)
    ledger.save(
        preset=request.preset, name=cfg.name, rig=request.rig, config=cfg.model_dump(mode="json")
    )
    by_name = {s.name: s for s in stages}
    ctx = StageContext(cfg, request, root, rig_kind(request.rig), progress, cancel, keys, prompt)
    runs: list[StageRun] = []
    for i, stage in enumerate(chosen):
        _check_inputs(stage, by_name, ledger, prints, root)
        decision = decide(stage, prints[stage.name], ledger, root)
        if on_stage is not None:
            on_stage(i, len(chosen), stage, decision)
        if decision == "skip":
            runs.append(
                StageRun(stage.name, "skip", 0.0, ledger.entry(stage.name).get("summary", {}))
            )
            continue
        runner = STAGES.get(stage.kind)
        target = root / stage.out
        if decision == "fresh" and target.exists():
            log.info("%s: its settings or inputs changed; its outputs are made afresh", stage.name)
            shutil.rmtree(target)
        ledger.set(stage.name, fingerprint=prints[stage.name], state="running", out=stage.out)
        start = time.perf_counter()
        summary = runner(ctx, stage, decision)
        if cancel is not None:
            cancel.check(f"stage {stage.name}")
        seconds = time.perf_counter() - start
        before = (
            float(ledger.entry(stage.name).get("seconds", 0.0)) if decision == "continue" else 0.0
        )
        ledger.set(stage.name, state="done", seconds=before + seconds, summary=summary)
        runs.append(StageRun(stage.name, decision, seconds, summary))
    result = StudyResult(root, cfg, runs)
    html = root / "report" / "report.html"
    if html.is_file() and ledger.entry("report").get("state") == "done":
        from r2s2r.eval.report import format_table

        data = json.loads((root / "report" / "report.json").read_text())
        result.report_html, result.report_json = html, root / "report" / "report.json"
        result.table = format_table(data)
    return result


def _load_torch_first() -> None:
    """Load torch and torchvision before any stage renders: torchvision's compiled operators
    crash the process (SIGSEGV) when they are first loaded after MuJoCo has rendered through
    EGL in it, as a study's training does after its recording and generation."""
    try:
        import torch  # noqa: F401
        import torchvision  # noqa: F401
    except ImportError:
        pass  # Without the policy extra, the training stage fails with its install hint.


def _check_unowned(stages: list[Stage], ledger: Ledger, root: Path) -> None:
    """Refuse to touch a stage folder the study did not make (the user's own files)."""
    for stage in stages:
        if (root / stage.out).exists() and not ledger.entry(stage.name):
            raise RequestError(
                f"{root / stage.out} exists but {ledger.path} does not list stage "
                f"{stage.name!r}: the study does not overwrite folders it did not make; move it "
                "away or choose another --out"
            )


def _check_inputs(
    stage: Stage, by_name: dict[str, Stage], ledger: Ledger, prints: dict[str, str], root: Path
) -> None:
    """A stage runs only on finished inputs made with the settings the study has now."""
    for dep in stage.deps:
        entry = ledger.entry(dep)
        there = (root / by_name[dep].out).exists()
        if entry.get("state") != "done" or not there:
            raise RequestError(
                f"stage {stage.name!r} needs stage {dep!r}'s outputs ({root / by_name[dep].out}), "
                "which are missing or unfinished: run the study without --stages, or with "
                f"--stages {dep.split(':')[0]} first"
            )
        if entry.get("fingerprint") != prints[dep]:
            raise RequestError(
                f"stage {stage.name!r} needs stage {dep!r}, whose settings changed since it ran: "
                f"run --stages {dep.split(':')[0]} (or the whole study) first"
            )


def _count(n: int, what: str) -> str:
    return f"{n} {what}" + ("" if n == 1 else "s")


def demo_seed(study_seed: int, k: int) -> int:
    """The twin seed of the study's k-th real demo (its task instance and readings)."""
    return int(np.random.default_rng([study_seed, 17, k]).integers(2**31))


def _record_stage(ctx: StageContext, stage: Stage, decision: Decision) -> dict[str, Any]:
    """The real demos: one twin per demo at its own seed, or a person on the real cell; a
    continued stage records only the demos still missing."""
    from r2s2r.app.record import RecordRequest, record
    from r2s2r.data import Dataset

    out = ctx.root / stage.out
    want = ctx.cfg.real.episodes
    have = Dataset(out).num_episodes if (out / "meta" / "info.json").is_file() else 0
    common: dict[str, Any] = {
        "out": out,
        "rig": ctx.request.rig,
        "cell": ctx.cfg.cell if ctx.rig_kind.truth else None,
        "image_size": ctx.cfg.image_size,
        "lossless": ctx.cfg.real.lossless,
        "max_seconds": ctx.cfg.real.max_seconds,
        "config": ctx.request.config,
        "calibration": ctx.request.calibration,
    }
    if ctx.rig_kind.operator:
        # A person records the remaining demos in one session.
        if want > have:
            request = RecordRequest.from_dict(
                {**common, "episodes": want - have, "scripted": False}, "study record stage"
            )
            record(request, ctx.keys, ctx.progress, ctx.cancel)
    else:
        # One twin per demo, at its own seed: demo k is the same whenever it is recorded.
        for k in range(have, want):
            seed = demo_seed(ctx.cfg.seed, k)
            request = RecordRequest.from_dict(
                {**common, "episodes": 1, "seed": seed}, "study record stage"
            )
            record(request, None, ctx.progress, ctx.cancel)
            if ctx.cancel is not None:
                ctx.cancel.check("recording")
    ds = Dataset(out)
    if ds.num_episodes < want:
        raise RequestError(f"{out}: {ds.num_episodes} of {want} demos recorded")
    successes = sum(bool(ds.episode(e)["success"]) for e in range(ds.num_episodes))
    return {"episodes": ds.num_episodes, "successful": successes, "frames": len(ds)}


def _ground_stage(ctx: StageContext, stage: Stage, decision: Decision) -> dict[str, Any]:
    """Captures through the rig, then the grounded world; a continued stage grounds a
    finished capture again as it is."""
    from r2s2r.app.ground import GroundRequest, ground

    out = ctx.root / stage.out
    # A finished capture (capture.json is written last) is grounded again as it is; a
    # capture cut short is taken again, whole.
    reuse = decision == "continue" and (out / "capture.json").is_file()
    if out.exists() and not reuse:
        shutil.rmtree(out)
    request = GroundRequest(
        out=out,
        rig=ctx.request.rig,
        seed=ctx.cfg.seed,
        cell=ctx.cfg.cell if ctx.rig_kind.truth else None,
        config=ctx.request.config,
        reuse=reuse,
        sysid=ctx.cfg.grounding.sysid,
    )
    result = ground(request, ctx.progress, ctx.cancel)
    summary = result.summary()
    return {k: v for k, v in summary.items() if isinstance(v, int | float | str)}


def _generate_stage(ctx: StageContext, stage: Stage, decision: Decision) -> dict[str, Any]:
    """One simulated dataset (``<world>-<behavior>``); a continued stage goes on at the
    next attempt."""
    from r2s2r.app.generate import generate
    from r2s2r.behavior.generate import GenerateCfg

    p = stage.params
    world = str(ctx.root / "ground" / "grounded.yaml") if p["world"] == "grounded" else "nominal"
    gen = ctx.cfg.generation
    cfg = GenerateCfg(
        source=ctx.root / "real",
        out=ctx.root / stage.out,
        episodes=p["episodes"],
        world=world,
        behavior=p["behavior"],
        planner=p["planner"],
        seed=p["seed"],
        max_attempts=p["max_attempts"],
        image_size=p["image_size"],
        # How the attempts are spread, not what they give: outside the fingerprint.
        workers=gen.workers,
        ray=ctx.request.ray,
    )
    result = generate(cfg, ctx.progress, ctx.cancel)
    if result.kept == 0:
        failures = ", ".join(f"{k} {v}" for k, v in result.failures.items() if v)
        raise RequestError(
            f"{stage.name}: no attempt of {result.attempts} succeeded ({failures}); the "
            "policies need at least one episode of it: raise generation.max_attempts or "
            "record more demos"
        )
    return {
        "kept": result.kept,
        "attempts": result.attempts,
        "success_rate": result.success_rate,
        "failures": result.failures,
    }


def _train_stage(ctx: StageContext, stage: Stage, decision: Decision) -> dict[str, Any]:
    """One policy, in this process or as data-parallel processes; a continued stage goes on
    from its newest checkpoint."""
    from r2s2r.app.train import train
    from r2s2r.policy.checkpoint import latest_checkpoint
    from r2s2r.policy.train import TrainCfg

    p, out = stage.params, ctx.root / stage.out
    sims = tuple(ctx.root / "sim" / s for s in p["sims"])
    init = p["init"]
    if init is not None and p["init_from_study"]:
        init = ctx.root / "runs" / init
    cfg = TrainCfg.from_dict(
        {
            "preset": p["preset"],
            "real": ctx.root / "real" if p["real"] else None,
            "real_episodes": p["real_episodes"],
            "sims": sims,
            "alpha": p["alpha"],
            "steps": p["steps"],
            "batch_size": p["batch_size"],
            "lr": p["lr"],
            "final_lr": p["final_lr"],
            "warmup_steps": p["warmup_steps"],
            "workers": p["workers"],
            "seed": p["seed"],
            "save_every": p["save_every"],
            "log_every": p["log_every"],
            "augment": p["augment"],
            "device": p["device"],
            "init": init,
            "cache_dir": ctx.root / ".cache" / "frames",
        },
        f"study stage {stage.name}",
    )
    resume = latest_checkpoint(out) is not None if out.exists() else False
    if out.exists() and not resume:
        shutil.rmtree(out)  # Stopped before its first checkpoint: start it again.
    if p["processes"] > 1:
        return _train_processes(ctx, cfg, out, resume, p["processes"])
    result = train(cfg, out, resume, ctx.progress, ctx.cancel)
    if not result.finished:
        raise RequestError(f"{out}: training stopped at step {result.step} of {result.steps}")
    last = result.last
    return {"steps": result.step, "loss": None if last is None else last.loss}


def _train_processes(
    ctx: StageContext, cfg: TrainCfg, out: Path, resume: bool, processes: int
) -> dict[str, Any]:
    """The run as ``processes`` data-parallel ``r2s2r train`` processes (torchrun's
    launcher), in this process group: a stop of the study stops them, and the next call
    continues from the newest checkpoint as one process would."""
    from r2s2r.app.train_process import TrainingProcess, TrainLaunch, read_metrics
    from r2s2r.policy.checkpoint import latest_checkpoint

    launch = TrainLaunch(
        out=out,
        preset=cfg.preset,
        real=cfg.real,
        real_episodes=cfg.real_episodes,
        sims=cfg.sims,
        alpha=cfg.alpha,
        steps=cfg.steps,
        batch_size=cfg.batch_size,
        lr=cfg.lr,
        final_lr=cfg.final_lr,
        warmup=cfg.warmup_steps,
        workers=cfg.workers,
        log_every=cfg.log_every,
        save_every=cfg.save_every,
        device=cfg.device,
        seed=cfg.seed,
        augment=cfg.augment,
        init=cfg.init,
        cache_dir=cfg.cache_dir,
        processes=processes,
        resume=resume,
    )
    run = TrainingProcess(launch, own_session=False)
    while run.poll() is None:
        rows = read_metrics(out)
        if rows:
            report(ctx.progress, "train", int(rows[-1]["step"]), cfg.steps)
        if ctx.cancel is not None and ctx.cancel.cancelled:
            run.stop()
            ctx.cancel.check("training")
        time.sleep(1.0)
    if run.poll() != 0:
        raise RequestError(f"{out}: {run.failure()} (log: {run.log_path})")
    last = latest_checkpoint(out)
    step = 0 if last is None else int(last.name.removeprefix("step_"))
    if step < cfg.steps:
        raise RequestError(f"{out}: training stopped at step {step} of {cfg.steps}")
    rows = read_metrics(out)
    return {"steps": step, "loss": rows[-1].get("loss") if rows else None}


def _eval_stage(ctx: StageContext, stage: Stage, decision: Decision) -> dict[str, Any]:
    """One policy's trials under the protocol; a continued stage goes on at the next trial."""
    from r2s2r.app.evaluate import EvalRequest, evaluate
    from r2s2r.runtime import RuntimeCfg

    p = stage.params
    ev = ctx.cfg.evaluation
    policy = stage.item
    assert policy is not None
    request = EvalRequest(
        out=ctx.root / stage.out,
        policy=str(ctx.root / "runs" / policy),
        rig=ctx.request.rig,
        config=ctx.request.config,
        cell=p["cell"] if ctx.rig_kind.truth else None,
        protocol=p["protocol"],
        trials=p["trials"],
        seed=p["seed"],
        runtime=RuntimeCfg.from_dict(p["runtime"], source=f"{stage.name} runtime"),
        video=p["video"],
        image_size=p["image_size"],
        device=p["device"],
        # Trials at once on the twin (outside the fingerprint: the same outcomes); the
        # real cell runs one at a time.
        workers=ev.workers if ctx.rig_kind.parallel else 1,
        ray=ctx.request.ray if ctx.rig_kind.parallel else None,
    )
    result = evaluate(request, ctx.progress, ctx.cancel, ctx.keys, ctx.prompt)
    if not result.finished:
        raise RequestError(f"{request.out}: the evaluation stopped before its last trial")
    summary = result.summary()
    return {"successes": summary["successes"], "trials": summary["trials_done"]}


def _latent_stage(ctx: StageContext, stage: Stage, decision: Decision) -> dict[str, Any]:
    """The latent-space analysis of one policy's recorded rollouts (a note when it has none)."""
    from r2s2r.eval.latent import analyze

    policy = stage.item
    assert policy is not None
    evaluation = ctx.root / "eval" / policy
    if not (evaluation / "rollouts" / "meta" / "info.json").is_file():
        (ctx.root / stage.out).mkdir(parents=True, exist_ok=True)
        return {"note": "no recorded rollouts (evaluation.video): no analysis"}
    out = ctx.root / stage.out
    if out.exists():
        shutil.rmtree(out)

    def show(name: str, done: int, total: int) -> None:
        from r2s2r.app.jobs import report

        report(ctx.progress, f"latent {name}", done, total)

    # A co-trained policy is compared with its own training data; the real-only one, which
    # saw no simulated frame, with the real demos and every simulated dataset of the study.
    sims = [] if ctx.cfg.policies[policy].sims else _sim_dirs(ctx)
    result = analyze(
        ctx.root / "runs" / policy,
        [ctx.root / "real"] if sims else None,
        sims or None,
        evaluation,
        out,
        progress=show,
        seed=stage.params["seed"],
        device=stage.params["device"],
    )
    s = result.summary
    return {"rollouts": s["rollouts"], "mean_real_share": s["mean_real_share"]}


def _notes(ctx: StageContext) -> list[str]:
    """What the report states about how the policies were made."""
    notes = [
        f"Study {ctx.cfg.name!r} on the {ctx.request.rig}"
        + (f" (hidden cell {ctx.cfg.cell})" if ctx.rig_kind.truth else "")
        + f": {_count(ctx.cfg.real.episodes, 'real demo')}, "
        f"{_count(ctx.cfg.generation.episodes, 'kept episode')} per simulated dataset, "
        f"the {ctx.cfg.training.preset} policy trained {ctx.cfg.training.steps} steps."
    ]
    for name, entry in ctx.cfg.policies.items():
        data = []
        if entry.real:
            n = entry.real_episodes or ctx.cfg.real.episodes
            data.append(f"the first {n} real demos" if entry.real_episodes else f"{n} real demos")
        data += [f"sim {s}" for s in entry.sims]
        init = entry.init if entry.init is not None else ctx.cfg.training.init
        start = "from random initialization"
        if init is not None and str(init) in ctx.cfg.policies:
            base = ctx.cfg.policies[str(init)]
            start = (
                f"fine-tuned from {init} (pre-trained in this study on "
                + ", ".join(f"sim {s}" for s in base.sims)
                + ": both worlds and behaviors the study generates, not a broad mixture of "
                "randomized worlds)"
            )
        elif init is not None:
            start = f"fine-tuned from the checkpoint {init}"
        evaluated = "" if entry.evaluate else " (not evaluated)"
        notes.append(f"{name}: trained on {', '.join(data)}, {start}{evaluated}.")
    return notes


def _sim_dirs(ctx: StageContext) -> list[Path]:
    return [ctx.root / "sim" / d for d in ctx.cfg.generation.datasets]


def _report_stage(ctx: StageContext, stage: Stage, decision: Decision) -> dict[str, Any]:
    """The report over every evaluated policy, with how each one was made."""
    from r2s2r.eval.report import write_report

    dirs = [ctx.root / "eval" / p for p in ctx.cfg.evaluated]
    report = write_report(dirs, ctx.root / stage.out, seed=stage.params["seed"], notes=_notes(ctx))
    return {"html": str(report.html), "policies": len(dirs)}


# Each stage kind's runner, registered here and nowhere else (``r2s2r.study.stages``): the
# table must name every kind ``plan`` makes, or importing this module fails.
STAGES: Registry[StageRunner[StageContext]] = stage_registry(
    {
        "record": _record_stage,
        "ground": _ground_stage,
        "generate": _generate_stage,
        "train": _train_stage,
        "eval": _eval_stage,
        "latent": _latent_stage,
        "report": _report_stage,
    }
)
