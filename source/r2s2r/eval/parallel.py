"""Trials on the twin in worker processes or as Ray tasks (``r2s2r.scaleout``).

A trial on the twin in lockstep is a function of its seed, its condition and the policy, so
trials can run anywhere, in any order: each worker opens its own policy (a run's checkpoint
loads in the worker, with one torch thread) and its own twin from a ``TwinTrials``, plays
the trial and hands back its episode and, where the video choice records it, its frames.
The evaluation's process logs them in trial order, as it logs a sequential evaluation:
each recorded trial is written into ``DIR/rollouts/`` first, then its line is appended to
``DIR/trials.jsonl``, so a stopped evaluation resumes as a sequential one does.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from r2s2r.data import DatasetCfg
from r2s2r.eval.protocol import Trial, trial_list
from r2s2r.eval.rollouts import Rollouts, recording_cfg, trial_meta
from r2s2r.eval.trials import TrialRecord
from r2s2r.rig.interfaces import Rig
from r2s2r.runtime import EpisodeLog
from r2s2r.scaleout import Job, ScaleoutError, in_order, run_tasks
from r2s2r.sim.contract import Contract

log = logging.getLogger("r2s2r.eval")


@dataclass(frozen=True)
class TwinTrials:
    """How a worker opens the evaluation's policy (as ``open_policy`` does) and its twin
    rigs (as ``TwinRigs`` does): plain, picklable values."""

    policy: str | None = None
    server: str | None = None
    token: str | None = None
    device: str = "auto"
    image_size: int = 256
    cell: int | None = None
    noise_seed: int | None = None


@dataclass
class Played:
    """A trial played in a worker: its episode and the frames it recorded (none where the
    video choice does not record it), with the config of the dataset they go into."""

    trial: int
    episode: EpisodeLog
    cfg: DatasetCfg | None = None
    frames: list[tuple[dict[str, np.ndarray], np.ndarray, np.ndarray, float | None]] = field(
        default_factory=list
    )


class _Capture:
    """The part of a ``DatasetWriter`` an ``EpisodeRecorder`` writes to, keeping the frames."""

    def __init__(self, cfg: DatasetCfg) -> None:
        self.cfg, self.contract = cfg, cfg.contract
        self.frames: list[Any] = []

    def add_frame(
        self,
        images: dict[str, np.ndarray],
        state: np.ndarray,
        action: np.ndarray,
        timestamp: float | None = None,
    ) -> None:
        self.frames.append(({c: np.array(v) for c, v in images.items()}, state, action, timestamp))

    def discard_episode(self) -> None:
        self.frames.clear()


class _CaptureRollouts(Rollouts):
    """``Rollouts`` in a worker: the recorded trials' frames are kept, not written."""

    def __init__(self, stride: int | None) -> None:
        super().__init__(Path("."), stride)
        self.capture: _Capture | None = None

    def recorder(self, trial: Trial, rig: Rig, contract: Contract) -> Any:
        from r2s2r.runtime.record import EpisodeRecorder

        self.capture = _Capture(recording_cfg(rig, contract)) if self.records(trial) else None
        if self.capture is None:
            return None
        return EpisodeRecorder(rig, self.capture)  # type: ignore[arg-type]

    def close(self) -> None:
        self.capture = None


class _Worker:
    """A worker's policy, twin and trial list."""

    def __init__(self, spec: TwinTrials, setup: Any) -> None:
        from r2s2r.eval.policies import open_policy
        from r2s2r.eval.runner import TwinRigs, _Run, video_every

        logging.getLogger("r2s2r.safety").setLevel(logging.ERROR)
        self.source = open_policy(
            spec.policy, spec.server, spec.token, spec.device, noise_seed=spec.noise_seed
        )
        torch = sys.modules.get("torch")
        if torch is not None:
            torch.set_num_threads(1)  # Workers share the machine's cores.
        rigs = TwinRigs(spec.image_size, cell=spec.cell)
        self.trials = trial_list(setup.protocol, setup.protocol_seed)
        self.rollouts = _CaptureRollouts(video_every(setup.video))
        self.run = _Run(setup, self.source, rigs, None, setup.out, None)
        self.run.rollouts = self.rollouts

    def play(self, index: int) -> Played:
        trial = self.trials[index]
        try:
            prepared = self.run.prepare(trial)
            played = self.run.play(trial, prepared, lambda: False)
        finally:
            self.run._release()
        assert played is not None  # Nothing stops a trial in a worker.
        episode, recorder = played
        capture = self.rollouts.capture if recorder is not None else None
        if capture is None:
            return Played(index, episode)
        return Played(index, episode, capture.cfg, capture.frames)


def _start(spec: TwinTrials, setup: Any) -> _Worker:
    return _Worker(spec, setup)


def _play(worker: _Worker, index: int) -> Played:
    return worker.play(index)


def run_in_workers(
    setup: Any,
    spec: TwinTrials,
    todo: list[Trial],
    run: Any,
    first: Callable[[], None],
    stop: Callable[[], bool],
) -> Iterator[TrialRecord | None]:
    """Play ``todo`` in ``setup.workers`` workers (or Ray tasks on ``setup.ray``) and log
    each in trial order through ``run`` (the evaluation's ``_Run``); ``first()`` is called
    before the first trial is logged. Yields each record, and None (then stops) when
    ``stop()`` says so."""
    if not todo:
        return
    order = [t.index for t in todo]
    by_index = {t.index: t for t in todo}
    job = Job(_start, _play, (spec, setup))
    results = in_order(run_tasks(job, order, setup.workers, setup.ray), order)
    try:
        for n, (index, played) in enumerate(results):
            if stop():
                yield None
                return
            if n == 0:
                first()
            trial = by_index[index]
            video = _save(run.rollouts, played, trial)
            yield run.commit(trial, played.episode, video)
    except ScaleoutError as err:
        # A trial's own refusal (a policy that does not fit the rig, a lost server) reads as
        # it does in one process; a crash keeps its traceback.
        if isinstance(err.__cause__, ValueError):
            from r2s2r.eval.runner import EvalError

            raise EvalError(f"trial {err.index}: {err.__cause__}") from err
        raise
    finally:
        results.close()


def _save(rollouts: Any, played: Played, trial: Trial) -> str | None:
    """Write a played trial's frames into ``DIR/rollouts`` (as its recorder does in one
    process); the path of its video relative to DIR (None where none was recorded)."""
    if played.cfg is None or not played.episode.steps:
        return None
    from r2s2r.runtime.record import save_episode_log

    writer = rollouts.open_writer(played.cfg)
    for images, state, action, timestamp in played.frames:
        writer.add_frame(images, state, action, timestamp=timestamp)
    index = save_episode_log(writer, played.episode, trial_meta(trial))
    return rollouts.video_of([c.name for c in played.cfg.cameras], index)
