"""``r2s2r bench``: every stage's benches in one run (``all``) and their page (``page``), and
the benchmarks that span stages (``learning``: record, train, evaluate)."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated

import typer
from tqdm import tqdm

from r2s2r.app.jobs import Progress, ProgressFn
from r2s2r.cli.train import require_policy_extra

app = typer.Typer(
    no_args_is_help=True,
    help="Benchmarks: every stage's in one run and their page; those that span stages.",
)

PAGE = Path("docs/reference/benchmark-results.md")


@contextmanager
def stage_bars() -> Iterator[ProgressFn]:
    """A progress callback that shows one tqdm bar per stage, a new one when the stage
    changes."""
    bars: dict[str, tqdm] = {}

    def show(p: Progress) -> None:
        bar = bars.get(p.stage)
        if bar is None:
            for old in bars.values():
                old.close()
            bar = bars[p.stage] = tqdm(total=p.total, desc=p.stage)
        bar.update(p.done - bar.n)
        if p.message:
            bar.set_postfix_str(p.message)

    try:
        yield show
    finally:
        for bar in bars.values():
            bar.close()


@app.command("learning")
def learning(
    out: Annotated[Path, typer.Option("--out", help="benchmark folder (created or continued)")],
    demos: Annotated[int, typer.Option("--demos", min=1, help="training demonstrations")] = 50,
    trials: Annotated[
        int, typer.Option("--trials", min=1, help="nominal trials on unseen instances")
    ] = 50,
    seed: Annotated[
        int,
        typer.Option(
            "--seed", min=0, help="the twin's hidden cell, the demo instances and the trials"
        ),
    ] = 0,
    preset: Annotated[str, typer.Option("--preset", help="policy preset or YAML")] = "cpu",
    steps: Annotated[int, typer.Option("--steps", min=1, help="training steps")] = 10_000,
    batch_size: Annotated[int, typer.Option("--batch-size", min=1)] = 32,
    val_demos: Annotated[
        int, typer.Option("--val-demos", min=0, help="demonstrations held out for validation")
    ] = 4,
    curve_every: Annotated[
        int,
        typer.Option(
            "--curve-every",
            min=0,
            help="keep a checkpoint every N steps and evaluate each after training (0: none)",
        ),
    ] = 0,
    curve_trials: Annotated[
        int, typer.Option("--curve-trials", min=1, help="unseen trials per curve point")
    ] = 12,
    processes: Annotated[
        int,
        typer.Option("--processes", min=1, help="data-parallel training processes (gloo on a CPU)"),
    ] = 1,
    cache_dir: Annotated[
        Path | None, typer.Option("--cache-dir", help="decoded-frame cache (reused across runs)")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print the summary as JSON")] = False,
) -> None:
    """Record DEMOS scripted demonstrations of random nominal instances on the twin, train
    the CPU recipe on them and evaluate it on TRIALS instances none of them used: success
    with its Wilson interval, the funnel, training samples/s and each stage's wall time
    (OUT/learning.json). Rerun the same command to continue after a stop."""
    require_policy_extra()
    from r2s2r.app.jobs import RequestError
    from r2s2r.app.learning import LearningRequest, run

    logging.basicConfig(level=logging.WARNING)
    request = LearningRequest(
        out=out,
        demos=demos,
        trials=trials,
        seed=seed,
        preset=preset,
        steps=steps,
        batch_size=batch_size,
        val_demos=val_demos,
        processes=processes,
        curve_every=curve_every,
        curve_trials=curve_trials,
        cache_dir=cache_dir,
    )
    try:
        with stage_bars() as show:
            summary = run(request, show)
    except RequestError as err:
        typer.echo(f"error: {err}", err=True)
        raise typer.Exit(2) from err
    if as_json:
        typer.echo(json.dumps(summary, indent=2))
        return
    low, high = summary["wilson_95"]
    typer.echo(
        f"seed {seed}: {summary['sorted']}/{summary['trials']} unseen nominal instances sorted "
        f"(95% Wilson [{100 * low:.0f}%, {100 * high:.0f}%]) after {demos} demos"
    )
    funnel = summary["funnel"] or {}
    typer.echo("funnel: " + ", ".join(f"{k} {v}" for k, v in funnel.items()))
    rate = summary["train_samples_per_s"]
    typer.echo(f"training: {rate:.0f} samples/s" if rate else "training: -")
    for point in summary["curve"]:
        typer.echo(f"  step {point['step']:>6d}: {point['sorted']}/{point['trials']} sorted")
    typer.echo("wall: " + ", ".join(f"{k} {v:.0f}" for k, v in summary["wall_s"].items()))


@app.command("all")
def run_all(
    out: Annotated[
        Path, typer.Option("--out", help="folder of the records, one <bench>.json each")
    ] = Path("benchmarks"),
    quick: Annotated[
        bool, typer.Option("--quick", help="the smallest sizes; benches without them left out")
    ] = False,
    only: Annotated[
        list[str] | None, typer.Option("--only", help="run only this bench (repeatable)")
    ] = None,
    note: Annotated[
        str, typer.Option("--note", help="said of every record, e.g. 'beside a training job'")
    ] = "",
    timeout: Annotated[
        float, typer.Option("--timeout", min=1.0, help="seconds one bench may run")
    ] = 900.0,
    page: Annotated[
        Path | None,
        typer.Option("--page", help="then write the page from every record in OUT here"),
    ] = None,
) -> None:
    """Run the stages' benches one after another, each as its own `r2s2r ... --json`
    process, each record (command, figures with their same-run baselines, machine, load,
    commit, date) written to OUT/<bench>.json as it ends. A failed bench writes its error
    into its record and the run goes on; the exit code is 1 if any failed."""
    from r2s2r.app.bench_run import BenchRunRequest, run_benches
    from r2s2r.app.jobs import RequestError
    from r2s2r.cli.progress import progress_bar

    request = BenchRunRequest(
        out=out, quick=quick, only=tuple(only or ()), note=note, timeout_s=timeout, page=page
    )
    try:
        benches = request.benches()
    except RequestError as err:
        typer.echo(f"error: {err}", err=True)
        raise typer.Exit(2) from err
    with progress_bar(len(benches), "bench", "bench") as show:
        records = run_benches(request, show)
    failed = [name for name, r in records.items() if not r["ok"]]
    for name, r in records.items():
        last = (r["error"] or "").strip().splitlines()[-1:] or [""]
        outcome = "ok" if r["ok"] else f"FAILED: {last[0]}"
        typer.echo(f"{name:12s} {r['seconds']:6.0f} s  {outcome}")
    typer.echo(f"records in {out}" + (f", page {page}" if page else ""))
    if failed:
        typer.echo(f"failed: {', '.join(failed)}", err=True)
        raise typer.Exit(1)


@app.command("page")
def page_cmd(
    records: Annotated[
        Path, typer.Option("--records", help="folder of the records (r2s2r bench all --out)")
    ] = Path("benchmarks"),
    out: Annotated[Path, typer.Option("--out", help="the Markdown page to write")] = PAGE,
) -> None:
    """Write the benchmark page from the records: one table per bench with each headline
    figure, its same-run baseline and their ratio, and the machine, commit and date."""
    from r2s2r.app.bench_page import write_page

    if not records.is_dir():
        typer.echo(f"error: no records folder {records}", err=True)
        raise typer.Exit(2)
    write_page(records, out)
    typer.echo(f"wrote {out}")
