"""``r2s2r study``: the whole study from one command (``r2s2r.app.study``); ``r2s2r study
presets`` lists the presets, ``r2s2r study show P`` prints one to copy, ``r2s2r study
bench`` times the smoke study stage by stage."""

from __future__ import annotations

import json
import logging
import signal
import sys
from pathlib import Path
from types import FrameType
from typing import Annotated, Any

import typer
from tqdm import tqdm

from r2s2r.cli.choices import RayOpt, RigKind

app = typer.Typer(
    invoke_without_command=True,
    help="The study: record -> ground -> generate x4 -> train x5 -> evaluate -> report.",
)


@app.callback()
def study(
    ctx: typer.Context,
    out: Annotated[Path | None, typer.Option("--out", help="the study folder")] = None,
    preset: Annotated[
        str, typer.Option("--preset", help="smoke, paper, foundation, or a study YAML")
    ] = "smoke",
    rig: Annotated[RigKind, typer.Option("--rig", help="the twin or the real cell")] = RigKind.twin,
    stages: Annotated[
        str | None,
        typer.Option("--stages", help="comma-separated stages to run (e.g. generate,train)"),
    ] = None,
    ray: RayOpt = None,
    config: Annotated[
        Path | None, typer.Option("--config", help="hardware rig YAML (with --rig hardware)")
    ] = None,
    calibration: Annotated[
        Path | None,
        typer.Option("--calibration", help="tracker calibration YAML (with --rig hardware)"),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print study.json's summary")] = False,
) -> None:
    """Run the study into OUT: each stage is skipped when its outputs were made from the same
    inputs and settings, continued where it stopped after a crash or Ctrl-C, and made afresh
    when they changed. Ends with the report's path, the success table and each stage's time
    (also in OUT/study.json)."""
    if ctx.invoked_subcommand is not None:
        return
    if out is None:
        raise typer.BadParameter("--out is required (the study folder)", param_hint="--out")
    result = run(out, preset, rig.value, stages, ray, config, calibration, quiet=as_json)
    if as_json:
        typer.echo(json.dumps(summary(result), indent=2))
        return
    print_result(result)


def run(
    out: Path,
    preset: str,
    rig: str,
    stages: str | None,
    ray: str | None,
    config: Path | None,
    calibration: Path | None,
    quiet: bool = False,
) -> Any:
    """Run the study with one bar over its stages and one for the stage in progress."""
    from r2s2r.app.jobs import Cancel, Cancelled, Progress, RequestError
    from r2s2r.app.study import StudyRequest, run_study
    from r2s2r.rig.kinds import RIGS

    _log_to(out, quiet)
    names = tuple(s.strip() for s in stages.split(",") if s.strip()) if stages else None
    options = {
        "out": out,
        "preset": preset,
        "rig": rig,
        "config": config,
        "calibration": calibration,
        "stages": names,
        "ray": ray,
    }
    request = StudyRequest.from_dict(options, source="r2s2r study")
    keys = None
    if RIGS.get(request.rig).operator:
        # A person records the demos and judges the trials by key.
        from r2s2r.data.record import StdinKeys

        keys = StdinKeys()
    bars: dict[str, tqdm] = {}

    def on_stage(i: int, total: int, stage: Any, decision: str) -> None:
        if "study" not in bars:
            bars["study"] = tqdm(total=total, desc="study", unit="stage", position=0, disable=quiet)
        outer = bars["study"]
        outer.n = i
        outer.set_postfix_str(f"{stage.name} ({'skipped' if decision == 'skip' else decision})")
        inner = bars.pop("stage", None)
        if inner is not None:
            inner.close()

    shown = {"stage": ""}

    def progress(p: Progress) -> None:
        inner = bars.get("stage")
        if inner is None or shown["stage"] != p.stage:
            if inner is not None:
                inner.close()
            inner = tqdm(total=p.total, desc=p.stage, position=1, leave=False, disable=quiet)
            bars["stage"], shown["stage"] = inner, p.stage
        if p.total is not None and inner.total != p.total:
            inner.total = p.total
        inner.update(p.done - inner.n)
        if p.message:
            inner.set_postfix_str(p.message, refresh=False)

    cancel = Cancel()
    previous = signal.signal(signal.SIGINT, _stop_on_first(cancel))
    try:
        result = run_study(request, progress, cancel, on_stage, keys)
    except Cancelled as err:
        typer.echo(f"\n{err}: rerun the same command to continue", err=True)
        raise typer.Exit(130) from err
    except RequestError as err:
        typer.echo(f"error: {err}", err=True)
        raise typer.Exit(2) from err
    finally:
        signal.signal(signal.SIGINT, previous)
        for bar in bars.values():
            bar.n = bar.total or bar.n
            bar.close()
    return result


def _log_to(out: Path, quiet: bool) -> None:
    """Warnings (a trial's safety stops, rejected chunks) go to OUT/study.log, errors also to
    the terminal, so that the progress bars stay readable."""
    out.mkdir(parents=True, exist_ok=True)
    fmt = logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
    to_file = logging.FileHandler(out / "study.log")
    to_file.setLevel(logging.INFO)
    to_file.setFormatter(fmt)
    to_terminal = logging.StreamHandler()
    to_terminal.setLevel(logging.ERROR)
    to_terminal.setFormatter(fmt)
    root = logging.getLogger()
    root.setLevel(logging.INFO)
    root.addHandler(to_file)
    root.addHandler(to_terminal)


def _stop_on_first(cancel: Any) -> Any:
    """Ctrl-C once: stop at the next check (everything kept); twice: stop now."""

    def handler(signum: int, frame: FrameType | None) -> None:
        if cancel.cancelled:
            raise KeyboardInterrupt
        cancel.cancel()
        print(
            "\nstopping after the current unit of work (Ctrl-C again to stop now)", file=sys.stderr
        )

    return handler


def summary(result: Any) -> dict[str, Any]:
    """The call's figures: what each stage did and took, the report and its table."""
    from r2s2r.study.plan import LEDGER

    ledger = json.loads((result.out / LEDGER).read_text())
    return {
        "out": str(result.out),
        "preset": result.cfg.name,
        "report_html": None if result.report_html is None else str(result.report_html),
        "report_json": None if result.report_json is None else str(result.report_json),
        "stages": [
            {
                "stage": r.name,
                "decision": r.decision,
                "seconds": r.seconds,
                "seconds_total": ledger["stages"].get(r.name, {}).get("seconds"),
                "summary": r.summary,
            }
            for r in result.stages
        ],
        "seconds": sum(r.seconds for r in result.stages),
    }


def print_result(result: Any) -> None:
    """The stage times, then the report's path and the success table."""
    data = summary(result)
    made = sum(s["seconds_total"] or 0.0 for s in data["stages"]) or 1.0
    typer.echo(f"\n{'stage':30s} {'wall time':>10s} {'share':>6s} {'this run':>10s}")
    for s in data["stages"]:
        total = s["seconds_total"] or 0.0
        state = "up to date" if s["decision"] == "skip" else _clock(s["seconds"])
        typer.echo(f"{s['stage']:30s} {_clock(total):>10s} {total / made:6.0%} {state:>10s}")
    typer.echo(f"{'total':30s} {_clock(made):>10s} {'':6s} {_clock(data['seconds']):>10s}")
    if result.report_html is not None:
        typer.echo(f"\nreport: {result.report_html} (numbers: {result.report_json})\n")
        typer.echo(result.table)
    typer.echo(f"\nstage times: {result.out / 'study.json'}; warnings: {result.out / 'study.log'}")


def _clock(seconds: float) -> str:
    m, s = divmod(int(round(seconds)), 60)
    return f"{m}m{s:02d}s" if m else f"{seconds:.1f}s"


@app.command("presets")
def presets() -> None:
    """List the study presets (the packaged ones and those in ./config/study/)."""
    from r2s2r.study.config import load_study, preset_names

    for name in preset_names():
        cfg = load_study(name)
        typer.echo(f"{name:12s} {cfg.description}")


@app.command("show")
def show(preset: Annotated[str, typer.Argument(help="a preset name or YAML")]) -> None:
    """Print a preset, every field filled in: copy it to config/study/NAME.yaml to make your own."""
    import yaml

    from r2s2r.study.config import load_study

    typer.echo(yaml.safe_dump(load_study(preset).model_dump(mode="json"), sort_keys=False))


@app.command("bench")
def bench(
    out: Annotated[Path, typer.Option("--out", help="the study folder (run or continued)")],
    preset: Annotated[str, typer.Option("--preset", help="a preset name or YAML")] = "smoke",
    run_first: Annotated[
        bool, typer.Option("--run/--no-run", help="run (or finish) the study first")
    ] = True,
    as_json: Annotated[bool, typer.Option("--json", help="print the figures as JSON")] = False,
) -> None:
    """Time a study stage by stage, and its generation against the raw physics and render
    cost of the same work (mujoco.mj_step, mujoco.Renderer, measured in this run)."""
    from r2s2r.study.bench import study_bench
    from r2s2r.study.config import load_study

    if run_first:
        run(out, preset, "twin", None, None, None, None, quiet=as_json)
    cfg = load_study(preset)
    figures = study_bench(out, cfg.image_size)
    if as_json:
        typer.echo(json.dumps(figures, indent=2))
        return
    typer.echo(f"study {cfg.name} on {figures['machine']}")
    typer.echo(f"{'stage':30s} {'wall time':>10s} {'share':>6s}")
    for s in figures["stages"]:
        typer.echo(f"{s['stage']:30s} {_clock(s['seconds']):>10s} {s['share']:6.0%}")
    typer.echo(
        f"\ngeneration at {cfg.image_size} px: raw mujoco.Renderer "
        f"{figures['raw_frame_sets_per_s']:.0f} three-view frames/s (the env's renderer "
        f"{figures['env_frame_sets_per_s']:.0f})"
    )
    head = f"{'dataset':20s} {'kept':>5s} {'tries':>5s} {'core s':>7s} {'kept/core-h':>11s}"
    typer.echo(
        head + f" {'(no render)':>11s} {'raw phys s':>10s} {'raw rend s':>10s} {'x raw':>6s}"
    )
    for g in figures["generation"]:
        typer.echo(
            f"{g['dataset']:20s} {g['kept']:5d} {g['attempts']:5d} {g['core_s']:7.1f} "
            f"{_num(g['kept_per_core_hour']):>11s} {_num(g['kept_per_core_hour_no_render']):>11s} "
            f"{_num(g['raw_physics_s']):>10s} {_num(g['raw_render_s']):>10s} "
            f"{_num(g['over_raw']):>6s}"
        )
    typer.echo(
        f"all generation: {figures['generation_core_s']:.1f} core-s against "
        f"{figures['generation_raw_s']:.1f} s of raw physics and rendering "
        f"({_num(figures['generation_over_raw'])}x; the aim is 1.3x)"
    )


def _num(x: float | None) -> str:
    return "-" if x is None else f"{x:.1f}"
