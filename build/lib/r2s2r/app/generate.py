"""Simulated-demonstration generation as a service: one world x behavior job, resumable."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from r2s2r.app.jobs import Cancel, ProgressFn, report
from r2s2r.behavior.generate import GenerateCfg, Generator


@dataclass(frozen=True)
class GenerateResult:
    """A finished job's headline figures; ``summary`` is ``DIR/generation/summary.json``."""

    out: Path
    kept: int
    attempts: int
    success_rate: float
    # Failed attempts by reason (every reason listed, zero where none failed so).
    failures: dict[str, int]
    seconds: float
    summary: dict[str, Any]

    @classmethod
    def of(cls, out: Path, summary: dict[str, Any]) -> GenerateResult:
        return cls(
            out,
            int(summary["kept"]),
            int(summary["attempts"]),
            float(summary["success_rate"]),
            dict(summary["failures"]),
            float(summary["seconds"]),
            summary,
        )


def generate(
    cfg: GenerateCfg, progress: ProgressFn | None = None, cancel: Cancel | None = None
) -> GenerateResult:
    """Attempt until ``cfg.episodes`` are kept (or the attempts run out). Cancelling stops
    after the attempt in progress; everything logged and kept so far stays, and rerunning
    the same request resumes the job."""
    gen = Generator(cfg)
    counts = {"kept": 0, "attempts": 0}

    def on_attempt(record: dict[str, Any]) -> None:
        counts["attempts"] += 1
        counts["kept"] += int(record["kept"])
        rate = counts["kept"] / counts["attempts"]
        text = f"attempted={counts['attempts']}, rate={rate:.0%}"
        report(progress, "generate", counts["kept"], cfg.episodes, text)
        if cancel is not None:
            cancel.check("generation")

    try:
        if cancel is not None:
            cancel.check("generation")
        summary = gen.run(on_attempt)
    finally:
        gen.close()
    return GenerateResult.of(cfg.out, summary)
