"""``r2s2r latent``: the latent-space analysis of a policy's rollouts (``r2s2r.eval.latent``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer


def latent(
    policy: Annotated[Path, typer.Option("--policy", help="the training run folder")],
    rollouts: Annotated[
        Path,
        typer.Option("--rollouts", help="a rollouts dataset, or an eval directory holding one"),
    ],
    out: Annotated[Path, typer.Option("--out", help="where latent.json and the plots go")],
    real: Annotated[
        list[Path] | None,
        typer.Option("--real", help="a real dataset (repeatable; default: the run's)"),
    ] = None,
    sim: Annotated[
        list[Path] | None,
        typer.Option("--sim", help="a simulated dataset (repeatable; default: the run's)"),
    ] = None,
    k: Annotated[int, typer.Option("--k", min=1, help="neighbours per rollout step")] = 10,
    metric: Annotated[str, typer.Option("--metric", help="cosine or euclidean")] = "cosine",
    stride: Annotated[int, typer.Option("--stride", min=1, help="every n-th training frame")] = 5,
    max_frames: Annotated[
        int, typer.Option("--max-frames", min=1, help="training frames per dataset, at most")
    ] = 2000,
    rollout_stride: Annotated[
        int, typer.Option("--rollout-stride", min=1, help="every n-th rollout step")
    ] = 1,
    seed: Annotated[int, typer.Option("--seed", min=0)] = 0,
    batch_size: Annotated[int, typer.Option("--batch-size", min=1)] = 32,
    device: Annotated[str, typer.Option("--device", help="auto, cpu, cuda, cuda:N")] = "auto",
    as_json: Annotated[bool, typer.Option("--json", help="print latent.json")] = False,
) -> None:
    """Embed real, simulated and rollout frames with the policy's own observation encoder;
    for every rollout step, the share of its nearest training frames that are real. Writes
    OUT/latent.json, OUT/projection_pca.png and OUT/real_share.png."""
    from r2s2r.cli.train import require_policy_extra

    require_policy_extra()
    from tqdm import tqdm

    from r2s2r.eval.latent import analyze

    bar: tqdm | None = None

    def show(stage: str, done: int, total: int) -> None:
        nonlocal bar
        if bar is None:
            bar = tqdm(total=total, desc=stage, unit="batch", disable=as_json)
        bar.update(done - bar.n)

    try:
        result = analyze(
            policy, real, sim, rollouts, out, progress=show, k=k, metric=metric, stride=stride,
            max_frames=max_frames, rollout_stride=rollout_stride, seed=seed,
            batch_size=batch_size, device=device,
        )  # fmt: skip
    finally:
        if bar is not None:
            bar.close()
    if as_json:
        typer.echo(json.dumps(result.to_json(), indent=2))
        return
    for s in result.sources:
        typer.echo(f"  {s['label']:32s} {s['frames']:6d} frames of {s['frames_total']}")
    s = result.summary
    typer.echo(
        f"{s['rollouts']} rollouts, {s['steps']} steps: mean real share of the {k} nearest "
        f"training frames {s['mean_real_share']:.3f} (the pool is {s['pool_real_fraction']:.3f} "
        "real)"
    )
    for condition, row in s["by_condition"].items():
        typer.echo(f"  {condition:14s} {row['rollouts']:3d} rollouts  {row['mean_real_share']:.3f}")
    for name in result.files.values():
        typer.echo(f"wrote {result.out / name}")
