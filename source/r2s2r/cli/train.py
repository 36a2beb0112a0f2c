"""``r2s2r train``: co-train a policy on real and simulated datasets; ``r2s2r train bench``
measures the training data loader."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Annotated

import typer

from r2s2r.cli.train_bench import bench, speed

app = typer.Typer(
    invoke_without_command=True,
    help="Train a flow-matching policy on a real dataset mixed with simulated ones.",
)


def require_policy_extra() -> None:
    """Fail with the install hint when the policy extra (torch and friends) is missing."""
    from r2s2r.optional import missing_extra

    try:
        import safetensors  # noqa: F401
        import timm  # noqa: F401
        import torch  # noqa: F401
    except ImportError as err:
        raise missing_extra(err, "policy") from None


@app.callback()
def train(
    ctx: typer.Context,
    preset: Annotated[str, typer.Option("--preset", help="tiny, 500m, 2b or a YAML")] = "tiny",
    real: Annotated[Path | None, typer.Option("--real", help="the real dataset")] = None,
    real_episodes: Annotated[
        int | None,
        typer.Option("--real-episodes", min=1, help="train on the real dataset's first N episodes"),
    ] = None,
    only_successful: Annotated[
        bool,
        typer.Option("--only-successful", help="train on the real episodes labelled successful"),
    ] = False,
    val_episodes: Annotated[
        int,
        typer.Option(
            "--val-episodes",
            min=0,
            help="hold out the last N real episodes: validation loss and chunk error in the log",
        ),
    ] = 0,
    val_every: Annotated[
        int, typer.Option("--val-every", min=1, help="validate every N steps")
    ] = 500,
    sim: Annotated[
        list[Path] | None, typer.Option("--sim", help="a simulated dataset (repeatable)")
    ] = None,
    alpha: Annotated[
        float | None,
        typer.Option(
            "--alpha", help="share of each batch from real data (default 1, or 0.5 with --sim)"
        ),
    ] = None,
    steps: Annotated[int, typer.Option("--steps", min=1, help="optimizer steps")] = 30_000,
    out: Annotated[Path | None, typer.Option("--out", help="the run folder")] = None,
    init: Annotated[
        Path | None, typer.Option("--init", help="fine-tune from this checkpoint or run")
    ] = None,
    resume: Annotated[bool, typer.Option("--resume", help="continue the run in --out")] = False,
    batch_size: Annotated[int, typer.Option("--batch-size", min=1)] = 32,
    lr: Annotated[float, typer.Option("--lr", help="peak learning rate")] = 1e-4,
    final_lr: Annotated[
        float | None,
        typer.Option(
            "--final-lr",
            min=0,
            help="learning rate at the end of the cosine decay (default: lr/10, at most 1e-5)",
        ),
    ] = None,
    warmup: Annotated[int, typer.Option("--warmup", min=0, help="warmup steps")] = 1000,
    workers: Annotated[int, typer.Option("--workers", min=0, help="loader processes")] = 2,
    seed: Annotated[int, typer.Option("--seed")] = 0,
    save_every: Annotated[int, typer.Option("--save-every", min=1)] = 1000,
    keep: Annotated[
        int, typer.Option("--keep", min=1, help="checkpoints kept (the newest ones)")
    ] = 2,
    log_every: Annotated[int, typer.Option("--log-every", min=1)] = 10,
    device: Annotated[str, typer.Option("--device", help="auto, cpu, cuda, cuda:N")] = "auto",
    no_augment: Annotated[bool, typer.Option("--no-augment", help="no image augmentation")] = False,
    checkpointing: Annotated[
        bool, typer.Option("--gradient-checkpointing", help="recompute activations (less memory)")
    ] = False,
    domains: Annotated[
        bool,
        typer.Option("--domain-conditioning", help="tell the model real from each sim dataset"),
    ] = False,
    cache_dir: Annotated[
        Path | None, typer.Option("--cache-dir", help="decoded-frame cache (reused across runs)")
    ] = None,
) -> None:
    """Train (or, with --resume, continue) a policy: checkpoints in OUT/checkpoints, metrics
    in OUT/metrics.jsonl, the loss curve in OUT/loss.png. Ctrl-C saves a checkpoint. Run
    under `torchrun --nproc-per-node N` for several GPUs (or gloo processes on the CPU)."""
    if ctx.invoked_subcommand is not None:
        return
    if out is None:
        raise typer.BadParameter("--out is required (the run folder)", param_hint="--out")
    require_policy_extra()
    from r2s2r.app.train import train as run_train
    from r2s2r.cli.progress import progress_bar
    from r2s2r.policy.train import TrainCfg

    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    cfg = TrainCfg.from_dict(
        {
            "preset": preset,
            "real": real,
            "real_episodes": real_episodes,
            "only_successful": only_successful,
            "val_episodes": val_episodes,
            "val_every": val_every,
            "sims": tuple(sim or ()),
            "alpha": alpha,
            "steps": steps,
            "batch_size": batch_size,
            "lr": lr,
            "final_lr": min(lr / 10, 1e-5) if final_lr is None else final_lr,
            "warmup_steps": warmup,
            "workers": workers,
            "seed": seed,
            "save_every": save_every,
            "keep": keep,
            "log_every": log_every,
            "device": device,
            "augment": not no_augment,
            "gradient_checkpointing": checkpointing,
            "cache_dir": cache_dir,
            "init": init,
            "domain_conditioning": domains,
        },
        source="r2s2r train options",
    )
    with progress_bar(steps, "train", "step") as show:
        result = run_train(cfg, out, resume=resume, progress=show)
    state = "finished" if result.finished else "stopped (resume with --resume)"
    typer.echo(f"{state} at step {result.step}/{result.steps}: {result.out}")
    if result.last is not None:
        typer.echo(f"last loss {result.last.loss:.4g}, {result.last.samples_per_s:.1f} samples/s")
        if result.last.val_loss is not None:
            typer.echo(
                f"validation loss {result.last.val_loss:.4g}, chunk TCP error "
                f"{result.last.val_pos_mm:.1f} mm"
            )
    if result.loss_plot is not None:
        typer.echo(f"loss curve: {result.loss_plot}")


app.command("bench")(bench)
app.command("speed")(speed)
