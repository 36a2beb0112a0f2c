"""Training in a process of its own (``r2s2r train``), for a GUI: a crash of the run does not
take the GUI down, and the run goes on when the GUI closes. ``TrainingProcess`` starts it with
its output in ``OUT/train.log``, stops it the way Ctrl-C does (a checkpoint is saved, and the
same launch with ``resume`` continues it); ``read_metrics`` reads the run's loss and learning
rate from ``OUT/metrics.jsonl`` while it grows. With ``processes`` > 1 the run is data-parallel
under ``torch.distributed.run`` (one process per GPU, or gloo processes on a CPU), as the
study's training stage runs it when ``training.processes`` asks."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import model_validator

from r2s2r.spec import Spec

if TYPE_CHECKING:
    from r2s2r.app.jobs import Cancel, ProgressFn

LOG_FILE = "train.log"


class TrainLaunch(Spec):
    """The options of one ``r2s2r train`` run (the CLI's, by the same names)."""

    out: Path
    preset: str = "tiny"
    real: Path | None = None
    # Train on the real dataset's first N episodes (None: all).
    real_episodes: int | None = None
    # Train on the successful real episodes only; hold the last N out for validation.
    only_successful: bool = False
    val_episodes: int = 0
    val_every: int = 500
    sims: tuple[Path, ...] = ()
    # Share of each batch from real data (None: the CLI's default).
    alpha: float | None = None
    steps: int = 30_000
    batch_size: int = 32
    lr: float = 1e-4
    # The cosine's end (None: the CLI's default).
    final_lr: float | None = None
    warmup: int = 1000
    workers: int = 2
    log_every: int = 10
    save_every: int = 1000
    # Checkpoints kept (the newest ones).
    keep: int = 2
    device: str = "auto"
    seed: int = 0
    augment: bool = True
    # Fine-tune from this checkpoint or run; the decoded-frame cache.
    init: Path | None = None
    cache_dir: Path | None = None
    # Data-parallel processes on this machine (torch.distributed.run --nproc-per-node); each
    # takes batch_size samples per step.
    processes: int = 1
    resume: bool = False

    @model_validator(mode="after")
    def _check(self) -> TrainLaunch:
        if self.real is None and not self.sims:
            raise ValueError("choose a real dataset (--real) or at least one simulated one (--sim)")
        if min(self.steps, self.batch_size, self.log_every, self.processes) < 1:
            raise ValueError("steps, batch_size, log_every and processes must be at least 1")
        if self.alpha is not None and not 0.0 <= self.alpha <= 1.0:
            raise ValueError(f"alpha must lie in [0, 1], got {self.alpha}")
        return self

    def command(self) -> list[str]:
        """The ``r2s2r train`` command line of this launch (this interpreter's), under
        ``torch.distributed.run`` when it has more than one process."""
        cmd = [sys.executable, "-m"]
        if self.processes > 1:
            cmd += ["torch.distributed.run", "--standalone", "--nproc-per-node"]
            cmd += [str(self.processes), "-m"]
        cmd += ["r2s2r", "train", "--out", str(self.out)]
        cmd += ["--preset", self.preset, "--steps", str(self.steps)]
        cmd += ["--batch-size", str(self.batch_size), "--lr", str(self.lr)]
        cmd += ["--warmup", str(self.warmup), "--workers", str(self.workers)]
        cmd += ["--log-every", str(self.log_every), "--save-every", str(self.save_every)]
        cmd += ["--keep", str(self.keep)]
        cmd += ["--device", self.device, "--seed", str(self.seed)]
        if self.real is not None:
            cmd += ["--real", str(self.real)]
        if self.real_episodes is not None:
            cmd += ["--real-episodes", str(self.real_episodes)]
        if self.only_successful:
            cmd.append("--only-successful")
        if self.val_episodes:
            cmd += ["--val-episodes", str(self.val_episodes), "--val-every", str(self.val_every)]
        for sim in self.sims:
            cmd += ["--sim", str(sim)]
        if self.alpha is not None:
            cmd += ["--alpha", str(self.alpha)]
        if self.final_lr is not None:
            cmd += ["--final-lr", str(self.final_lr)]
        if not self.augment:
            cmd.append("--no-augment")
        if self.init is not None:
            cmd += ["--init", str(self.init)]
        if self.cache_dir is not None:
            cmd += ["--cache-dir", str(self.cache_dir)]
        if self.resume:
            cmd.append("--resume")
        return cmd


class TrainingProcess:
    """One ``r2s2r train`` process (see the module)."""

    def __init__(self, launch: TrainLaunch, own_session: bool = True) -> None:
        """``own_session``: out of reach of its parent's Ctrl-C and exit (a GUI's run); False
        keeps it in its parent's process group, so that what stops the parent stops it."""
        self.launch = launch
        self.out = Path(launch.out)
        self.out.mkdir(parents=True, exist_ok=True)
        self.log_path = self.out / LOG_FILE
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                launch.command(),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=own_session,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )

    @property
    def pid(self) -> int:
        return self.proc.pid

    def poll(self) -> int | None:
        """The exit code, or None while it runs."""
        return self.proc.poll()

    def stop(self, timeout: float = 60.0) -> int:
        """Stop as Ctrl-C does (the run saves a checkpoint), then wait; killed if it does not
        end within ``timeout``. Returns the exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return int(self.proc.returncode)

    def wait(self, timeout: float | None = None) -> int:
        return int(self.proc.wait(timeout))

    def log_tail(self, lines: int = 20) -> str:
        """The last ``lines`` lines of the run's output."""
        if not self.log_path.is_file():
            return ""
        text = self.log_path.read_text(errors="replace").replace("\r", "\n")
        return "\n".join([s for s in text.splitlines() if s.strip()][-lines:])

    def failure(self) -> str | None:
        """Why the run failed, as the CLI said it (its last error line), or None."""
        code = self.proc.poll()
        if code is None or code == 0:
            return None
        tail = self.log_tail(40).splitlines()
        said = [s for s in tail if s.lower().startswith(("error", "usage")) or "Error" in s]
        return f"r2s2r train exited with {code}: " + (said[-1] if said else "\n".join(tail[-3:]))


