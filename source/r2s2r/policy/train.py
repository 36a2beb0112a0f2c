"""Training a policy on a mixture of real and simulated datasets: ``Trainer``.

AdamW (betas 0.9, 0.95) with linear warmup then cosine decay, gradient clipping, an EMA of
the trainable weights, bf16 autocast on CUDA, optional gradient checkpointing, and DDP when
launched by ``torchrun`` (gloo on CPU, NCCL on CUDA).

A run is exactly reproducible: the samples of step ``s`` are a function of (seed, s) (the
mixture's keys), and every random draw of step ``s`` (augmentation, flow-matching noise and
time) comes from a generator seeded by (seed, s, rank). So ``--resume`` from the checkpoint
of step ``k`` continues as if the run had never stopped: on CPU a run of 2 + 2 steps equals
4 straight steps bit for bit.
"""

from __future__ import annotations

import json
import logging
import math
import os
import time
from collections.abc import Callable, Iterator
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from pydantic import Field, model_validator
from torch import nn

from r2s2r import __version__
from r2s2r.data.reader import Dataset
from r2s2r.policy import checkpoint as ckpt
from r2s2r.policy.actions import ActionCodec
from r2s2r.policy.augment import augment
from r2s2r.policy.base import PolicyError
from r2s2r.policy.collate import Collate, to_device
from r2s2r.policy.config import PolicyCfg, load_policy_cfg
from r2s2r.policy.frames import fingerprint
from r2s2r.policy.model import FlowMatchingPolicy, build_model
from r2s2r.policy.normalize import NormStats, fit_stats
from r2s2r.policy.validate import Validation, swapped
from r2s2r.policy.windows import Mixture, WindowDataset, make_loader
from r2s2r.sim.contract import Contract
from r2s2r.sim.embodiment import Embodiment
from r2s2r.spec import Spec
from r2s2r.spec.base import NonNeg, NonNegInt, PosInt, Unit

log = logging.getLogger("r2s2r.train")

METRICS_FILE = "metrics.jsonl"
LOSS_PLOT = "loss.png"


class TrainCfg(Spec):
    """One training run: the policy preset, the data mixture and the optimization recipe."""

    # A policy preset name (tiny, 500m, 2b) or a PolicyCfg YAML path.
    preset: str = "tiny"
    # The real dataset, and the simulated ones mixed in.
    real: Path | None = None
    # Train on the real dataset's first N episodes only (None: all of them).
    real_episodes: PosInt | None = None
    # Train on the real episodes labelled successful only (a take the operator failed
    # teaches the failure too).
    only_successful: bool = False
    # Hold out the last N of those real episodes: every ``val_every`` steps the run logs the
    # flow-matching loss and the chunks' TCP position error on up to ``val_windows`` of
    # their windows (fixed draws, EMA weights), as ``val_loss`` and ``val_pos_mm`` (and the
    # locator's place error in cm, ``val_place_cm``, where the policy has one).
    val_episodes: NonNegInt = 0
    val_every: PosInt = 500
    val_windows: PosInt = 128
    sims: tuple[Path, ...] = ()
    # The share of each batch drawn from real data (None: 1 without sims, 0.5 with them).
    alpha: Unit | None = None
    steps: PosInt = 30_000
    batch_size: PosInt = 32
    lr: float = Field(1e-4, gt=0)
    final_lr: float = Field(1e-5, ge=0)
    warmup_steps: int = Field(1000, ge=0)
    weight_decay: NonNeg = 1e-4
    clip_norm: float = Field(1.0, gt=0)
    ema_decay: Unit = 0.99
    seed: int = 0
    # Data-loading worker processes (0: load in the training process).
    workers: int = Field(2, ge=0)
    augment: bool = True
    # bf16 autocast where the device is CUDA.
    bf16: bool = True
    gradient_checkpointing: bool = False
    # "auto": CUDA when there is a GPU, else the CPU.
    device: str = "auto"
    log_every: PosInt = 10
    save_every: PosInt = 1000
    # Checkpoints kept (the newest ones).
    keep: PosInt = 2
    # Windows the normalization statistics are fitted on (at most).
    stats_windows: PosInt = 20_000
    # Where decoded frames are cached (None: $R2S2R_CACHE_DIR, else ~/.cache/r2s2r/frames).
    cache_dir: Path | None = None
    # Start from this checkpoint's weights (fine-tuning); None: from scratch.
    init: Path | None = None
    # Tell the model which dataset of the mixture each sample came from (a domain token:
    # 0 real, 1... the simulated datasets), whatever the preset says.
    domain_conditioning: bool = False

    @model_validator(mode="after")
    def _check(self) -> TrainCfg:
        if self.real is None and not self.sims:
            raise ValueError("the mixture is empty: give a real dataset, simulated ones, or both")
        if self.final_lr > self.lr:
            raise ValueError(f"final_lr {self.final_lr} is above lr {self.lr}")
        return self

    @property
    def real_share(self) -> float:
        """alpha, resolved."""
        if self.alpha is not None:
            return self.alpha
        return 0.5 if self.sims else 1.0


