"""``r2s2r record``: teleoperated episodes from a rig into a dataset."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Annotated

import typer

from r2s2r.cli.choices import CellOpt, RigKind


def record(
    out: Annotated[Path, typer.Option("--out", help="dataset folder (created or continued)")],
    rig: Annotated[RigKind, typer.Option("--rig", help="the twin or the real cell")] = RigKind.twin,
    episodes: Annotated[int, typer.Option("--episodes", min=1, help="episodes to save")] = 10,
    seed: Annotated[int, typer.Option("--seed", help="twin and operator seed")] = 0,
    operator_seed: Annotated[
        int | None,
        typer.Option(
            "--operator-seed",
            help="the scripted operator's seed, where it differs from --seed (other takes "
            "of the same instances)",
        ),
    ] = None,
    cell: CellOpt = None,
    realtime: Annotated[
        bool, typer.Option("--realtime", help="pace the twin to the wall clock")
    ] = False,
    scripted: Annotated[
        bool,
        typer.Option(
            "--scripted/--keyboard",
            help="takes run by themselves (scripted operator), or are started, saved and "
            "discarded from the keyboard",
        ),
    ] = True,
    config: Annotated[
        Path | None, typer.Option("--config", help="hardware rig YAML (with --rig hardware)")
    ] = None,
    calibration: Annotated[
        Path | None,
        typer.Option("--calibration", help="tracker calibration YAML (with --rig hardware)"),
    ] = None,
    image_size: Annotated[
        int, typer.Option("--image-size", help="twin camera views, px (0: record no views)")
    ] = 256,
    lossless: Annotated[bool, typer.Option("--lossless", help="store exact RGB video")] = False,
    max_seconds: Annotated[
        float | None, typer.Option("--max-seconds", help="take length limit (default: task's)")
    ] = None,
) -> None:
    """Record teleoperated episodes at 50 Hz: three camera views, proprio, commanded actions,
    timestamps, instruction and success label.

    Keys (with --keyboard): s start, e end+save, f end+save as failed, d discard, r redo,
    q quit. With --scripted the twin's scripted operator drives and takes end on the twin's
    verdict or at the time limit; d / r / q still work.
    """
    from r2s2r.app.jobs import RequestError
    from r2s2r.app.record import RecordRequest, check_request
    from r2s2r.app.record import record as run_record
    from r2s2r.cli.progress import progress_bar
    from r2s2r.data.record import KEYS_HELP, StdinKeys

    logging.basicConfig(level=logging.INFO if not scripted else logging.WARNING)
    request = RecordRequest(
        out=out,
        rig=rig.value,
        episodes=episodes,
        seed=seed,
        operator_seed=operator_seed,
        cell=cell,
        realtime=realtime,
        scripted=scripted,
        config=config,
        calibration=calibration,
        image_size=image_size,
        lossless=lossless,
        max_seconds=max_seconds,
    )
    keys = None
    try:
        check_request(request)
        keys = StdinKeys() if not scripted else None
        if keys is not None:
            typer.echo(f"keys: {KEYS_HELP}", err=True)
        with progress_bar(episodes, "record", "ep") as progress:
            result = run_record(request, keys, progress)
    except RequestError as err:
        typer.echo(f"error: {err}", err=True)
        raise typer.Exit(2) from err
    finally:
        if keys is not None:
            keys.close()
    typer.echo(
        f"{out}: saved {len(result.saved)} episodes ({result.successful} successful), "
        f"discarded {result.discarded} takes"
    )
