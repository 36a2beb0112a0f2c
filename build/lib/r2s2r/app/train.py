"""Training as a service: one run folder, resumable, with progress and cancellation."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from r2s2r.app.jobs import Cancel, ProgressFn, report
from r2s2r.policy.train import LOSS_PLOT, StepRecord, TrainCfg, Trainer


@dataclass(frozen=True)
class TrainResult:
    """A finished (or stopped) run: where it is and how far it came."""

    out: Path
    step: int
    steps: int
    # The last logged step's figures (None when nothing was logged).
    last: StepRecord | None
    loss_plot: Path | None

    @property
    def finished(self) -> bool:
        return self.step >= self.steps


def train(
    cfg: TrainCfg,
    out: Path,
    resume: bool = False,
    progress: ProgressFn | None = None,
    cancel: Cancel | None = None,
) -> TrainResult:
    """Train ``cfg`` into ``out``. Cancelling stops after the step in progress and saves a
    checkpoint; ``resume=True`` continues from the newest one."""
    trainer = Trainer(cfg, out, resume=resume)
    last: list[StepRecord] = []
    report(progress, "train", trainer.step, trainer.cfg.steps)

    def on_log(record: StepRecord) -> None:
        last[:] = [record]
        text = f"loss={record.loss:.4g}, lr={record.lr:.2e}, samples/s={record.samples_per_s:.1f}"
        report(progress, "train", record.step, trainer.cfg.steps, text)

    stop = (lambda: cancel.cancelled) if cancel is not None else None
    step = trainer.fit(on_log, stop)
    # ``fit`` drew the loss curve when it stopped.
    curve = Path(out) / LOSS_PLOT
    plot = curve if curve.is_file() else None
    return TrainResult(Path(out), step, trainer.cfg.steps, last[0] if last else None, plot)
