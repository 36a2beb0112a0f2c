"""The ``r2s2r`` command line."""

from __future__ import annotations

import os
import sys
from collections.abc import MutableMapping

import typer

from r2s2r import __version__
from r2s2r.cli.bench import app as bench_app
from r2s2r.cli.dataset import app as dataset_app
from r2s2r.cli.deploy import app as deploy_app
from r2s2r.cli.eval import evaluate
from r2s2r.cli.generate import generate
from r2s2r.cli.ground import app as ground_app
from r2s2r.cli.latent import latent
from r2s2r.cli.policy import app as policy_app
from r2s2r.cli.record import record
from r2s2r.cli.report import compare, report
from r2s2r.cli.rig import app as rig_app
from r2s2r.cli.runtime import app as runtime_app
from r2s2r.cli.serve import serve
from r2s2r.cli.sim import app as sim_app
from r2s2r.cli.study import app as study_app
from r2s2r.cli.train import app as train_app

app = typer.Typer(
    no_args_is_help=True,
    add_completion=False,
    help="r2s2r: real2sim2real co-training for dexterous manipulation.",
)
app.add_typer(sim_app, name="sim")
app.add_typer(dataset_app, name="dataset")
app.add_typer(rig_app, name="rig")
app.add_typer(ground_app, name="ground")
app.add_typer(train_app, name="train")
app.add_typer(policy_app, name="policy")
app.add_typer(deploy_app, name="deploy")
app.add_typer(runtime_app, name="runtime")
app.add_typer(study_app, name="study")
app.add_typer(bench_app, name="bench")
app.command("record")(record)
app.command("generate")(generate)
app.command("serve")(serve)
app.command("report")(report)
app.command("compare")(compare)
app.command("latent")(latent)
app.command("eval")(evaluate)


@app.command()
def version() -> None:
    """Print the r2s2r version."""
    typer.echo(__version__)


def headless_gl_default(environ: MutableMapping[str, str] = os.environ) -> None:
    """Without a display, render through EGL (Mesa's software rasterizer where there is no
    GPU) unless ``MUJOCO_GL`` says otherwise. MuJoCo picks its OpenGL backend when it is first
    imported, so this runs before any command imports it; a library user sets the variable
    themselves."""
    if environ.get("DISPLAY") or environ.get("WAYLAND_DISPLAY"):
        return
    environ.setdefault("MUJOCO_GL", "egl")
    environ.setdefault("PYOPENGL_PLATFORM", environ["MUJOCO_GL"])


def main() -> None:
    """Run the CLI; bad input (a spec, a value, a missing file) ends with its message, not a
    traceback."""
    from r2s2r.spec import SpecError

    headless_gl_default()
    try:
        app()
    except (SpecError, ValueError, FileNotFoundError) as err:
        typer.echo(f"error: {err}", err=True)
        sys.exit(2)
