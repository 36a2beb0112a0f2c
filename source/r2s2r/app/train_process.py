"""Training in a process of its own (``r2s2r train``), for a GUI: a crash of the run does not
take the GUI down, and the run goes on when the GUI closes. ``TrainingProcess`` starts it with
its output in ``OUT/train.log``, stops it the way Ctrl-C does (a checkpoint is saved, and the
same launch with ``resume`` continues it); ``read_metrics`` reads the run's loss and learning
rate from ``OUT/metrics.jsonl`` while it grows."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from pydantic import model_validator

from r2s2r.spec import Spec

LOG_FILE = "train.log"


class TrainLaunch(Spec):
    """The options of one ``r2s2r train`` run (the CLI's, by the same names)."""

    out: Path
    preset: str = "tiny"
    real: Path | None = None
    sims: tuple[Path, ...] = ()
    # Share of each batch from real data (None: the CLI's default).
    alpha: float | None = None
    steps: int = 30_000
    batch_size: int = 32
    lr: float = 1e-4
    warmup: int = 1000
    workers: int = 2
    log_every: int = 10
    save_every: int = 1000
    device: str = "auto"
    seed: int = 0
    resume: bool = False

    @model_validator(mode="after")
    def _check(self) -> TrainLaunch:
        if self.real is None and not self.sims:
            raise ValueError("choose a real dataset (--real) or at least one simulated one (--sim)")
        if self.steps < 1 or self.batch_size < 1 or self.log_every < 1:
            raise ValueError("steps, batch_size and log_every must be at least 1")
        if self.alpha is not None and not 0.0 <= self.alpha <= 1.0:
            raise ValueError(f"alpha must lie in [0, 1], got {self.alpha}")
        return self

    def command(self) -> list[str]:
        """The ``r2s2r train`` command line of this launch (this interpreter's)."""
        cmd = [sys.executable, "-m", "r2s2r", "train", "--out", str(self.out)]
        cmd += ["--preset", self.preset, "--steps", str(self.steps)]
        cmd += ["--batch-size", str(self.batch_size), "--lr", str(self.lr)]
        cmd += ["--warmup", str(self.warmup), "--workers", str(self.workers)]
        cmd += ["--log-every", str(self.log_every), "--save-every", str(self.save_every)]
        cmd += ["--device", self.device, "--seed", str(self.seed)]
        if self.real is not None:
            cmd += ["--real", str(self.real)]
        for sim in self.sims:
            cmd += ["--sim", str(sim)]
        if self.alpha is not None:
            cmd += ["--alpha", str(self.alpha)]
        if self.resume:
            cmd.append("--resume")
        return cmd


class TrainingProcess:
    """One ``r2s2r train`` process (see the module)."""

    def __init__(self, launch: TrainLaunch) -> None:
        self.launch = launch
        self.out = Path(launch.out)
        self.out.mkdir(parents=True, exist_ok=True)
        self.log_path = self.out / LOG_FILE
        with self.log_path.open("ab") as log:
            # A session of its own: the GUI's Ctrl-C or exit does not reach the run.
            self.proc = subprocess.Popen(
                launch.command(),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
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
    first; a line still being written is skipped."""
    path = Path(out) / "metrics.jsonl"
    if not path.is_file():
        return []
    rows = []
    for line in path.read_text().splitlines():
        try:
            rows.append({k: float(v) for k, v in json.loads(line).items()})
        except (json.JSONDecodeError, TypeError, ValueError):
            continue
    return rows
