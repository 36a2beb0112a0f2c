"""``r2s2r ground``: capture, calibrate, register, identify, and the grounding benchmark."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from r2s2r.cli.choices import CellOpt
from r2s2r.cli.record import RigKind

if TYPE_CHECKING:
    pass

app = typer.Typer(no_args_is_help=True, help="World grounding: calibration, registration, sysid.")

# Options shared by the commands that open a rig.
RigOpt = Annotated[RigKind, typer.Option("--rig", help="the twin or the real cell")]
SeedOpt = Annotated[int, typer.Option("--seed", help="twin seed")]
ConfigOpt = Annotated[
    Path | None, typer.Option("--config", help="hardware rig YAML (with --rig hardware)")
]
JsonOpt = Annotated[bool, typer.Option("--json", help="print JSON")]


@app.command()
def calibrate(
    images: Annotated[Path, typer.Option(help="folder of board images (png, jpg)")],
    board: Annotated[str, typer.Option(help="checkerboard:COLSxROWS:SQUARE_M (inner corners)")],
    model: Annotated[str, typer.Option(help="camera model: pinhole or fisheye")],
    as_json: JsonOpt = False,
) -> None:
    """Fit a camera's intrinsics to checkerboard images; report the errors and dropped views."""
    from r2s2r.geometry.board import parse_board
    from r2s2r.ground.calibrate import calibrate_folder

    if model not in ("pinhole", "fisheye"):
        raise ValueError(f"--model must be pinhole or fisheye, got {model!r}")
    result = calibrate_folder(images, parse_board(board), model, progress=True)
    if as_json:
        typer.echo(json.dumps(result.to_json(), indent=2))
        return
    names = ("k1", "k2", "k3", "k4") if model == "fisheye" else ("k1", "k2", "p1", "p2", "k3")
    w, h = result.image_size
    rows = [
        ("model", result.model),
        ("image", f"{w} x {h} px"),
        ("fx, fy", f"{result.fx:.3f}  {result.fy:.3f} px"),
        ("cx, cy", f"{result.cx:.3f}  {result.cy:.3f} px"),
        ("dist", "  ".join(f"{n}={d:+.6f}" for n, d in zip(names, result.dist, strict=False))),
        ("rms", f"{result.rms_px:.3f} px"),
        ("leave-one-out", f"{result.loo_px:.3f} px"),
        (
            "views used",
            f"{len(result.views_used)} of {len(result.views_used) + len(result.views_rejected)}",
        ),
    ]
    for key, value in rows:
        typer.echo(f"{key:14s} {value}")
    typer.echo(f"\n{'view':32s} {'rms px':>8s} {'loo px':>8s}")
    for view in result.views_used:
        typer.echo(f"{view:32s} {result.view_rms_px[view]:8.3f} {result.view_loo_px[view]:8.3f}")
    for view, reason in result.views_rejected.items():
        typer.echo(f"{view:32s} rejected: {reason}")


def _print_summary(summary: dict[str, Any]) -> None:
    typer.echo("camera        fx        fy        cx       cy   fit px   LOO px   CAD px")
    for name, c in summary["cameras"].items():
        typer.echo(
            f"{name:11s} {c['fx']:8.2f}  {c['fy']:8.2f}  {c['cx']:7.2f}  {c['cy']:7.2f}"
            f"  {c['chain_rms_px']:7.3f}  {c['loo_px']:7.3f}  {c['cad_rms_px']:7.3f}"
        )
    typer.echo(f"belt top centre {[round(v, 4) for v in summary['belt']['pos']]} m")
    for name, b in summary["bins"].items():
        typer.echo(f"{name} {[round(v, 4) for v in b['pos']]} m")
    for o in summary["objects"]:
        typer.echo(f"object {o['name']}: IoU {o['iou']:.3f}, accepted {o['accepted']}")
    typer.echo(
        f"held-out TCP RMS {summary['tcp_rms_mm']:.3f} mm / {summary['tcp_rms_deg']:.3f} deg "
        f"(nominal {summary['nominal_tcp_rms_mm']:.3f} mm / "
        f"{summary['nominal_tcp_rms_deg']:.3f} deg)"
    )
    typer.echo(
        f"median fingertip RMS {summary['fingertip_rms_mm']:.3f} mm "
        f"(nominal {summary['nominal_fingertip_rms_mm']:.3f} mm)"
    )
    typer.echo(
        f"replayed commands vs rig: TCP {summary['replay_tcp_mm']:.3f} mm, head view "
        f"difference {summary['image_diff']:.2f} (nominal {summary['nominal_replay_tcp_mm']:.3f}"
        f" mm, {summary['nominal_image_diff']:.2f})"
    )