def learning_rate(cfg: TrainCfg, step: int) -> float:
    """The learning rate of ``step``: linear warmup to ``lr``, then cosine to ``final_lr``."""
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    span = max(1, cfg.steps - cfg.warmup_steps)
    progress = min(1.0, (step - cfg.warmup_steps) / span)
    return cfg.final_lr + (cfg.lr - cfg.final_lr) * 0.5 * (1.0 + math.cos(math.pi * progress))


def step_seed(seed: int, step: int, rank: int = 0) -> int:
    """The seed of every random draw of one step on one rank."""
    return (seed * 1_000_003 + step * 4099 + rank) % (2**63 - 1)


@dataclass(frozen=True)
class StepRecord:
    """What one logged step reports."""

    step: int
    loss: float
    lr: float
    grad_norm: float
    samples_per_s: float
    elapsed_s: float
    # On the held-out episodes (``TrainCfg.val_episodes``), at validation steps only.
    val_loss: float | None = None
    val_pos_mm: float | None = None
    # The locator's place error (cm) on the held-out windows, where the policy has one.
    val_place_cm: float | None = None


class _Loss(nn.Module):
    """The model's loss as a forward pass, so that DDP sees (and synchronizes) it."""

    def __init__(self, model: FlowMatchingPolicy) -> None:
        super().__init__()
        self.model = model

    def forward(self, batch: dict[str, Any], generator: torch.Generator) -> torch.Tensor:
        loss, _ = self.model.loss(batch, generator)
        return loss


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def real_split(cfg: TrainCfg, dataset: Dataset) -> tuple[list[int], list[int]]:
    """(training, validation) episode positions of the real dataset: its first
    ``real_episodes`` (all: None), the last ``val_episodes`` of them held out, the rest kept
    where successful if ``only_successful``."""
    total = dataset.num_episodes
    n = cfg.real_episodes or total
    if n > total:
        raise PolicyError(f"{cfg.real}: real_episodes {n}: the dataset holds {total} episodes")
    if cfg.val_episodes >= n:
        raise PolicyError(
            f"{cfg.real}: val_episodes {cfg.val_episodes} leaves no episode to train on (of {n})"
        )
    train, val = list(range(n - cfg.val_episodes)), list(range(n - cfg.val_episodes, n))
    if cfg.only_successful:
        train = [e for e in train if bool(dataset.episodes[e].get("success"))]
        if not train:
            raise PolicyError(f"{cfg.real}: no successful episode to train on (only_successful)")
    return train, val


def open_mixture(cfg: TrainCfg, policy: PolicyCfg) -> Mixture:
    """The training mixture, every dataset checked against the others."""
    real = None
    if cfg.real is not None:
        episodes: int | list[int] | None = cfg.real_episodes
        if cfg.val_episodes or cfg.only_successful:
            episodes = real_split(cfg, Dataset(cfg.real))[0]
        real = window_dataset(cfg, policy, cfg.real, episodes)
    sims = [window_dataset(cfg, policy, p) for p in cfg.sims]
    return Mixture(real, sims, cfg.real_share, cfg.seed)


def window_dataset(
    cfg: TrainCfg, policy: PolicyCfg, root: Path, episodes: int | list[int] | None = None
) -> WindowDataset:
    """The windows of dataset ``root`` (its ``episodes``) as ``policy`` takes them."""
    return WindowDataset(
        root,
        policy.image_size,
        policy.state_history,
        policy.action_horizon,
        cache_dir=cfg.cache_dir,
        episodes=episodes,
    )


