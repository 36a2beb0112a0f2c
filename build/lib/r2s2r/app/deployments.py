"""Reading a recorded deployment back (``r2s2r deploy --record DIR``): per episode, how it
ended, its chunk timing (every chunk: when it was asked for and arrived, its delay and
latency, whether it ran) and its safety events."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from r2s2r.app.deploy import SESSIONS_FILE
from r2s2r.data.config import DatasetError


class DeploymentError(DatasetError):
    """A folder that is not a recorded deployment, or lacks an episode's records."""


@dataclass(frozen=True)
class DeployedChunk:
    """One chunk the runtime asked for: when (control step), when it arrived (None: never),
    the delay it was asked with, the inference latency, and whether it ran (else why not)."""

    index: int
    requested_step: int
    arrived_step: int | None
    delay: int
    latency_ms: float | None
    accepted: bool
    reason: str


@dataclass(frozen=True)
class DeployedEpisode:
    """One recorded episode: how it ended, its timing figures (``EpisodeLog.timing``), every
    chunk, the supervisor's events (``stamp``, ``device``, ``kind``, ``detail``) and the
    runtime's messages."""

    episode: int
    frames: int
    task: str
    object: str
    arm: str
    outcome: str
    success: bool
    ended_by: str
    timing: dict[str, Any]
    chunks: tuple[DeployedChunk, ...]
    safety_events: tuple[dict[str, Any], ...]
    messages: tuple[str, ...]


@dataclass(frozen=True)
class DeploymentReport:
    """What a recorded deployment ran: its sessions (one per ``deploy`` run: the request and
    the policy's metadata, as recorded) and its episodes."""

    path: str
    sessions: tuple[dict[str, Any], ...]
    episodes: tuple[DeployedEpisode, ...]

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _chunks(npz: Path, rejected: dict[int, str]) -> tuple[DeployedChunk, ...]:
    with np.load(npz) as z:
        asked, arrived = z["chunk_requested_step"], z["chunk_arrived_step"]
        latency, delay, accepted = z["chunk_latency_ms"], z["chunk_delay"], z["chunk_accepted"]
    return tuple(
        DeployedChunk(
            index=i,
            requested_step=int(asked[i]),
            arrived_step=None if arrived[i] < 0 else int(arrived[i]),
            delay=int(delay[i]),
            latency_ms=None if np.isnan(latency[i]) else float(latency[i]),
            accepted=bool(accepted[i]),
            reason=rejected.get(i, ""),
        )
        for i in range(len(asked))
    )


def _sessions(root: Path) -> tuple[dict[str, Any], ...]:
    from r2s2r.runtime.record import DEPLOY_DIR

    path = root / DEPLOY_DIR / SESSIONS_FILE
    if not path.is_file():
        return ()
    out = []
    for n, line in enumerate(path.read_text().splitlines(), 1):
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError as err:
            raise DeploymentError(f"{path}: line {n} is not JSON ({err})") from None
    return tuple(out)


def inspect_deployment(root: str | Path, episode: int | None = None) -> DeploymentReport:
    """What the deployment recorded at ``root`` ran: its sessions, and per episode (all, or
    ``episode``) the outcome, timing, chunks, safety events and messages."""
    from r2s2r.data import Dataset
    from r2s2r.runtime.record import sidecar_paths

    root = Path(root)
    with Dataset(root) as ds:
        rows = ds.episodes
    if episode is not None and not 0 <= episode < len(rows):
        raise DeploymentError(f"{root}: episode {episode} out of range (it has {len(rows)})")
    chosen = range(len(rows)) if episode is None else [episode]
    episodes = []
    for i in chosen:
        npz, summary_path = sidecar_paths(root, i)
        if not summary_path.is_file() or not npz.is_file():
            raise DeploymentError(
                f"{root}: episode {i} has no deployment records ({summary_path.name} and "
                f"{npz.name} in {summary_path.parent}); is this a dataset written by "
                "r2s2r deploy --record?"
            )
        summary = json.loads(summary_path.read_text())
        rejected = {int(c["index"]): str(c["reason"]) for c in summary["rejected_chunks"]}
        row = rows[i]
        episodes.append(
            DeployedEpisode(
                episode=i,
                frames=int(row["length"]),
                task=row["tasks"][0] if row["tasks"] else "",
                object=str(summary["object"]),
                arm=str(summary["arm"]),
                outcome=str(summary["outcome"]),
                success=bool(summary["success"]),
                ended_by=str(summary["ended_by"]),
                timing=dict(summary["timing"]),
                chunks=_chunks(npz, rejected),
                safety_events=tuple(summary["safety_events"]),
                messages=tuple(summary["messages"]),
            )
        )
    return DeploymentReport(str(root), _sessions(root), tuple(episodes))


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def describe(report: DeploymentReport, chunks: bool) -> list[str]:
    """``inspect_deployment``'s report as lines of text (with every chunk where ``chunks``)."""
    lines = [f"{report.path}: {len(report.episodes)} episode(s)"]
    for s in report.sessions:
        req = s["request"]
        what = req.get("policy") or f"server {req.get('server')}"
        lines.append(
            f"session from episode {s['first_episode']}: {what} on {req['rig']}, "
            f"{s['execution']} execution, faults {req.get('faults') or 'none'}"
        )
    for ep in report.episodes:
        t = ep.timing
        lines.append(
            f"episode {ep.episode}: {ep.object} ({ep.arm} arm) {ep.outcome} "
            f"(ended by {ep.ended_by}), {ep.frames} frames"
        )
        lines.append(
            f"  periods p50 {_ms(t['period_p50_ms'])} p99 {_ms(t['period_p99_ms'])} max "
            f"{_ms(t['period_max_ms'])} ms; loop overhead {_ms(t['overhead_ms'])} ms; "
            f"inference p50 {_ms(t['infer_ms_p50'])} ms; {t['chunks']} chunks "
            f"({t['rejected_chunks']} rejected); held {t['stalls']} periods"
        )
        if chunks:
            lines.append("  chunk  asked  arrived  delay  latency_ms  ran")
            for c in ep.chunks:
                arrived = "-" if c.arrived_step is None else str(c.arrived_step)
                ran = "yes" if c.accepted else f"no: {c.reason or 'never arrived'}"
                lines.append(
                    f"  {c.index:5d}  {c.requested_step:5d}  {arrived:>7}  "
                    f"{c.delay:5d}  {_ms(c.latency_ms):>10}  {ran}"
                )
        for e in ep.safety_events:
            lines.append(f"  safety {e['stamp']:7.2f} s {e['device']} {e['kind']}: {e['detail']}")
        for m in ep.messages:
            lines.append(f"  runtime: {m}")
    return lines
