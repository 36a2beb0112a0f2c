"""``r2s2r dataset``: inspect, check, look at and export recorded datasets; benchmark the
writer."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

app = typer.Typer(no_args_is_help=True, help="Recorded datasets (LeRobot v3 layout).")

DirArg = Annotated[Path, typer.Argument(help="dataset folder")]


@app.command()
def info(
    root: DirArg,
    as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
) -> None:
    """Summarize a dataset: episodes, frames, fps, cameras, tasks, success rate."""
    from r2s2r.data import Dataset

    with Dataset(root) as ds:
        successes = sum(bool(e["success"]) for e in ds.episodes)
        summary = {
            "path": str(ds.root),
            "codebase_version": ds.info["codebase_version"],
            "robot_type": ds.info["robot_type"],
            "episodes": ds.num_episodes,
            "frames": len(ds),
            "fps": ds.fps,
            "seconds": len(ds) / ds.fps,
            "cameras": {c.name: [c.height, c.width] for c in ds.cameras},
            "tasks": ds.tasks,
            "success_rate": successes / ds.num_episodes if ds.num_episodes else None,
            "data_mb": ds.info["data_files_size_in_mb"],
            "video_mb": ds.info["video_files_size_in_mb"],
        }
    if as_json:
        typer.echo(json.dumps(summary, indent=2))
        return
    for key, value in summary.items():
        typer.echo(f"{key:18s} {value}")


@app.command()
def verify(
    root: DirArg,
    decode: Annotated[bool, typer.Option(help="also decode every video frame")] = False,
) -> None:
    """Check every file, frame count and timestamp; exit 1 on any fault."""
    from r2s2r.data import verify as run_verify

    report = run_verify(root, decode=decode)
    for note in report.notes:
        typer.echo(f"note: {note}")
    for fault in report.faults:
        typer.echo(f"fault: {fault}", err=True)
    if not report.ok:
        typer.echo(f"{root}: {len(report.faults)} fault(s)", err=True)
        raise typer.Exit(1)
    typer.echo(f"{root}: ok ({report.episodes} episodes, {report.frames} frames)")


@app.command()
def view(
    root: DirArg,
    episode: Annotated[int, typer.Option(help="episode index")] = 0,
    out: Annotated[Path, typer.Option(help="contact sheet PNG to write")] = Path(
        "outputs/contact_sheet.png"
    ),
    columns: Annotated[int, typer.Option(help="frames per camera row")] = 8,
    rerun: Annotated[
        bool, typer.Option(help="also open the episode in a rerun viewer (if installed)")
    ] = False,
    rerun_save: Annotated[
        Path | None,
        typer.Option(help="also write the episode as a rerun recording (.rrd), for headless use"),
    ] = None,
) -> None:
    """Write a contact sheet of an episode's camera views (and show it in rerun)."""
    from r2s2r.data import Dataset
    from r2s2r.data.view import log_to_rerun, write_contact_sheet

    with Dataset(root) as ds:
        if not 0 <= episode < ds.num_episodes:
            raise ValueError(f"episode {episode} out of range (dataset has {ds.num_episodes})")
        path = write_contact_sheet(ds, episode, out, columns)
        typer.echo(f"wrote {path}")
        if rerun_save is not None:
            log_to_rerun(ds, episode, save=rerun_save)
            typer.echo(f"wrote {rerun_save} (open it with: rerun {rerun_save})")
        if rerun:
            log_to_rerun(ds, episode)


@app.command()
def export(
    root: DirArg,
    out: Annotated[Path, typer.Option(help="robomimic HDF5 file to write")],
    valid_every: Annotated[int, typer.Option(help="every n-th demo goes to mask/valid")] = 10,
) -> None:
    """Export to robomimic HDF5 (for robomimic, MimicGen and Isaac Lab Mimic)."""
    from r2s2r.data import Dataset, export_robomimic

    with Dataset(root) as ds:
        path = export_robomimic(ds, out, valid_every=valid_every)
    typer.echo(f"wrote {path}")


@app.command()
def bench(
    as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
    frames: Annotated[int, typer.Option(help="frames per episode written")] = 250,
    size: Annotated[int, typer.Option(help="camera image side in pixels")] = 256,
    repeats: Annotated[int, typer.Option(help="runs of each, the best kept")] = 3,
) -> None:
    """Measure the dataset writer's throughput against plain PyAV encoding the same frames."""
    from r2s2r.data.bench import run_bench

    result = run_bench(frames=frames, size=size, repeats=repeats)
    if as_json:
        typer.echo(json.dumps(result, indent=2))
        return
    for key, value in result.items():
        shown = f"{value:,.2f}" if isinstance(value, float) else value
        typer.echo(f"{key:26s} {shown}")
