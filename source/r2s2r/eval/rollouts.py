"""An evaluation's recorded trials (``DIR/rollouts/``) and its log lines.

``Rollouts`` records the trials the video choice keeps into one r2s2r/LeRobot-v3 dataset,
one episode per trial (``runtime.record.EpisodeRecorder``: the policy's camera views, or
the head camera for a policy that reads none; the episode meta names the trial, its
condition and seed), and says where each trial's video is. A trial is saved there before
its line is appended to ``trials.jsonl``; ``recover`` logs a trial whose line a crash kept
from the log, from its recording.
"""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from r2s2r.data.config import IMAGE_PREFIX, FilesCfg
from r2s2r.eval.protocol import Trial
from r2s2r.eval.trials import TRIALS_JSONL, TrialRecord, append_trial
from r2s2r.rig.interfaces import DEPTH_CAMERA, Rig
from r2s2r.runtime import EpisodeLog
from r2s2r.runtime.loop import CONTROL_HZ
from r2s2r.sim.contract import Contract

log = logging.getLogger("r2s2r.eval")
ROLLOUTS = "rollouts"


def recording_cfg(rig: Rig, contract: Contract) -> Any:
    """The dataset config of a trial's recording: the policy's camera views the rig has, or
    the head camera for a policy that reads none."""
    from r2s2r.runtime.record import deploy_dataset_cfg

    cameras = contract.cameras or (DEPTH_CAMERA,)
    return deploy_dataset_cfg(rig, tuple(c for c in cameras if c in rig.cameras))


def trial_meta(trial: Trial) -> dict[str, Any]:
    """A recorded trial's episode meta."""
    return {"trial": trial.index, "condition": trial.condition, "seed": trial.seed}


class Rollouts:
    """``DIR/rollouts``: trials whose index is a multiple of ``stride`` are recorded
    (``stride`` None: none is)."""

    def __init__(self, out: Path, stride: int | None) -> None:
        self.out, self.stride = Path(out), stride
        self.root = self.out / ROLLOUTS
        self.writer: Any = None

    def records(self, trial: Trial) -> bool:
        """Whether the video choice records ``trial``."""
        return self.stride is not None and trial.index % self.stride == 0

    def recorder(self, trial: Trial, rig: Rig, contract: Contract) -> Any:
        """The ``EpisodeRecorder`` of a trial that is recorded, else None."""
        if not self.records(trial):
            return None
        from r2s2r.runtime.record import EpisodeRecorder

        return EpisodeRecorder(rig, self.open_writer(recording_cfg(rig, contract)))

    def open_writer(self, cfg: Any) -> Any:
        """The recordings' ``DatasetWriter`` (made on first use from the dataset config
        ``cfg``), one file per trial and camera: eval.json names each trial's clip."""
        if self.writer is None:
            from r2s2r.data import DatasetWriter

            files = FilesCfg(episodes=1)
            self.writer = DatasetWriter(self.root, cfg.replace(files=files))
        return self.writer

    def video_of(self, cameras: list[str], index: int) -> str:
        """Recorded episode ``index``'s clip, relative to DIR."""
        return self._video(cameras, lambda key: self.writer.video_file(index, key))

    def save(self, recorder: Any, trial: Trial, episode: EpisodeLog) -> str | None:
        """Commit the trial's recording; the path of its video relative to DIR (None when
        it is not recorded, or ran no step)."""
        if recorder is None:
            return None
        if not episode.steps:
            recorder.discard()
            return None
        return self.video_of(list(recorder.cameras), recorder.save(episode, trial_meta(trial)))

    def _video(self, cameras: list[str], file_of: Callable[[str], Path]) -> str:
        """The trial's clip (``file_of`` the video file of a camera key), relative to DIR."""
        camera = DEPTH_CAMERA if DEPTH_CAMERA in cameras else cameras[0]
        return file_of(IMAGE_PREFIX + camera).relative_to(self.out).as_posix()

    def recover(
        self, planned: tuple[Trial, ...], logged: dict[int, TrialRecord]
    ) -> list[TrialRecord]:
        """Append to the log the planned trials that are recorded but not in ``logged``
        (a crash came between saving a trial and logging it); the records appended."""
        if not (self.root / "meta" / "info.json").is_file():
            return []
        from r2s2r.data import Dataset, DatasetWriter
        from r2s2r.runtime.record import sidecar_paths

        # Reopening and closing the writer joins a trial saved just before a crash into its
        # own file (one per trial), where the log will find its clip.
        DatasetWriter(self.root).close()
        ds = Dataset(self.root)
        cameras = [c.name for c in ds.cfg.cameras] if ds.cfg is not None else []
        by_index = {t.index: t for t in planned}
        found = []
        for e in ds.episodes:
            trial = by_index.get(e["trial"]) if e.get("trial") is not None else None
            if trial is None or trial.index in logged or not cameras:
                continue
            index = int(e["episode_index"])
            summary_path = sidecar_paths(self.root, index)[1]
            if not summary_path.is_file():
                log.warning("%s: trial %d has no summary; it runs again", self.root, trial.index)
                continue
            summary = json.loads(summary_path.read_text())
            record = make_record(
                trial,
                str(summary["object"]),
                float(e["belt_speed"]),
                str(summary["outcome"]),
                bool(summary["success"]),
                int(summary["timing"]["steps"]),
                str(summary["ended_by"]),
                len(summary["safety_events"]),
                summary["timing"]["infer_ms_p50"],
                self._video(cameras, functools.partial(ds.video_file, index)),
                chunk_counts(summary["timing"]),
                summary.get("progress"),
            )
            append_trial(self.out / TRIALS_JSONL, record)
            log.warning("trial %d was recorded but not logged; logged now", trial.index)
            found.append(record)
            logged[trial.index] = record
        return found

    def close(self) -> None:
        """Drop a trial being recorded and release the encoders."""
        if self.writer is not None:
            self.writer.close()
            self.writer = None


