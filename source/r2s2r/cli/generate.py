"""``r2s2r generate``: simulated episodes from adapted demonstrations or planned routes,
success-filtered."""

from __future__ import annotations

import json
import logging
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from r2s2r.cli.choices import RayOpt
from r2s2r.spec.worlds import WORLDS


class SelectKind(StrEnum):
    nearest = "nearest"
    random = "random"


def generate(
    out: Annotated[Path, typer.Option("--out", help="dataset folder (created or continued)")],
    source: Annotated[
        Path | None,
        typer.Option(
            "--source",
            help="real demonstrations (a dataset); needed to adapt, and with --behavior "
            "planned it limits the objects to the ones the demos handle",
        ),
    ] = None,
    episodes: Annotated[int, typer.Option("--episodes", min=1, help="episodes to keep")] = 10,
    world: Annotated[
        str,
        typer.Option("--world", help=f"{', '.join(WORLDS.names())}, or a WorldSpec YAML path"),
    ] = "nominal",
    behavior: Annotated[
        str,
        typer.Option(
            "--behavior", help="how commands are made: a registered behavior (adapted, planned)"
        ),
    ] = "adapted",
    planner: Annotated[
        str,
        typer.Option(
            "--planner", help="carry planner of --behavior planned: cpu (OMPL) or curobo (GPU)"
        ),
    ] = "cpu",
    seed: Annotated[int, typer.Option("--seed", help="draws instances, noise and demos")] = 0,
    select: Annotated[
        SelectKind, typer.Option("--select", help="which source demo an instance adapts")
    ] = SelectKind.nearest,
    max_attempts: Annotated[
        int | None, typer.Option("--max-attempts", help="give up after this many (20 per episode)")
    ] = None,
    image_size: Annotated[
        int, typer.Option("--image-size", help="rendered views of kept episodes, px (0: none)")
    ] = 256,
    overrides: Annotated[
        Path | None, typer.Option("--segments", help="YAML of subtask starts per source episode")
    ] = None,
    workers: Annotated[
        int, typer.Option("--workers", min=1, help="processes simulating attempts")
    ] = 1,
    ray: RayOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="print the summary as JSON")] = False,
) -> None:
    """Make commands for new task instances (adapted real demonstrations, or synthesized
    grasps and planned routes), execute them in simulation without cameras, keep the
    successes (rendered from their recorded states) as a dataset, and log every attempt with
    its failure reason (DIR/generation/attempts.jsonl). Rerun to resume."""
    from r2s2r.app.generate import generate as run_generate
    from r2s2r.behavior.generate import GenerateCfg
    from r2s2r.cli.progress import progress_bar

    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    options = {
        "source": source,
        "out": out,
        "episodes": episodes,
        "world": world,
        "behavior": behavior,
        "planner": planner,
        "seed": seed,
        "select": select.value,
        "max_attempts": max_attempts,
        "image_size": image_size,
        "overrides": overrides,
        "workers": workers,
        "ray": ray,
    }
    cfg = GenerateCfg.from_dict(options, source="r2s2r generate")
    with progress_bar(episodes, "generate", "ep", disable=as_json) as progress:
        summary = run_generate(cfg, progress).summary
    if as_json:
        typer.echo(json.dumps(summary, indent=2))
        return
    fails = ", ".join(f"{k} {v}" for k, v in summary["failures"].items() if v)
    typer.echo(
        f"{out}: kept {summary['kept']} of {summary['attempts']} attempts "
        f"({summary['success_rate']:.0%}) in {summary['seconds']:.0f} s"
        + (f"; failures: {fails}" if fails else "")
    )
