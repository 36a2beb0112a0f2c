"""``r2s2r train bench``: the policy loader's samples/s against decode on demand and, where a
LeRobot venv exists (``.venv-lerobot``), LeRobot's own loader on the same dataset."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer


def bench(
    data: Annotated[Path, typer.Option("--data", help="dataset folder")],
    image_size: Annotated[int, typer.Option(help="training image side in pixels")] = 256,
    batch_size: Annotated[int, typer.Option(help="samples per batch")] = 32,
    workers: Annotated[int, typer.Option(help="loader worker processes")] = 2,
    batches: Annotated[int, typer.Option(help="batches timed per loader")] = 20,
    json_out: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
) -> None:
    """Measure the policy's data loader (warm and cold cache) against the alternatives."""
    from r2s2r.policy.loader_bench import bench_loader

    result = bench_loader(data, image_size, batch_size, workers, batches)
    if json_out:
        typer.echo(json.dumps(result, indent=2))
        return
    rows = [
        ("this loader, warm cache", result["samples_per_s"]),
        ("this loader, first pass (cache built)", result["cold_samples_per_s"]),
        ("decode on demand", result["plain_samples_per_s"]),
    ]
    if "lerobot_samples_per_s" in result:
        backend = result["lerobot_video_backend"]
        rows.append((f"LeRobot's loader ({backend})", result["lerobot_samples_per_s"]))
    typer.echo(
        f"{result['data']}: {result['frames']} frames, {result['cameras']} views at "
        f"{result['image_size']} px, {result['state_history']} past states, "
        f"{result['action_horizon']}-step chunks, batch {result['batch_size']}, "
        f"{result['workers']} workers"
    )
    for name, rate in rows:
        typer.echo(f"  {name:40s} {rate:9.1f} samples/s")
    typer.echo(f"  {'over decode on demand':40s} {result['over_plain']:9.1f}x")
    if "over_lerobot" in result:
        typer.echo(f"  {'over LeRobot':40s} {result['over_lerobot']:9.1f}x")
    else:
        typer.echo("  LeRobot's loader: not measured (no .venv-lerobot; make lerobot-venv)")


def speed(
    data: Annotated[Path, typer.Option("--data", help="dataset folder (64 px views)")],
    steps: Annotated[int, typer.Option(min=20, help="steps each recipe trains per round")] = 300,
    rounds: Annotated[int, typer.Option(min=1, help="rounds; the recipes take turns")] = 2,
    cache_dir: Annotated[
        Path | None, typer.Option("--cache-dir", help="decoded-frame cache (reused across runs)")
    ] = None,
    json_out: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
) -> None:
    """Training samples/s of the CPU recipe (preset cpu, two gloo processes) against the
    closed-loop check's recipe (preset tiny_closed_loop, one process), in the same run."""
    from r2s2r.app.train_speed import BASELINE, CPU_RECIPE, measure
    from r2s2r.cli.progress import progress_bar

    with progress_bar(rounds * 2, "train speed", "run") as show:
        result = measure(data, [BASELINE, CPU_RECIPE], steps, rounds, cache_dir, show)
    if json_out:
        typer.echo(json.dumps(result, indent=2))
        return
    for r in result["recipes"]:
        typer.echo(
            f"  {r['label']:24s} {r['samples_per_s']:8.1f} samples/s  {r['over_first']:5.2f}x  "
            f"(preset {r['preset']}, batch {r['batch_size']}, {r['processes']} process(es))"
        )