def read_metrics(out: str | Path) -> list[dict[str, float]]:
    """Every logged step of the run at ``out`` (``step``, ``loss``, ``lr``, ...), oldest
    first; a line still being written is skipped, and so are the figures a step did not log
    (``val_loss`` is null between validations)."""
    path = Path(out) / "metrics.jsonl"
    if not path.is_file():
        return []
    rows = []
    for line in path.read_text().splitlines():
        try:
            rows.append({k: float(v) for k, v in json.loads(line).items() if v is not None})
        except (json.JSONDecodeError, TypeError, ValueError):
            continue
    return rows


def split_batch(batch_size: int, processes: int, what: str = "batch size") -> int:
    """Each process's share of a batch of ``batch_size`` (a ``RequestError`` where it does
    not split evenly)."""
    from r2s2r.app.jobs import RequestError

    if batch_size % processes:
        raise RequestError(f"{what} {batch_size} does not split over {processes} processes")
    return batch_size // processes


def train_to_end(
    launch: TrainLaunch,
    progress: ProgressFn | None = None,
    cancel: Cancel | None = None,
    poll_s: float = 2.0,
) -> None:
    """Run ``launch`` in its own process(es) until it ends, reporting its steps from the
    run's metrics as stage "train"; a ``RequestError`` where it fails, or where ``cancel``
    stops it (as Ctrl-C does: it saves a checkpoint, and the same launch with ``resume``
    continues)."""
    from r2s2r.app.jobs import RequestError, report

    proc = TrainingProcess(launch, own_session=False)
    try:
        while proc.poll() is None:
            if cancel is not None and cancel.cancelled:
                proc.stop()
                raise RequestError("training cancelled; rerun to continue")
            rows = read_metrics(launch.out)
            if rows:
                last = rows[-1]
                text = f"loss={last['loss']:.4g}, samples/s={last['samples_per_s']:.0f}"
                report(progress, "train", int(last["step"]), launch.steps, text)
            time.sleep(poll_s)
    finally:
        if proc.poll() is None:
            proc.stop()
    if proc.wait() != 0:
        raise RequestError(f"training failed: {proc.failure() or proc.log_tail()}")
