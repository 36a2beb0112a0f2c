"""What the report embeds besides its own figures: the latent analysis's plots and summary
numbers (``DIR/latent/``), and a few rollout clips (``DIR/rollouts/videos/``), within a size
budget so that the page stays small enough to open and mail.
"""

from __future__ import annotations

import base64
import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from r2s2r.eval.trials import TrialLog, TrialLogError

log = logging.getLogger("r2s2r.eval")

LATENT_DIR = "latent"
LATENT_JSON = "latent.json"
VIDEOS_DIR = "rollouts/videos"
# At most this many summary numbers of a latent.json are shown.
MAX_LATENT_NUMBERS = 40


def _flatten(value: Any, prefix: str, out: list[tuple[str, Any]]) -> None:
    """Collect the scalars of a JSON value under dotted keys; short lists of scalars are
    kept whole, longer lists and deeper structures are left to the file itself."""
    if isinstance(value, dict):
        for key, item in value.items():
            _flatten(item, f"{prefix}.{key}" if prefix else str(key), out)
    elif isinstance(value, list):
        if len(value) <= 8 and all(isinstance(v, int | float | str | bool) for v in value):
            out.append((prefix, value))
    elif isinstance(value, int | float | str | bool) or value is None:
        out.append((prefix, value))


@dataclass(frozen=True)
class Latent:
    """One evaluation's latent analysis, as far as the report shows it."""

    dir: Path
    # (dotted key, value) of latent.json's scalars, None without a latent.json.
    numbers: tuple[tuple[str, Any], ...] | None
    truncated: bool
    # (file name, PNG bytes) of each plot.
    plots: tuple[tuple[str, bytes], ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "dir": str(self.dir),
            "latent_json": str(self.dir / LATENT_JSON) if self.numbers is not None else None,
            "summary": None if self.numbers is None else dict(self.numbers),
            "summary_truncated": self.truncated,
            "plots": [str(self.dir / name) for name, _ in self.plots],
        }


def read_latent(eval_dir: Path) -> Latent | None:
    """``eval_dir/latent/``'s summary and plots; None when the analysis was not run."""
    directory = Path(eval_dir) / LATENT_DIR
    if not directory.is_dir():
        return None
    numbers: tuple[tuple[str, Any], ...] | None = None
    truncated = False
    path = directory / LATENT_JSON
    if path.is_file():
        try:
            data = json.loads(path.read_text())
        except json.JSONDecodeError as err:
            raise TrialLogError(f"{path}: not valid JSON ({err})") from None
        flat: list[tuple[str, Any]] = []
        _flatten(data, "", flat)
        truncated = len(flat) > MAX_LATENT_NUMBERS
        numbers = tuple(flat[:MAX_LATENT_NUMBERS])
    plots = tuple((p.name, p.read_bytes()) for p in sorted(directory.glob("*.png")))
    return Latent(directory, numbers, truncated, plots)


@dataclass(frozen=True)
class Clip:
    """A rollout video the report may embed."""

    label: str
    path: Path
    size: int
    trial: int | None = None
    condition: str | None = None
    outcome: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "policy": self.label,
            "path": str(self.path),
            "bytes": self.size,
            "trial": self.trial,
            "condition": self.condition,
            "outcome": self.outcome,
        }


def candidate_clips(log_: TrialLog, label: str) -> list[Clip]:
    """The videos of one evaluation: those its trials name (a success first, then a
    failure, then the rest), or else every mp4 under rollouts/videos (head views first)."""
    clips: list[Clip] = []
    named = [r for r in log_.records if r.video]
    order = sorted(named, key=lambda r: (r.trial,))
    first_ok = [r for r in order if r.success][:1]
    first_bad = [r for r in order if not r.success][:1]
    rest = [r for r in order if r not in first_ok and r not in first_bad]
    for r in first_ok + first_bad + rest:
        path = log_.dir / str(r.video)
        if path.is_file():
            clips.append(Clip(label, path, path.stat().st_size, r.trial, r.condition, r.outcome))
        else:
            log.warning(
                "%s: trial %d names video %s, which does not exist", log_.path, r.trial, r.video
            )
    if clips or named:
        return clips
    videos = sorted((log_.dir / VIDEOS_DIR).glob("**/*.mp4"))
    videos.sort(key=lambda p: ("head" not in str(p.relative_to(log_.dir)), str(p)))
    return [Clip(label, p, p.stat().st_size) for p in videos]


@dataclass(frozen=True)
class ClipChoice:
    """The clips a page embeds and those it leaves out, with why."""

    embedded: tuple[Clip, ...]
    skipped: tuple[tuple[Clip, str], ...]
    max_clips: int
    max_clip_bytes: int
    max_total_bytes: int

    @property
    def total_bytes(self) -> int:
        return sum(c.size for c in self.embedded)

    def to_json(self) -> dict[str, Any]:
        return {
            "embedded": [c.to_json() for c in self.embedded],
            "not_embedded": [{**c.to_json(), "reason": why} for c, why in self.skipped],
            "embedded_bytes": self.total_bytes,
            "max_clips": self.max_clips,
            "max_clip_bytes": self.max_clip_bytes,
            "max_total_bytes": self.max_total_bytes,
        }


def choose_clips(
    per_policy: Sequence[Sequence[Clip]], max_clips: int, max_clip_bytes: int, max_total_bytes: int
) -> ClipChoice:
    """Take the policies' candidates in turn (one of each policy, then a second of each, ...)
    until ``max_clips`` are chosen, skipping a clip over ``max_clip_bytes`` or one that would
    take the page past ``max_total_bytes``."""
    embedded: list[Clip] = []
    skipped: list[tuple[Clip, str]] = []
    total = 0
    depth = max((len(c) for c in per_policy), default=0)
    for rank in range(depth):
        for clips in per_policy:
            if rank >= len(clips):
                continue
            clip = clips[rank]
            if len(embedded) >= max_clips:
                skipped.append((clip, f"the page embeds at most {max_clips} clips"))
            elif clip.size > max_clip_bytes:
                skipped.append((clip, f"over the {max_clip_bytes} bytes a clip may take"))
            elif total + clip.size > max_total_bytes:
                skipped.append((clip, f"would take the clips past {max_total_bytes} bytes"))
            else:
                embedded.append(clip)
                total += clip.size
    return ClipChoice(tuple(embedded), tuple(skipped), max_clips, max_clip_bytes, max_total_bytes)


def data_uri(data: bytes, mime: str) -> str:
    """``data`` as a data: URI (base64)."""
    return f"data:{mime};base64,{base64.b64encode(data).decode('ascii')}"