def trial_record(trial: Trial, episode: EpisodeLog, video: str | None) -> TrialRecord:
    """The log line of a finished trial."""
    timing = episode.timing()
    return make_record(
        trial,
        episode.start.object_name,
        float(episode.start.belt_speed),
        episode.outcome,
        bool(episode.success),
        len(episode.steps),
        episode.ended_by,
        len(episode.events),
        timing["infer_ms_p50"],
        video,
        chunk_counts(timing),
        episode.progress,
    )


def chunk_counts(timing: dict[str, Any]) -> tuple[int, int] | None:
    """(chunks, rejected chunks) of an episode's timing summary; None where the policy
    produced no chunk (a scripted operator drives without them)."""
    chunks = int(timing.get("chunks") or 0)
    return (chunks, int(timing.get("rejected_chunks") or 0)) if chunks else None


def make_record(
    trial: Trial,
    obj: str,
    belt_speed: float,
    outcome: str,
    success: bool,
    steps: int,
    ended_by: str,
    safety_events: int,
    infer_ms_p50: float | None,
    video: str | None,
    chunks: tuple[int, int] | None = None,
    progress: dict[str, Any] | None = None,
) -> TrialRecord:
    """A trial's log line from its parts (its duration: its control periods at 50 Hz);
    ``chunks`` (made, rejected) and ``progress`` (the funnel's ``stage`` and
    ``min_hand_distance_m``) where they were measured."""
    progress = progress or {}
    return TrialRecord(
        trial=trial.index,
        seed=trial.seed,
        condition=trial.condition,
        object=obj,
        belt_speed=belt_speed,
        outcome=outcome,
        success=success,
        duration_s=steps / CONTROL_HZ,
        steps=steps,
        ended_by=ended_by,
        safety_events=safety_events,
        infer_ms_p50=infer_ms_p50,
        video=video,
        chunks=chunks[0] if chunks else None,
        rejected_chunks=chunks[1] if chunks else None,
        stage=progress.get("stage"),
        min_hand_distance_m=progress.get("min_hand_distance_m"),
    )