@app.command()
def capture(
    out: Annotated[Path, typer.Option("--out", help="capture folder")],
    rig: RigOpt = RigKind.twin,
    seed: SeedOpt = 0,
    cell: CellOpt = None,
    config: ConfigOpt = None,
) -> None:
    """Capture board views, RGB-D of the cell and excitation recordings through a rig."""
    from r2s2r.app.ground import GroundRequest
    from r2s2r.app.ground import capture as run_capture

    run_capture(GroundRequest(out=out, rig=rig.value, seed=seed, cell=cell, config=config))
    typer.echo(f"{out}: captured (cameras/, scene/, sysid/, replay/)")


@app.command("all")
def ground_all_cmd(
    out: Annotated[Path, typer.Option("--out", help="capture and output folder")],
    rig: RigOpt = RigKind.twin,
    seed: SeedOpt = 0,
    cell: CellOpt = None,
    config: ConfigOpt = None,
    reuse: Annotated[
        bool, typer.Option("--reuse", help="ground an existing capture in --out, capture nothing")
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """Capture, calibrate, register and identify; write OUT/grounded.yaml and OUT/report.md."""
    from r2s2r.app.ground import GroundRequest, ground

    request = GroundRequest(
        out=out, rig=rig.value, seed=seed, cell=cell, config=config, reuse=reuse
    )
    result = ground(request)
    if as_json:
        typer.echo(json.dumps(result.summary(), indent=2, default=float))
        return
    _print_summary(result.summary())
    typer.echo(
        f"wrote {result.world_path} and {result.report_path} ({result.grounding.seconds:.0f} s)"
    )


@app.command()
def bench(
    seed: SeedOpt = 0,
    out: Annotated[
        Path | None, typer.Option("--out", help="keep the capture and report here")
    ] = None,
    as_json: JsonOpt = False,
    ideal: Annotated[
        bool,
        typer.Option(
            "--ideal", help="the ideal twin: exact readings, no unmodelled dynamics or optics"
        ),
    ] = False,
) -> None:
    """Ground a twin end to end and compare with its hidden truth, grounded next to nominal."""
    from r2s2r.ground.bench import LIMITS, SCENE_AND_MODEL_KEYS, run_bench

    figures = run_bench(seed, out, ideal=ideal)
    if as_json:
        typer.echo(json.dumps(figures, indent=2, default=float))
    else:
        typer.echo(
            f"{figures['twin']} twin seed {seed} on {figures['machine']}; grounded (nominal)"
        )
        for name, c in figures["cameras"].items():
            n = c["nominal"]
            typer.echo(
                f"{name:11s} focal {c['focal_err_pct']:.3f}% ({n['focal_err_pct']:.2f}%)  "
                f"pp {c['pp_err_px']:.2f} px ({n['pp_err_px']:.2f})  LOO {c['loo_px']:.3f} px "
                f"(CAD {n['reprojection_px']:.2f})  pose {c['pose_err_mm']:.2f} mm / "
                f"{c['pose_err_deg']:.3f} deg ({n['pose_err_mm']:.1f} mm / "
                f"{n['pose_err_deg']:.2f} deg)"
            )
        n = figures["nominal"]
        for key in (*SCENE_AND_MODEL_KEYS, "replay_tcp_mm", "image_diff"):
            limit = f"  (limit {LIMITS[key]})" if key in LIMITS else ""
            typer.echo(f"{key:17s} {figures[key]:9.3f}  nominal {n[key]:9.3f}{limit}")
        typer.echo(
            f"{figures['seconds']:.0f} s; objects accepted "
            f"{figures['objects_accepted']}/{figures['objects']}"
        )
        for line in figures["failures"]:
            typer.echo(f"MISSED: {line}")
    if figures["failures"]:
        raise typer.Exit(1)
