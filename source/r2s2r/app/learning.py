"""The learning benchmark: does a policy trained here do the task on instances it never saw?

``run(request)`` records ``demos`` scripted-operator demonstrations of random nominal
instances on the twin (each its own instance, all in the one hidden cell of ``seed``), plus
a few held out for the validation loss; trains the CPU recipe on them; evaluates the run on
``trials`` nominal instances none of the demonstrations used; and returns success with its
Wilson interval, the funnel, training samples/s and the wall time of every stage. Every
stage is resumable: rerunning the same request continues where it stopped.

Instances are named by twin seeds: a twin seeded ``s`` presents instance ``s`` first (its
object, lateral offset, yaw and belt speed), so a demonstration recorded alone at seed ``s``
and a trial of seed ``s`` meet the same instance. ``--seed`` moves the hidden cell, the
demonstration instances and the trial list together: any seed is a fresh test.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from r2s2r.app.jobs import Cancel, ProgressFn, RequestError, report
from r2s2r.eval.instances import draw_seeds
from r2s2r.sim.bench import machine, source_commit

if TYPE_CHECKING:
    from r2s2r.eval.runner import EvalResult
    from r2s2r.eval.trials import TrialRecord
from r2s2r.spec import Spec
from r2s2r.spec.base import NonNegInt, PosInt

RESULT_FILE = "learning.json"
# The streams of the benchmark seed that the demonstrations' and the trials' instances come
# from.
DEMO_STREAM, TRIAL_STREAM = 0xDE305, 0x7E57


class LearningRequest(Spec):
    """One learning benchmark: how many demonstrations and trials, which seed, which recipe."""

    out: Path
    demos: PosInt = 50
    # Demonstrations held out of training, for the validation loss (recorded like the rest).
    val_demos: NonNegInt = 4
    trials: PosInt = 50
    seed: NonNegInt = 0
    # The policy preset (a name or a YAML path) and its training recipe.
    preset: str = "cpu"
    steps: PosInt = 10_000
    batch_size: PosInt = 32
    lr: float = 2e-3
    final_lr: float = 1e-4
    warmup: NonNegInt = 200
    # The views' size, px: recorded and evaluated at it.
    image_size: PosInt = 64
    # How the runtime joins chunks in the trials, and the trial length limit.
    execution: str = "sync"
    exec_horizon: PosInt = 40
    delay_periods: NonNegInt = 0
    max_seconds: float = 20.0
    # Data-loading processes of each training process, and data-parallel training
    # processes (gloo on the CPU), each taking batch_size / processes samples per step.
    workers: NonNegInt = 1
    processes: PosInt = 1
    # Where decoded frames are cached (None: $R2S2R_CACHE_DIR, else ~/.cache/r2s2r/frames).
    cache_dir: Path | None = None
    # The learning curve from the one run: every ``curve_every`` steps (0: none) a checkpoint
    # is kept and, after training, evaluated on the first ``curve_trials`` unseen trials.
    curve_every: NonNegInt = 0
    curve_trials: PosInt = 12


def split_instances(seed: int, demos: int, trials: int) -> tuple[list[int], list[int]]:
    """(demonstration instances, trial instances) of benchmark seed ``seed``: disjoint, and
    neither holds ``seed`` itself (the instance a twin of the cell's seed presents first)."""
    demo_seeds = draw_seeds(seed, DEMO_STREAM, demos, exclude={seed})
    return demo_seeds, draw_seeds(seed, TRIAL_STREAM, trials, exclude={seed, *demo_seeds})


def _train(
    request: LearningRequest,
    data: Path,
    run_dir: Path,
    resume: bool,
    progress: ProgressFn | None,
    cancel: Cancel | None,
) -> None:
    """Train the request's recipe into ``run_dir`` in its own process(es), reporting its
    progress from the run's metrics; a ``RequestError`` where it fails or is cancelled."""
    from r2s2r.app.train_process import TrainLaunch, split_batch, train_to_end

    launch = TrainLaunch(
        out=run_dir,
        preset=request.preset,
        real=data,
        only_successful=True,
        val_episodes=request.val_demos,
        val_every=max(1, request.steps // 10),
        steps=request.steps,
        batch_size=split_batch(request.batch_size, request.processes),
        lr=request.lr,
        final_lr=request.final_lr,
        warmup=request.warmup,
        workers=request.workers,
        log_every=100,
        save_every=request.curve_every or max(1, request.steps // 10),
        keep=request.steps // request.curve_every + 1 if request.curve_every else 2,
        device="cpu",
        seed=request.seed,
        cache_dir=request.cache_dir,
        processes=request.processes,
        resume=resume,
    )
    train_to_end(launch, progress, cancel)


def _check_folder(request: LearningRequest) -> Path:
    """The benchmark folder, made; refused where it holds a benchmark of other settings."""
    out = Path(request.out)
    out.mkdir(parents=True, exist_ok=True)
    saved = out / "request.json"
    if saved.is_file():
        before = LearningRequest.from_dict(json.loads(saved.read_text()), source=str(saved))
        if before != request:
            raise RequestError(
                f"{out}: holds a learning benchmark of other settings ({saved}); rerun it with "
                "the same options to continue, or choose another --out"
            )
    else:
        saved.write_text(json.dumps(request.model_dump(mode="json"), indent=1))
    return out


def _record(
    request: LearningRequest,
    data: Path,
    demos: list[int],
    progress: ProgressFn | None,
    cancel: Cancel | None,
) -> None:
    """One take per instance (its seed names the instance), in the benchmark's cell,
    appended in order after those already recorded."""
    from r2s2r.app.record import RecordRequest
    from r2s2r.app.record import record as run_record
    from r2s2r.data import Dataset

    have = Dataset(data).num_episodes if (data / "meta" / "info.json").is_file() else 0
    for k in range(have, len(demos)):
        if cancel is not None and cancel.cancelled:
            raise RequestError("cancelled while recording")
        report(progress, "record", k, len(demos))
        take = RecordRequest(
            out=data,
            episodes=1,
            seed=demos[k],
            cell=request.seed,
            image_size=request.image_size,
            lossless=True,
        )
        run_record(take)
    report(progress, "record", len(demos), len(demos))


def _evaluate(
    request: LearningRequest,
    policy: Path,
    where: Path,
    protocol: Path,
    count: int | None,
    progress: ProgressFn | None,
    cancel: Cancel | None,
) -> EvalResult:
    """The first ``count`` (all: None) trials of ``protocol`` for ``policy`` (a run or one of
    its checkpoints) into ``where``."""
    from r2s2r.app.evaluate import EvalRequest
    from r2s2r.app.evaluate import evaluate as run_eval
    from r2s2r.runtime import RuntimeCfg

    runtime = RuntimeCfg(
        execution=request.execution,  # type: ignore[arg-type]  # RuntimeCfg checks it.
        exec_horizon=request.exec_horizon,
        delay_periods=request.delay_periods,
        max_s=request.max_seconds,
    )
    evaluation = EvalRequest(
        out=where,
        policy=str(policy),
        cell=request.seed,
        noise_seed=request.seed,
        protocol=str(protocol),
        trials=count,
        instances="unseen",
        runtime=runtime,
        video="none",
        image_size=request.image_size,
        device="cpu",
    )
    return run_eval(evaluation, progress=progress, cancel=cancel)


def _curve(
    request: LearningRequest,
    out: Path,
    protocol: Path,
    metrics: list[dict[str, Any]],
    progress: ProgressFn | None,
    cancel: Cancel | None,
) -> list[dict[str, Any]]:
    """Each kept checkpoint on the first ``curve_trials`` unseen trials, with the
    validation figures logged at its step."""
    from r2s2r.eval.funnel import funnel_counts
    from r2s2r.policy import checkpoint as ckpt

    by_step = {int(m["step"]): m for m in metrics}
    curve = []
    for folder in sorted((out / "run" / ckpt.CHECKPOINTS).glob("step_*")):
        step = int(folder.name.split("_")[1])
        where = out / "curve" / folder.name
        count = min(request.curve_trials, request.trials)
        point = _evaluate(request, folder, where, protocol, count, progress, cancel)
        row = by_step.get(step, {})
        curve.append(
            {
                "step": step,
                "trials": len(point.records),
                "sorted": point.successes,
                "funnel": funnel_counts(r.stage for r in point.records),
                "val_pos_mm": row.get("val_pos_mm"),
                "val_loss": row.get("val_loss"),
            }
        )
    plot_curve(curve, out / "curve.png")
    return curve


def _summary(
    request: LearningRequest,
    records: Sequence[TrialRecord],
    metrics: list[dict[str, Any]],
    successful: int,
) -> dict[str, Any]:
    """The benchmark's figures from the unseen trials' records and the run's log."""
    from r2s2r.eval.funnel import funnel_counts
    from r2s2r.eval.stats import wilson_interval

    wins = sum(r.success for r in records)
    low, high = wilson_interval(wins, len(records)) if records else (0.0, 1.0)
    rates = [m["samples_per_s"] for m in metrics if m.get("samples_per_s")]
    vals = [m for m in metrics if m.get("val_loss") is not None]
    return {
        "question": "success on nominal instances no demonstration used",
        "seed": request.seed,
        "demos": request.demos,
        "demos_successful": successful,
        "val_demos": request.val_demos,
        "preset": request.preset,
        "steps": request.steps,
        "batch_size": request.batch_size,
        "trials": len(records),
        "sorted": wins,
        "success_rate": wins / len(records) if records else None,
        "wilson_95": [low, high],
        "funnel": funnel_counts(r.stage for r in records),
        "outcomes": {o: sum(r.outcome == o for r in records) for o in {r.outcome for r in records}},
        "rejected_chunks": sum(r.rejected_chunks or 0 for r in records),
        "did_not_act": sum(r.did_not_act for r in records),
        "train_samples_per_s": float(np.median(rates)) if rates else None,
        "final_loss": metrics[-1]["loss"] if metrics else None,
        "val_loss": vals[-1]["val_loss"] if vals else None,
        "val_pos_mm": vals[-1]["val_pos_mm"] if vals else None,
    }


def run(
    request: LearningRequest, progress: ProgressFn | None = None, cancel: Cancel | None = None
) -> dict[str, Any]:
    """Record, train, evaluate (each skipped where already done); the summary, also written
    to ``OUT/learning.json``."""
    from r2s2r.data import Dataset
    from r2s2r.policy import checkpoint as ckpt
    from r2s2r.policy.train import read_metrics

    out = _check_folder(request)
    # The hidden cell is the seed's; demonstrations and trials meet distinct instances.
    demos, trials = split_instances(request.seed, request.demos + request.val_demos, request.trials)
    data, run_dir, wall = out / "demos", out / "run", {}
    clock = time.perf_counter()

    def lap(name: str) -> None:
        nonlocal clock
        wall[name] = time.perf_counter() - clock
        clock = time.perf_counter()

    _record(request, data, demos, progress, cancel)
    lap("record_s")
    episodes = Dataset(data).episodes[: request.demos]
    successful = sum(bool(e.get("success")) for e in episodes)
    # Train on the first ``demos`` episodes, the rest held out for validation.
    last = ckpt.latest_checkpoint(run_dir)
    if last is None or ckpt.load_checkpoint(last, optimizer=False).step < request.steps:
        _train(request, data, run_dir, resume=last is not None, progress=progress, cancel=cancel)
    lap("train_s")
    metrics = read_metrics(run_dir)
    protocol = out / "unseen.yaml"
    protocol.write_text(
        f"name: unseen\ntrials: {{nominal: {len(trials)}}}\nseeds: {json.dumps(trials)}\n"
        "description: nominal instances no demonstration of the run used\n"
    )
    evaluated = _evaluate(request, run_dir, out / "eval", protocol, None, progress, cancel)
    lap("eval_s")
    curve = []
    if request.curve_every:
        curve = _curve(request, out, protocol, metrics, progress, cancel)
        lap("curve_s")
    summary = {
        **_summary(request, evaluated.records, metrics, successful),
        "curve": curve,
        "wall_s": wall,
        "machine": machine(),
        "commit": source_commit(),
        "finished": evaluated.finished,
        "out": str(out),
    }
    (out / RESULT_FILE).write_text(json.dumps(summary, indent=1))
    return summary


def plot_curve(curve: list[dict[str, Any]], path: Path) -> None:
    """Success and the funnel's first stages over training steps, and the validation chunk
    error, from the one run's checkpoints."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7, 5))
    ax, err = fig.subplots(2, 1, sharex=True)
    steps = [c["step"] for c in curve]
    for stage in ("reached", "grasped", "sorted"):
        shares = [
            (c["funnel"] or {}).get(stage, 0) / max(1, c["trials"]) if c["funnel"] else 0.0
            for c in curve
        ]
        ax.plot(steps, shares, marker="o", label=stage)
    ax.set_ylabel("share of unseen trials")
    ax.set_ylim(0, 1)
    ax.legend()
    ax.grid(alpha=0.3)
    mm = [(c["step"], c["val_pos_mm"]) for c in curve if c["val_pos_mm"] is not None]
    if mm:
        err.plot([m[0] for m in mm], [m[1] for m in mm], marker="o", color="tab:red")
    err.set_ylabel("validation chunk TCP error (mm)")
    err.set_xlabel("training step")
    err.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
