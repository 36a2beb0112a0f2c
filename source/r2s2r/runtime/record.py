"""Recording what the runtime ran: each episode as a dataset episode, plus its chunks.

``EpisodeRecorder`` is a step hook of ``Runtime.run_episode``: every period it writes the
camera views, the proprio state and the executed action (where the arms held, the pose they
held) as a frame of a r2s2r/LeRobot-v3 dataset, so a deployment replays and trains like a
recording. What a dataset frame cannot hold goes next to it, per episode, in
``deploy/episode_NNNNNN.npz`` (every chunk as inferred, when it was asked for and arrived,
its latency, and each period's timing) and ``deploy/episode_NNNNNN.json`` (outcome, safety
events, messages, timing summary).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from r2s2r.data import CameraCfg, DatasetCfg, DatasetWriter
from r2s2r.rig.interfaces import Rig
from r2s2r.runtime.episode import EpisodeLog, StepLog
from r2s2r.sim.contract import Contract

DEPLOY_DIR = "deploy"


def sidecar_paths(root: Path, episode_index: int) -> tuple[Path, Path]:
    """(the chunks .npz, the summary .json) of episode ``episode_index`` of dataset ``root``."""
    stem = root / DEPLOY_DIR / f"episode_{episode_index:06d}"
    return stem.with_suffix(".npz"), stem.with_suffix(".json")


def deploy_dataset_cfg(rig: Rig, cameras: tuple[str, ...]) -> DatasetCfg:
    """A dataset config for recording ``cameras`` of ``rig`` (at the size they deliver)."""
    cams = []
    for name in cameras:
        image = rig.cameras[name].read().image
        cams.append(CameraCfg(name=name, height=image.shape[0], width=image.shape[1]))
    return DatasetCfg(cameras=tuple(cams), embodiment=rig.embodiment)


class EpisodeRecorder:
    """Writes the runtime's episodes into ``writer`` (views of its cameras read from
    ``rig``); pass ``recorder.on_step`` to ``run_episode`` and call ``save`` after it."""

    def __init__(self, rig: Rig, writer: DatasetWriter) -> None:
        self.rig, self.writer = rig, writer
        self.contract: Contract = writer.contract
        self.cameras = self.contract.cameras

    def on_step(self, step: StepLog, observation: dict[str, Any] | None) -> None:
        views = (observation or {}).get("images") or {}
        images = {
            c: views[c] if c in views else self.rig.cameras[c].read().image for c in self.cameras
        }
        action = step.action
        if action is None:
            action = self._held(step.state)
        self.writer.add_frame(images, step.state, action, timestamp=step.step / self.writer.cfg.fps)

    def _held(self, state: np.ndarray) -> np.ndarray:
        """The action that holds where the arms are: their TCP poses, the hands' joints."""
        parts = self.contract.split_state(state)
        return self.contract.join_action(parts["tcp_pose"], parts["hand_joints"])

    def discard(self) -> None:
        self.writer.discard_episode()

    def save(self, episode: EpisodeLog, meta: dict[str, Any] | None = None) -> int:
        """Commit the episode's frames and write its sidecar files; its episode index."""
        return save_episode_log(self.writer, episode, meta)


def save_episode_log(
    writer: DatasetWriter, episode: EpisodeLog, meta: dict[str, Any] | None = None
) -> int:
    """Commit the frames ``writer`` holds as ``episode`` and write its sidecar files; its
    episode index."""
    if not episode.steps:
        writer.discard_episode()
        raise ValueError("the episode ran no step; nothing to save")
    contract = writer.contract
    start = episode.start
    index = writer.save_episode(
        start.instruction,
        episode.success,
        {
            "belt_speed": start.belt_speed,
            "object_ids": [start.object_name],
            "embodiment_id": contract.embodiment.id,
            "outcome": episode.outcome,
            **(meta or {}),
        },
    )
    npz, summary = sidecar_paths(writer.root, index)
    npz.parent.mkdir(parents=True, exist_ok=True)
    _atomic_npz(npz, chunk_arrays(episode, contract.action_dim))
    _atomic_text(summary, json.dumps(episode_summary(episode), indent=1))
    return index


def chunk_arrays(episode: EpisodeLog, action_dim: int) -> dict[str, np.ndarray]:
    """The episode's chunks and timing as arrays (NaN / -1 where a value is missing)."""
    chunks = episode.chunks
    horizon = max((len(c.actions) for c in chunks if c.actions is not None), default=0)
    actions = np.full((len(chunks), horizon, action_dim), np.nan)
    for i, c in enumerate(chunks):
        if c.actions is not None and c.actions.shape[1:] == (action_dim,):
            actions[i, : len(c.actions)] = c.actions
    steps = episode.steps
    return {
        "chunk_actions": actions,
        "chunk_requested_step": np.array([c.requested_step for c in chunks], dtype=np.int64),
        "chunk_arrived_step": np.array(
            [-1 if c.arrived_step is None else c.arrived_step for c in chunks], dtype=np.int64
        ),
        "chunk_latency_ms": np.array(
            [np.nan if c.latency_ms is None else c.latency_ms for c in chunks]
        ),
        "chunk_delay": np.array([c.delay for c in chunks], dtype=np.int64),
        "chunk_accepted": np.array([c.accepted for c in chunks], dtype=bool),
        "step_chunk": np.array([-1 if s.chunk is None else s.chunk for s in steps], dtype=np.int64),
        "step_held": np.array([s.action is None for s in steps], dtype=bool),
        "step_period_ms": np.array([s.period_ms for s in steps]),
        "step_overhead_ms": np.array([s.overhead_ms for s in steps]),
    }


def episode_summary(episode: EpisodeLog) -> dict[str, Any]:
    """What an episode's JSON sidecar holds."""
    return {
        "object": episode.start.object_name,
        "arm": episode.start.arm,
        "outcome": episode.outcome,
        "success": episode.success,
        "ended_by": episode.ended_by,
        "timing": episode.timing(),
        "rejected_chunks": [
            {"index": c.index, "step": c.arrived_step, "reason": c.reason}
            for c in episode.chunks
            if not c.accepted and c.reason
        ],
        "safety_events": [
            {"stamp": e.stamp, "device": e.device, "kind": e.kind, "detail": e.detail}
            for e in episode.events
        ],
        "messages": list(episode.messages),
        "progress": dict(episode.progress),
    }


def _atomic_npz(path: Path, arrays: dict[str, np.ndarray]) -> None:
    tmp = path.with_name(path.name + ".partial.npz")
    np.savez_compressed(tmp, **arrays)  # type: ignore[arg-type]
    os.replace(tmp, path)


def _atomic_text(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".partial")
    tmp.write_text(text)
    os.replace(tmp, path)
