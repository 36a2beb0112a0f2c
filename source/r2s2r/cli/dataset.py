"""``r2s2r dataset``: inspect, check, look at and export recorded datasets; benchmark the
writer."""

from __future__ import annotations

import json
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

app = typer.Typer(no_args_is_help=True, help="Recorded datasets (LeRobot v3 layout).")

DirArg = Annotated[Path, typer.Argument(help="dataset folder")]


class NextObsKind(StrEnum):
    """How the robomimic export stores ``next_obs`` (``r2s2r.data.robomimic``)."""

    copy = "copy"
    link = "link"


@app.command()
def info(
    root: DirArg,
    as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
) -> None:
    """Summarize a dataset: episodes, frames, fps, cameras, tasks, success rate."""
    from r2s2r.data import Dataset

    with Dataset(root) as ds:
        successes = sum(bool(e["success"]) for e in ds.episodes)
        sizes = {"data": 0, "video": 0}
        for path in ds.files():
            kind = "video" if path.suffix == ".mp4" else "data"
            sizes[kind] += path.stat().st_size if path.is_file() else 0
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
            "files": len(ds.files()),
            "data_mb": round(sizes["data"] / 2**20, 3),
            "video_mb": round(sizes["video"] / 2**20, 3),
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
def repair(root: DirArg) -> None:
    """Make every episode's quaternions continuous (one hemisphere per episode), as the writer
    now records them; stats follow. Safe to rerun; a dataset already continuous is unchanged."""
    from r2s2r.data import DatasetWriter

    with DatasetWriter(root) as writer:
        changed = writer.make_continuous()
    shown = ", ".join(map(str, changed[:20])) + (" ..." if len(changed) > 20 else "")
    typer.echo(
        f"{root}: {len(changed)} episode(s) made continuous" + (f" ({shown})" if changed else "")
    )


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
    next_obs: Annotated[
        NextObsKind,
        typer.Option(
            help="next_obs as plain copies (copy) or as HDF5 virtual datasets over obs (link: "
            "images stored once; demo groups copied into another file under new names lose it)"
        ),
    ] = NextObsKind.copy,
) -> None:
    """Export to robomimic HDF5 (for robomimic, MimicGen and Isaac Lab Mimic), with the
    next_obs that robomimic's SequenceDataset reads by default."""
    from r2s2r.data import Dataset, export_robomimic
    from r2s2r.data.robomimic import NextObs

    with Dataset(root) as ds:
        mode: NextObs = "link" if next_obs is NextObsKind.link else "copy"
        path = export_robomimic(ds, out, valid_every=valid_every, next_obs=mode)
    typer.echo(f"wrote {path}")


@app.command()
def render(
    root: DirArg,
    out: Annotated[Path, typer.Option(help="dataset folder to write (created or continued)")],
    world: Annotated[
        str, typer.Option(help="world whose cameras render: a registered name or a YAML path")
    ] = "nominal",
    image_size: Annotated[int, typer.Option(min=2, help="views, px")] = 256,
    episodes: Annotated[
        str | None, typer.Option(help="source episodes, e.g. 0,3,5 (default: all)")
    ] = None,
    lossless: Annotated[bool, typer.Option(help="store exact RGB video")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="print the result as JSON")] = False,
) -> None:
    """Re-render a dataset's recorded states (joints, object pose) in a world's cameras with
    MuJoCo's renderer into a new dataset; tasks/render_isaac.py does the same with Isaac
    Sim's RTX renderer. Rerun to resume; --json also gives frames per second."""
    import time

    from r2s2r.app.render import RenderRequest, render_dataset
    from r2s2r.cli.progress import progress_bar

    request = RenderRequest(
        source=root,
        out=out,
        world=world,
        image_size=image_size,
        episodes=parse_episodes(episodes),
        lossless=lossless,
    )
    from r2s2r.data import Dataset

    with Dataset(root) as ds:
        chosen = request.episodes or range(ds.num_episodes)
        total = sum(int(ds.episode(e)["length"]) for e in chosen if 0 <= e < ds.num_episodes)
    start = time.perf_counter()
    with progress_bar(total, "render", "frame", disable=as_json) as progress:
        result = render_dataset(request, progress=progress)
    seconds = time.perf_counter() - start
    summary = {
        "out": str(result.out),
        "world": world,
        "image_size": image_size,
        "episodes": result.episodes,
        "resumed_episodes": result.resumed,
        "frames": result.frames,
        "rendered_frames": result.rendered,
        "seconds": seconds,
        # Frames rendered, remapped, encoded and written per second, this run.
        "frames_per_s": result.rendered / seconds if seconds else None,
    }
    if as_json:
        typer.echo(json.dumps(summary, indent=2))
        return
    typer.echo(f"{out}: {result.episodes} episodes, {result.frames} frames in {seconds:.1f} s")


def parse_episodes(text: str | None) -> tuple[int, ...] | None:
    """``"0,3,5"`` -> (0, 3, 5); None stays None."""
    if text is None:
        return None
    try:
        return tuple(int(t) for t in text.split(",") if t.strip())
    except ValueError:
        raise typer.BadParameter(f"expected episode indices like 0,3,5, got {text!r}") from None


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
