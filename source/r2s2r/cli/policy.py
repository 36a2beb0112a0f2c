"""``r2s2r policy``: benchmark a policy's inference; print the presets' parameter counts."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

app = typer.Typer(no_args_is_help=True, help="Policies: inference speed and sizes.")


@app.command()
def bench(
    policy: Annotated[Path | None, typer.Option("--policy", help="a training run folder")] = None,
    preset: Annotated[
        str | None, typer.Option("--preset", help="a preset with random weights")
    ] = None,
    device: Annotated[str, typer.Option("--device", help="auto, cpu, cuda")] = "auto",
    repeats: Annotated[int, typer.Option("--repeats", min=1)] = 20,
    as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
) -> None:
    """Milliseconds per action chunk (batch 1) on the device present: observation encoding
    and the Euler steps apart, against sampling without the encoding cache; peak memory and
    parameter counts."""
    from r2s2r.cli.train import require_policy_extra

    if policy is not None and preset is not None:
        raise typer.BadParameter("give --policy or --preset, not both")
    require_policy_extra()
    from r2s2r.policy.bench import bench as run_bench

    result = run_bench(policy, preset, device, repeats)
    if as_json:
        typer.echo(json.dumps(result, indent=2))
        return
    typer.echo(f"policy {result['preset']} on {result['device']} ({result['dtype']})")
    typer.echo(
        f"  ms per chunk     {result['ms_per_chunk']:8.2f}  (encode {result['encode_ms']:.2f}, "
        f"{result['denoise_steps']} Euler steps {result['denoise_ms']:.2f})"
    )
    typer.echo(
        f"  uncached         {result['uncached_ms_per_chunk']:8.2f}  "
        f"(x{result['speedup_over_uncached']:.2f} slower)"
    )
    typer.echo(f"  peak memory      {result['peak_memory_mib']:8.0f} MiB")
    typer.echo(
        f"  params           {result['params']:,} ({result['trainable_params']:,} trainable)"
    )


@app.command()
def params(
    preset: Annotated[
        list[str] | None, typer.Option("--preset", help="preset(s); default: all")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
) -> None:
    """Parameter counts of the presets (built without allocating their weights)."""
    from r2s2r.cli.train import require_policy_extra

    require_policy_extra()
    from r2s2r.policy.bench import parameter_table
    from r2s2r.policy.config import POLICY_PRESETS

    rows = parameter_table(tuple(preset or POLICY_PRESETS))
    if as_json:
        typer.echo(json.dumps(rows, indent=2))
        return
    keys = [k for k in rows[0] if k != "preset"]
    typer.echo(f"{'preset':8s}" + "".join(f"{k:>16s}" for k in keys))
    for row in rows:
        typer.echo(f"{row['preset']:8s}" + "".join(f"{row[k]:>16,}" for k in keys))


@app.command()
def probe(
    run: Annotated[Path, typer.Option("--run", help="a training run folder")],
    data: Annotated[Path, typer.Option("--data", help="a twin dataset (it tracks the object)")],
    frames: Annotated[int, typer.Option(min=50, help="on-belt frames probed")] = 1500,
    seed: Annotated[int, typer.Option(help="which frames")] = 0,
    pixels: Annotated[
        bool, typer.Option("--pixels", help="probe the run's input views, not its tokens")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
) -> None:
    """Can the policy see where the object is and how fast the belt runs? A linear probe
    from its observation tokens to the object's position and the belt speed, scored on
    episodes it was not fitted on."""
    from r2s2r.cli.train import require_policy_extra

    require_policy_extra()
    from tqdm import tqdm

    from r2s2r.eval.embedding import LatentError
    from r2s2r.eval.probe import probe as run_probe

    with tqdm(total=(frames + 31) // 32, desc="probe", unit="batch", disable=as_json) as bar:
        try:
            result = run_probe(
                run, data, frames, seed=seed, on_batch=lambda: bar.update(1), pixels=pixels
            )
        except LatentError as err:
            typer.echo(f"error: {err}", err=True)
            raise typer.Exit(2) from err
    if as_json:
        typer.echo(json.dumps(result, indent=2))
        return
    typer.echo(
        f"object x: {result['object_x_cm']:.1f} cm off (R^2 {result['object_x_r2']:.2f}; the "
        f"spread is {result['object_x_spread_cm']:.1f} cm), y: {result['object_y_cm']:.1f} cm "
        f"(R^2 {result['object_y_r2']:.2f}); belt speed: {result['belt_speed_cm_s']:.2f} cm/s "
        f"off (R^2 {result['belt_speed_r2']:.2f}); {result['frames_test']} held-out frames"
    )
