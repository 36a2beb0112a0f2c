"""Training throughput of recipes, measured in the same run: each recipe trains for a few
hundred steps as its own ``r2s2r train`` process(es) on the same dataset, the recipes take
turns for ``rounds`` rounds (so a machine that slows down mid-run slows them alike), and each
one's samples/s is the median over its rounds of the rate past the first tenth of its steps.
"""

from __future__ import annotations

import statistics
import tempfile
from pathlib import Path
from typing import Any

from r2s2r.app.jobs import ProgressFn, RequestError, report
from r2s2r.spec import Spec
from r2s2r.spec.base import PosInt


class Recipe(Spec):
    """One way to train: a policy preset, its batch, loader workers and processes."""

    label: str
    preset: str
    batch_size: PosInt = 16
    workers: int = 1
    # Data-parallel processes, each with batch_size / processes samples per step.
    processes: PosInt = 1


# The closed-loop check's recipe as it trained before the CPU recipe existed (one process,
# PyTorch's threads, one loader worker, batch 16): the baseline of the speed-up.
BASELINE = Recipe(label="closed-loop recipe", preset="tiny_closed_loop", batch_size=16)
CPU_RECIPE = Recipe(label="cpu recipe", preset="cpu", batch_size=32, workers=0, processes=2)


def steady_rate(rows: list[dict[str, Any]], batch: int, skip: float = 0.1) -> float:
    """Samples/s of a run's log past its first ``skip`` of steps (model building, the first
    batches and the loader's start-up are not throughput)."""
    if len(rows) < 2:
        raise RequestError("the run logged fewer than two steps: no rate to measure")
    start = rows[min(len(rows) - 2, int(len(rows) * skip))]
    end = rows[-1]
    return (end["step"] - start["step"]) * batch / max(1e-9, end["elapsed_s"] - start["elapsed_s"])


def measure(
    data: Path,
    recipes: list[Recipe],
    steps: int = 300,
    rounds: int = 2,
    cache_dir: Path | None = None,
    progress: ProgressFn | None = None,
) -> dict[str, Any]:
    """Each recipe's samples/s on dataset ``data`` (see the module), and each one's ratio to
    the first."""
    from r2s2r.app.train_process import TrainLaunch, read_metrics, split_batch, train_to_end
    from r2s2r.sim.bench import machine, source_commit

    rates: dict[str, list[float]] = {r.label: [] for r in recipes}
    total, done = rounds * len(recipes), 0
    with tempfile.TemporaryDirectory(prefix="r2s2r-train-speed-") as tmp:
        for k in range(rounds):
            for recipe in recipes:
                report(progress, "train speed", done, total, recipe.label)
                out = Path(tmp) / f"{k}-{len(rates[recipe.label])}-{recipe.preset}"
                batch = split_batch(recipe.batch_size, recipe.processes, f"{recipe.label}: batch")
                launch = TrainLaunch(
                    out=out,
                    preset=recipe.preset,
                    real=data,
                    steps=steps,
                    batch_size=batch,
                    workers=recipe.workers,
                    warmup=10,
                    lr=1e-3,
                    log_every=10,
                    save_every=10 * steps,
                    device="cpu",
                    cache_dir=cache_dir,
                    processes=recipe.processes,
                )
                train_to_end(launch)
                rates[recipe.label].append(steady_rate(read_metrics(out), recipe.batch_size))
                done += 1
    report(progress, "train speed", total, total)
    first = statistics.median(rates[recipes[0].label])
    return {
        "data": str(data),
        "steps": steps,
        "rounds": rounds,
        "recipes": [
            {
                **r.model_dump(),
                "samples_per_s": statistics.median(rates[r.label]),
                "rounds_samples_per_s": rates[r.label],
                "over_first": statistics.median(rates[r.label]) / first,
            }
            for r in recipes
        ],
        "machine": machine(),
        "commit": source_commit(),
    }
