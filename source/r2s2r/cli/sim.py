"""``r2s2r sim``: look at, record and benchmark the simulated cell."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from r2s2r.spec.conditions import CONDITIONS
from r2s2r.spec.worlds import TASKS, WORLDS

app = typer.Typer(no_args_is_help=True, help="The simulated pick-and-sort cell.")

WorldOpt = Annotated[
    str, typer.Option(help=f"{' | '.join(WORLDS.names())} | path to a WorldSpec YAML")
]
ConditionOpt = Annotated[str, typer.Option(help=" | ".join(CONDITIONS.names()))]


@app.command()
def demo(
    out: Annotated[Path, typer.Option(help="output folder")] = Path("outputs/demo"),
    world: WorldOpt = "nominal",
    condition: ConditionOpt = "nominal",
    seed: int = 0,
    seconds: Annotated[float, typer.Option(help="episode length cap")] = 12.0,
    fps: Annotated[int, typer.Option(help="video frame rate (the env runs at 50 Hz)")] = 25,
    episodes: Annotated[
        int, typer.Option(help="also run this many seeds without cameras and count outcomes")
    ] = 0,
) -> None:
    """Run a scripted episode and write a video of the three camera views."""
    from r2s2r.sim.demo import picker_success, run_demo

    result = run_demo(out, world=world, condition=condition, seed=seed, seconds=seconds, fps=fps)
    typer.echo(
        f"video: {result['video']}  ({result['frames']} frames, "
        f"{result['sim_seconds']:.1f} s simulated in {result['wall_seconds']:.1f} s)"
    )
    typer.echo(f"episode: {result['instruction']} -> {result['status']}")
    if episodes:
        outcomes = picker_success(episodes, world=world, condition=condition, seed=seed)
        counts = {o: outcomes.count(o) for o in sorted(set(outcomes))}
        typer.echo(f"scripted picker over seeds {seed}..{seed + episodes - 1}: {counts}")


@app.command()
def bench(
    as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
    seconds: Annotated[float, typer.Option(help="time per measurement")] = 3.0,
    warp_sizes: Annotated[str, typer.Option(help="MuJoCo Warp batch sizes, '' to skip")] = "1,8,64",
    warp_render_size: Annotated[
        str, typer.Option(help="W,H of the batched Warp renders, '' for the world's")
    ] = "",
) -> None:
    """Measure env physics and rendering throughput against raw MuJoCo, and MuJoCo Warp's
    batched stepping and rendering (against the CPU renderer) at the given batch sizes."""
    from r2s2r.sim.bench import run_bench

    sizes = tuple(int(s) for s in warp_sizes.split(",") if s.strip())
    render_size = tuple(int(s) for s in warp_render_size.split(",") if s.strip())
    if render_size and len(render_size) != 2:
        raise ValueError(f"--warp-render-size must be W,H, got {warp_render_size!r}")
    obs_size = (render_size[0], render_size[1]) if render_size else None
    result = run_bench(seconds=seconds, warp_sizes=sizes, warp_obs_size=obs_size)
    if as_json:
        typer.echo(json.dumps(result, indent=2))
        return
    for key, value in result.items():
        items = value.items() if isinstance(value, dict) else [("", value)]
        for sub, v in items:
            shown = f"{v:,.2f}" if isinstance(v, float) else v
            typer.echo(f"{key + (f'[{sub}]' if sub else ''):36s} {shown}")


@app.command()
def export(
    out: Annotated[Path, typer.Option(help="MJCF file to write")] = Path("outputs/cell.xml"),
    world: WorldOpt = "nominal",
    task: Annotated[
        str, typer.Option(help=f"{' | '.join(TASKS.names())} | path to a TaskSpec YAML")
    ] = "pick_sort",
    mujoco: Annotated[
        int,
        typer.Option(
            min=3,
            max=4,
            help="the MuJoCo major version the file is for (3: loads in MuJoCo 3.x, as Isaac "
            "Lab's environment pins it)",
        ),
    ] = 4,
) -> None:
    """Write the cell as a standalone MJCF file (for MuJoCo's tools or other simulators)."""
    from r2s2r.sim.scene import export_mjcf
    from r2s2r.spec.worlds import load_task, load_world

    path = export_mjcf(load_task(task), load_world(world), out, mujoco_major=mujoco)
    typer.echo(f"wrote {path}")


@app.command()
def view(world: WorldOpt = "nominal", condition: ConditionOpt = "nominal", seed: int = 0) -> None:
    """Open MuJoCo's interactive viewer on the cell (needs a display)."""
    import copy
    import os

    if not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")):
        typer.echo(
            "no display: `r2s2r sim view` needs one (try `r2s2r sim demo` for a video)", err=True
        )
        raise typer.Exit(2)
    import mujoco.viewer

    from r2s2r.sim.env import PickSortEnv

    env = PickSortEnv(world=world, condition=condition, images=False)
    env.reset(seed=seed)
    # The viewer simulates the data it is given: a copy, not the physics' own state.
    data = copy.copy(env.physics.mjdata(0))
    mujoco.viewer.launch(env.model, data)
