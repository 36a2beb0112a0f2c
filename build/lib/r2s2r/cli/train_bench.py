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