def dataset_records(mixture: Mixture) -> list[dict[str, str]]:
    """Each dataset of the mixture: its folder, domain and content fingerprint."""
    return [
        {"path": str(d.root), "domain": name, "fingerprint": fingerprint(d.dataset)}
        for d, name in zip(mixture.datasets, mixture.domains, strict=True)
    ]


def check_run_fits(config: dict[str, Any], mixture: Mixture, path: Path) -> None:
    """Raise where the mixture's datasets do not fit the policy a run folder trained (its
    robot, action layout, cameras and rate), naming the dataset folder."""
    try:
        embodiment = Embodiment.from_json(config["embodiment"])
        contract = Contract.of(embodiment, config["action_mode"], tuple(config["cameras"]))
        fps = float(config["fps"])
    except (KeyError, TypeError, ValueError) as err:
        raise PolicyError(f"{path}: not a run config ({err})") from None
    mixture.check_policy(contract, fps, contract.cameras)


class Trainer:
    """Trains ``cfg`` into run folder ``out`` (continuing its newest checkpoint on resume)."""

    def __init__(self, cfg: TrainCfg, out: Path, resume: bool = False) -> None:
        self.out = Path(out)
        self.rank, self.world_size = _distributed()
        saved = self.out / ckpt.CONFIG_FILE
        run = self._saved_run(saved, resume)
        if resume:
            cfg = _resumed_cfg(cfg, run, saved)
        self.cfg = cfg
        self.policy_cfg = self._policy_cfg(run, saved)
        self.device = resolve_device(cfg.device)
        self._open_data(run, saved)
        self._build_model()
        self.step = 0
        self.norm: NormStats
        last = ckpt.latest_checkpoint(self.out) if resume else None
        if last is not None:
            self._restore(ckpt.load_checkpoint(last))
        else:
            self._start(saved)
        pc = self.policy_cfg
        self.collate = Collate(
            self.codec, self.norm, pc.max_state_dim, pc.max_action_dim, pc.image_size
        )
        self.validation = self._validation()
        self._loss = self._loss_module()

    def _saved_run(self, saved: Path, resume: bool) -> dict[str, Any]:
        """The run config ``saved`` holds when resuming (empty when not); refuses to resume
        a folder without one or to start over a folder that holds a run."""
        if resume:
            if not saved.is_file():
                raise PolicyError(f"{self.out}: nothing to resume ({ckpt.CONFIG_FILE} missing)")
            return ckpt.read_json(saved)
        if saved.is_file() and ckpt.latest_checkpoint(self.out) is not None:
            raise PolicyError(
                f"{self.out}: already holds a training run; pass --resume to continue it, or "
                "choose another --out"
            )
        return {}

    def _policy_cfg(self, run: dict[str, Any], saved: Path) -> PolicyCfg:
        """The policy to train: the one ``run`` started with, else the preset's; with domain
        conditioning where the training config asks for it."""
        if run:
            # The policy the run started with, even if its preset file changed since.
            policy_cfg = PolicyCfg.from_dict(run["policy"], source=str(saved))
        else:
            policy_cfg = load_policy_cfg(self.cfg.preset)
        if self.cfg.domain_conditioning:
            policy_cfg = policy_cfg.replace(domain_conditioning=True)
        return policy_cfg

    def _open_data(self, run: dict[str, Any], saved: Path) -> None:
        """Open the mixture and its action codec, and check both fit the policy (and the
        resumed ``run``)."""
        cfg = self.cfg
        self.mixture = open_mixture(cfg, self.policy_cfg)
        self.contract = self.mixture.contract
        if self.policy_cfg.domain_conditioning and len(self.mixture.domains) > (
            self.policy_cfg.num_domains
        ):
            raise PolicyError(
                f"the mixture has {len(self.mixture.domains)} domains, more than the policy's "
                f"num_domains {self.policy_cfg.num_domains}"
            )
        self.mixture.check_policy(self.contract, self.policy_cfg.control_hz, self.contract.cameras)
        if run:
            check_run_fits(run, self.mixture, saved)
            _check_fingerprints(run, self.mixture, saved)
        self.codec = ActionCodec(self.contract, self.policy_cfg.action_repr)
        for what, need, have in (
            ("state", self.contract.state_dim, self.policy_cfg.max_state_dim),
            ("action", self.codec.dim, self.policy_cfg.max_action_dim),
        ):
            if need > have:
                raise PolicyError(
                    f"the datasets' {what} has {need} entries, more than the policy's "
                    f"max_{what}_dim {have} (preset {cfg.preset!r})"
                )

    def _build_model(self) -> None:
        """Build the seeded model, its optimizer and its EMA weights."""
        cfg = self.cfg
        if self.device.type == "cpu":
            # On a CPU, PyTorch's default kernels of some backward passes differ in the last
            # bits from run to run on more than one thread (two straight 20-step runs of the
            # tiny preset on two threads disagreed in 145 of 273 tensors); its deterministic
            # ones make a run, and a run resumed from a checkpoint, the same to the bit at
            # any thread count. On a GPU that costs speed and is left to the user.
            torch.use_deterministic_algorithms(True, warn_only=True)
        torch.manual_seed(cfg.seed)
        self.model = build_model(self.policy_cfg, self.device)
        self.model.set_gradient_checkpointing(cfg.gradient_checkpointing)
        self.params = {n: p for n, p in self.model.named_parameters() if p.requires_grad}
        self.optimizer = torch.optim.AdamW(
            list(self.params.values()),
            lr=cfg.lr,
            betas=(0.9, 0.95),
            weight_decay=cfg.weight_decay,
        )
        self.ema = {n: p.detach().clone() for n, p in self.params.items()}

    def _start(self, saved: Path) -> None:
        """Start a new run: load the initial weights, fit the normalization and (on rank 0)
        write the run config to ``saved`` and clear old metrics."""
        cfg = self.cfg
        if cfg.init is not None:
            self._init_from(cfg.init)
        self.norm = fit_stats(self.mixture, self.codec, cfg.stats_windows, cfg.seed)
        if self.rank == 0:
            self.out.mkdir(parents=True, exist_ok=True)
            ckpt.write_json(saved, self.run_config())
            (self.out / METRICS_FILE).unlink(missing_ok=True)

    def _validation(self) -> Validation | None:
        """The held-out real episodes' validation (rank 0 only), if the config asks for one."""
        cfg = self.cfg
        if not (cfg.val_episodes and cfg.real is not None and self.rank == 0):
            return None
        held_out = real_split(cfg, self.mixture.datasets[0].dataset)[1]
        data = window_dataset(cfg, self.policy_cfg, cfg.real, held_out)
        return Validation(data, self.collate, cfg.val_windows, cfg.batch_size, cfg.seed)

    def _loss_module(self) -> nn.Module:
        """The model's loss, wrapped for data-parallel training on more than one rank."""
        loss: nn.Module = _Loss(self.model)
        if self.world_size > 1:
            from torch.nn.parallel import DistributedDataParallel

            ids = [self.device.index] if self.device.type == "cuda" else None
            loss = DistributedDataParallel(loss, device_ids=ids)
        return loss

    # ------------------------------------------------------------------ state
    def run_config(self) -> dict[str, Any]:
        """What ``config.json`` records: enough to rebuild the policy and check a resume."""
        return {
            "r2s2r_version": __version__,
            "train": self.cfg.model_dump(mode="json"),
            "policy": self.policy_cfg.model_dump(mode="json"),
            "embodiment": self.contract.embodiment.to_json(),
            "action_mode": self.contract.action_mode,
            "cameras": list(self.contract.cameras),
            "fps": self.mixture.fps,
            "domains": list(self.mixture.domains),
            "datasets": dataset_records(self.mixture),
        }

    def _restore(self, saved: ckpt.Checkpoint) -> None:
        self.model.load_state_dict(saved.model)
        self.ema = {n: saved.ema[n].to(self.device) for n in self.params}
        assert saved.optimizer is not None
        self.optimizer.load_state_dict(saved.optimizer)
        self.norm = saved.norm
        self.step = saved.step
        ckpt.set_rng_states(saved.rng, saved.trainer["rng"])
        _truncate_metrics(self.out / METRICS_FILE, self.step)
        log.info("resumed %s at step %d", saved.path, self.step)

    def _init_from(self, path: Path) -> None:
        saved = ckpt.load_checkpoint(path, optimizer=False)
        config = saved.path.parent.parent / ckpt.CONFIG_FILE
        check_run_fits(ckpt.read_json(config), self.mixture, config)
        own = self.model.state_dict()
        mismatched = [
            k for k, v in saved.model.items() if k in own and tuple(own[k].shape) != tuple(v.shape)
        ]
        if mismatched:
            raise PolicyError(
                f"{saved.path}: {len(mismatched)} weights have other shapes than preset "
                f"{self.cfg.preset!r} (first: {mismatched[0]}): it is a checkpoint of another "
                "policy size"
            )
        missing, unexpected = self.model.load_state_dict(saved.model, strict=False)
        if missing or unexpected:
            log.warning(
                "--init %s: %d weights missing, %d unexpected",
                saved.path,
                len(missing),
                len(unexpected),
            )
        self.ema = {n: p.detach().clone() for n, p in self.params.items()}

    def save(self) -> Path:
        """Write the checkpoint of the current step (rank 0 only)."""
        return ckpt.save_checkpoint(
            self.out,
            self.step,
            self.model.state_dict(),
            self.ema,
            self.optimizer.state_dict(),
            self.norm,
            {"samples": self.step * self.cfg.batch_size * self.world_size},
            keep=self.cfg.keep,
        )

    # ------------------------------------------------------------------ loop
    def batches(self) -> Iterator[dict[str, Any]]:
        loader = make_loader(
            self.mixture,
            self.collate,
            self.cfg.batch_size,
            start_step=self.step,
            total_steps=self.cfg.steps,
            workers=self.cfg.workers,
            rank=self.rank,
            world_size=self.world_size,
            pin_memory=self.device.type == "cuda",
        )
        yield from loader

    def train_step(self, batch: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
        """One optimizer step; returns (loss, gradient norm) as device tensors, so that a
        step never waits for the device (``fit`` reads them when it logs)."""
        cfg = self.cfg
        lr = learning_rate(cfg, self.step)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        gen = torch.Generator(self.device).manual_seed(step_seed(cfg.seed, self.step, self.rank))
        batch = to_device(batch, self.device)
        if cfg.augment:
            batch["images"] = augment(batch["images"], gen, self.policy_cfg.augment_shift)
        autocast = (
            torch.autocast("cuda", dtype=torch.bfloat16)
            if cfg.bf16 and self.device.type == "cuda"
            else nullcontext()
        )
        self.model.train()
        with autocast:
            loss = self._loss(batch, gen)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(list(self.params.values()), cfg.clip_norm)
        self.optimizer.step()
        decay = min(cfg.ema_decay, (1 + self.step) / (10 + self.step))
        with torch.no_grad():
            for name, p in self.params.items():
                self.ema[name].mul_(decay).add_(p.detach(), alpha=1 - decay)
        self.step += 1
        return loss.detach(), norm.detach()

    def fit(
        self,
        on_log: Callable[[StepRecord], None] | None = None,
        should_stop: Callable[[], bool] | None = None,
    ) -> int:
        """Train until ``cfg.steps`` (or ``should_stop``, or Ctrl-C), checkpointing every
        ``save_every`` steps and at the end; returns the step reached."""
        cfg = self.cfg
        start, t0 = self.step, time.perf_counter()
        window: list[torch.Tensor] = []
        try:
            for batch in self.batches():
                if self.step >= cfg.steps or (should_stop is not None and should_stop()):
                    break
                loss, grad_norm = self.train_step(batch)
                window.append(loss)
                last = self.step == cfg.steps
                validate = self.validation is not None and (self.step % cfg.val_every == 0 or last)
                if self.step % cfg.log_every == 0 or last or validate:
                    # Validation time is not training time: the clock skips it.
                    val_loss = val_pos_mm = val_place_cm = None
                    if validate:
                        val_loss, val_pos_mm, val_place_cm, spent = self._validate()
                        t0 += spent
                    elapsed = time.perf_counter() - t0
                    done = (self.step - start) * cfg.batch_size * self.world_size
                    record = StepRecord(
                        step=self.step,
                        loss=sum(float(x) for x in window) / len(window),
                        lr=learning_rate(cfg, self.step - 1),
                        grad_norm=float(grad_norm),
                        samples_per_s=done / max(elapsed, 1e-9),
                        elapsed_s=elapsed,
                        val_loss=val_loss,
                        val_pos_mm=val_pos_mm,
                        val_place_cm=val_place_cm,
                    )
                    window = []
                    if self.rank == 0:
                        _append_metrics(self.out / METRICS_FILE, record)
                    if on_log is not None:
                        on_log(record)
                if self.step % cfg.save_every == 0 and self.step < cfg.steps and self.rank == 0:
                    self.save()
        except KeyboardInterrupt:
            log.warning("interrupted at step %d: saving a checkpoint to resume from", self.step)
        finally:
            if self.rank == 0 and self.step > start:
                self.save()
        if self.rank == 0:
            plot_metrics(self.out)
        return self.step

    def _validate(self) -> tuple[float, float, float | None, float]:
        """(validation loss, TCP position error in mm, the locator's place error in cm (None:
        no locator), seconds spent) with the EMA weights."""
        assert self.validation is not None
        t = time.perf_counter()
        with swapped(self.params, self.ema):
            loss, pos_mm, place_cm = self.validation.measure(self.model, self.device)
        return loss, pos_mm, place_cm, time.perf_counter() - t


def _distributed() -> tuple[int, int]:
    """(rank, world size), joining the process group when launched by torchrun."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return 0, 1
    import torch.distributed as dist

    if not dist.is_initialized():
        backend = "nccl" if torch.cuda.is_available() else "gloo"
        dist.init_process_group(backend)
        if torch.cuda.is_available():
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    return dist.get_rank(), dist.get_world_size()


def _resumed_cfg(cfg: TrainCfg, saved: dict[str, Any], path: Path) -> TrainCfg:
    """The saved run's config, with the step budget (and nothing else) taken from ``cfg``."""
    old = TrainCfg.from_dict(saved["train"], source=str(path))
    differs = [
        k
        for k in (
            "preset",
            "real",
            "real_episodes",
            "sims",
            "alpha",
            "batch_size",
            "seed",
            "domain_conditioning",
            "only_successful",
            "val_episodes",
        )
        if getattr(cfg, k) != getattr(old, k)
    ]
    if differs:
        raise PolicyError(
            f"{path}: --resume continues the saved run, but these options differ from it: "
            f"{', '.join(differs)} (saved: "
            + ", ".join(f"{k}={getattr(old, k)}" for k in differs)
            + ")"
        )
    return old.replace(steps=cfg.steps)


def _check_fingerprints(config: dict[str, Any], mixture: Mixture, path: Path) -> None:
    """A resumed run must read the data it started on."""
    saved = {d["path"]: d["fingerprint"] for d in config.get("datasets", [])}
    for record in dataset_records(mixture):
        if saved.get(record["path"]) != record["fingerprint"]:
            raise PolicyError(
                f"{path}: dataset {record['path']} changed since the run started (its "
                "fingerprint differs): --resume would continue on other data; start a new run "
                "(--init the old one to keep its weights)"
            )


def _append_metrics(path: Path, record: StepRecord) -> None:
    with path.open("a") as f:
        f.write(json.dumps(record.__dict__) + "\n")


def _truncate_metrics(path: Path, step: int) -> None:
    """Drop logged steps past ``step`` (written after the checkpoint a resume starts from)."""
    if not path.is_file():
        return
    keep = [line for line in path.read_text().splitlines() if json.loads(line)["step"] <= step]
    path.write_text("".join(line + "\n" for line in keep))


def read_metrics(run: Path) -> list[dict[str, Any]]:
    path = Path(run) / METRICS_FILE
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def plot_metrics(run: Path) -> Path | None:
    """``RUN/loss.png``: the training loss (log scale) and the learning rate by step."""
    rows = read_metrics(run)
    if not rows:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = [r["step"] for r in rows]
    fig, (ax_loss, ax_lr) = plt.subplots(2, 1, figsize=(7, 5), sharex=True)
    ax_loss.plot(steps, [r["loss"] for r in rows], color="tab:blue")
    ax_loss.set_yscale("log")
    ax_loss.set_ylabel("flow-matching loss")
    ax_loss.grid(alpha=0.3)
    ax_lr.plot(steps, [r["lr"] for r in rows], color="tab:orange")
    ax_lr.set_ylabel("learning rate")
    ax_lr.set_xlabel("step")
    ax_lr.grid(alpha=0.3)
    fig.suptitle(f"training run {Path(run).name}")
    fig.tight_layout()
    out = Path(run) / LOSS_PLOT
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out
