"""Running an evaluation: a protocol's trials, one runtime episode each, logged as they end.

``evaluate(setup, source, rigs)`` runs every trial of the protocol's list (its first
``setup.trials``) that ``DIR/trials.jsonl`` does not hold yet. Each trial opens its rig (the
twin at the trial's seed and condition; on the real cell, the operator sets the condition
up), builds the source's policy for it, runs one ``Runtime`` episode, judges it (the twin's
truth through the runtime; on the real cell the operator's key, ``KeyJudge``), records it
into ``DIR/rollouts/`` (a dataset episode with its chunks, ``runtime.record``) where the
video choice keeps it, and appends its line to ``DIR/trials.jsonl``.

``DIR/eval.json`` is written before the first trial, once the first trial's rig has
accepted the policy (a policy that does not fit leaves nothing behind). A DIR that holds
another protocol, protocol seed, rig, policy or runtime setting is refused, and nothing in
it is touched. Stopping (``should_stop``, Ctrl-C, a crash) loses at most the trial in
progress; the next call continues at the next trial. A trial saved into ``rollouts/`` whose
line never reached the log (a crash between the two) is logged from its recording. A trial
whose policy server goes away is not logged (a lost server says nothing of the policy): the
evaluation stops with the reason, and continues at that trial when rerun. On the
twin in lockstep with a fixed ``delay_periods`` a trial is a function of its seed, its
condition and the policy, so a resumed evaluation logs what an uninterrupted one does (all
but ``infer_ms_p50``, a wall-clock time). That is also why trials on the twin can run at
once (``EvalSetup.workers``, ``EvalSetup.ray``: ``r2s2r.eval.parallel``): the log they leave
is a sequential run's.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, is_dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from r2s2r import __version__
from r2s2r.eval.funnel import Funnel
from r2s2r.eval.policies import PolicySource
from r2s2r.eval.protocol import ProtocolSpec, Trial, select_trials, trial_list
from r2s2r.eval.rollouts import Rollouts, trial_record
from r2s2r.eval.stats import success_table
from r2s2r.eval.trials import (
    EVAL_JSON,
    TRIALS_JSONL,
    EvalInfo,
    TrialLog,
    TrialRecord,
    append_trial,
    read_trials,
    write_eval_info,
)
from r2s2r.rig.interfaces import Rig
from r2s2r.rig.kinds import RIGS, RigOptions, open_rig
from r2s2r.rig.safety import SafetySupervisor
from r2s2r.runtime import EpisodeLog, EpisodeStart, Runtime, RuntimeCfg, StepLog, start_episode
from r2s2r.sim.progress import ProgressReading
from r2s2r.spec import TaskSpec, WorldSpec

if TYPE_CHECKING:
    from r2s2r.eval.parallel import TwinTrials

log = logging.getLogger("r2s2r.eval")


class EvalError(ValueError):
    """An evaluation that cannot run as asked, or cannot continue in its directory."""


@dataclass(frozen=True)
class EvalSetup:
    """What to evaluate under: the protocol, where, on which rig, how the runtime runs."""

    out: Path
    protocol: ProtocolSpec
    protocol_seed: int = 0
    # Run the first ``trials`` of the protocol's list (None: all of them).
    trials: int | None = None
    rig: str = "twin"
    runtime: RuntimeCfg = RuntimeCfg()
    # Which trials are recorded into rollouts/ (with their video): "all", "none", or "N":
    # every trial whose index is a multiple of N.
    video: str = "all"
    # The twin's hidden cell hosting every trial (None: each trial seed's own cell).
    cell: int | None = None
    # Trials run at once on the twin, in worker processes (1: one after another, here); with
    # ``ray``, Ray tasks on that cluster (``r2s2r.scaleout``). The outcomes are the same.
    workers: int = 1
    ray: str | None = None
    # The trials against the policy's training data ("train", "unseen"; None: not checked),
    # as eval.json says (``r2s2r.eval.instances`` makes such protocols).
    instances: str | None = None

    @property
    def scaled_out(self) -> bool:
        return self.workers > 1 or self.ray is not None


def video_every(video: str) -> int | None:
    """The stride of a video choice (1 for ``all``, None for ``none``)."""
    if video == "all":
        return 1
    if video == "none":
        return None
    if not str(video).isdigit() or int(video) < 1:
        raise EvalError(f"--video: expected all, none or a number N >= 1, got {video!r}")
    return int(video)


class RigSession(Protocol):
    """Opens the rig of each trial and starts its episode."""

    kind: str

    def open(self, trial: Trial) -> tuple[Rig, SafetySupervisor, TaskSpec, WorldSpec]:
        """The trial's rig, the supervisor of its arms and hands, its task and world."""
        ...

    def start(self, rig: Rig, trial: Trial, task: TaskSpec, world: WorldSpec) -> EpisodeStart:
        """Present the trial's object and describe the episode that starts."""
        ...

    def progress(self, rig: Rig) -> Callable[[], ProgressReading] | None:
        """What reads the trial's progress every period for its funnel
        (``r2s2r.eval.funnel``); None where the rig cannot tell."""
        ...

    def release(self, rig: Rig) -> None:
        """Done with the trial's rig."""
        ...


class Judge(Protocol):
    """Says how a trial ended where the rig does not (the operator at the real cell)."""

    def begin(self) -> None:
        """A trial starts: forget what was pressed before."""
        ...

    def pressed(self) -> bool:
        """Whether the operator has judged the running trial (it then stops)."""
        ...

    def verdict(self, episode: EpisodeLog) -> tuple[str, bool, str]:
        """(outcome, success, ended_by) of the finished episode."""
        ...


class TwinRigs:
    """Trials on the twin: a fresh ``TwinRig`` at the trial's seed and condition, with views
    of ``image_size`` px, in the hidden ``cell`` (None: the trial seed's own); the twin
    judges its episodes."""

    kind = "twin"

    def __init__(
        self, image_size: int = 256, world: str | Path = "nominal", cell: int | None = None
    ) -> None:
        from r2s2r.spec.worlds import world_at

        self.cell = cell
        self.world = world_at(image_size, world)

    def open(self, trial: Trial) -> tuple[Rig, SafetySupervisor, TaskSpec, WorldSpec]:
        options = RigOptions(
            seed=trial.seed, world=self.world, condition=trial.condition, cell=self.cell
        )
        twin = open_rig("twin", options)
        sup = SafetySupervisor(dict(twin.arms), dict(twin.hands), twin.now, twin.embodiment)
        return twin, sup, twin.task, twin.nominal

    def start(self, rig: Rig, trial: Trial, task: TaskSpec, world: WorldSpec) -> EpisodeStart:
        return start_episode(rig, task, world)

    def progress(self, rig: Rig) -> Callable[[], ProgressReading]:
        from r2s2r.rig.twin import TwinRig

        assert isinstance(rig, TwinRig)  # ``open`` made it.
        return rig.reveal_progress

    def release(self, rig: Rig) -> None:
        rig.close()


@dataclass(frozen=True)
class EvalResult:
    """An evaluation directory after a call: the planned trials and every trial logged."""

    out: Path
    info: EvalInfo
    planned: tuple[Trial, ...]
    records: tuple[TrialRecord, ...]
    # Trials this call ran (and logged).
    ran: int
    cancelled: bool

    @property
    def finished(self) -> bool:
        return len(self.records) >= len(self.planned)

    @property
    def successes(self) -> int:
        return sum(r.success for r in self.records)

    def summary(self) -> dict[str, Any]:
        """The figures ``--json`` prints: trials, successes and Table 2's cells."""
        n = len(self.records)
        return {
            "out": str(self.out),
            "protocol": self.info.protocol,
            "protocol_seed": self.info.protocol_seed,
            "rig": self.info.rig,
            "policy": self.info.to_json()["policy"],
            "trials_planned": len(self.planned),
            "trials_done": n,
            "trials_run_now": self.ran,
            "successes": self.successes,
            "success_rate": self.successes / n if n else None,
            "finished": self.finished,
            "cancelled": self.cancelled,
            "table": {g: c.to_json() for g, c in success_table(self.records).items()},
        }


ProgressHook = Callable[[int, int, int, "TrialRecord | None"], None]


def evaluate(
    setup: EvalSetup,
    source: PolicySource,
    rigs: RigSession,
    judge: Judge | None = None,
    progress: ProgressHook | None = None,
    should_stop: Callable[[], bool] | None = None,
    spawn: TwinTrials | None = None,
) -> EvalResult:
    """Run the trials of ``setup`` not yet logged in ``setup.out`` (see the module
    docstring). ``progress(done, planned, successes, last record)`` is called before the
    first trial and after each; ``should_stop`` is polled every period and between trials
    (the trial in progress is then dropped, and the result says ``cancelled``). With
    ``setup.workers`` > 1 or ``setup.ray``, the trials run in workers that open their own
    policy and twin from ``spawn`` (a ``r2s2r.eval.parallel.TwinTrials``); their lines are
    logged in trial order, as one process logs them."""
    _check_setup(setup, rigs, spawn)
    stride = video_every(setup.video)
    full = trial_list(setup.protocol, setup.protocol_seed)
    planned = select_trials(full, setup.trials)
    out = Path(setup.out)
    info = _eval_info(setup, source, planned)
    before = _existing(out, info, full)
    if before is not None:
        # A continued evaluation keeps its eval.json (its version too); only a longer list
        # of trials is written into it.
        info = dataclasses.replace(before.info, trials_planned=info.trials_planned)
    logged = {r.trial: r for r in (before.records if before is not None else ())}
    run = _Run(setup, source, rigs, judge, out, stride)
    # A trial recorded but not logged (a crash between the two) is logged from its recording.
    run.rollouts.recover(planned, logged)
    todo = [t for t in planned if t.index not in logged]
    stop = should_stop or (lambda: False)

    def report(last: TrialRecord | None) -> None:
        if progress is not None:
            mine = [r for t in planned if (r := logged.get(t.index)) is not None]
            progress(len(mine), len(planned), sum(r.success for r in mine), last)

    report(None)
    ran, cancelled = 0, False

    def first() -> None:
        # The first trial's rig took the policy: now the directory is the evaluation's.
        if before is None or before.info != info:
            write_eval_info(out, info)

    try:
        for done in _played(setup, spawn, todo, run, first, stop):
            if done is None:
                cancelled = True
                break
            logged[done.trial] = done
            ran += 1
            report(done)
    finally:
        run.close()
    if not todo and before is not None and before.info != info:
        write_eval_info(out, info)
    records = tuple(r for t in planned if (r := logged.get(t.index)) is not None)
    return EvalResult(out, info, planned, records, ran, cancelled)


def _check_setup(setup: EvalSetup, rigs: RigSession, spawn: TwinTrials | None) -> None:
    """Refuse a setup whose rig is not the session's, or that runs trials at once where it
    cannot (not on the twin, or without a spawn spec)."""
    if rigs.kind != setup.rig:
        raise EvalError(f"the setup names rig {setup.rig!r} but the rig session is {rigs.kind!r}")
    if setup.scaled_out and not RIGS.get(setup.rig).parallel:
        raise EvalError(
            f"--workers {setup.workers}"
            + (f" --ray {setup.ray}" if setup.ray else "")
            + f": trials run at once only on the twin; the {setup.rig} rig runs one trial at a "
            "time (--workers 1, no --ray)"
        )
    if setup.scaled_out and spawn is None:
        raise EvalError("trials in workers need a spawn spec (how a worker opens its policy)")


def _eval_info(setup: EvalSetup, source: PolicySource, planned: tuple[Trial, ...]) -> EvalInfo:
    """What ``eval.json`` says of an evaluation of ``planned`` by ``setup`` and ``source``."""
    return EvalInfo(
        protocol=setup.protocol.name,
        protocol_seed=setup.protocol_seed,
        rig=setup.rig,
        trials_planned=len(planned),
        policy=source.info,
        runtime=setup.runtime.model_dump(mode="json"),
        version=__version__,
        cell=setup.cell,
        instances=setup.instances,
    )


def _played(
    setup: EvalSetup,
    spawn: TwinTrials | None,
    todo: list[Trial],
    run: _Run,
    first: Callable[[], None],
    stop: Callable[[], bool],
) -> Iterator[TrialRecord | None]:
    """The records of the trials ``todo`` in trial order, None where the run was stopped;
    ``first()`` is called before the first record."""
    if setup.scaled_out:
        from r2s2r.eval.parallel import run_in_workers

        assert spawn is not None  # Checked by _check_setup.
        yield from run_in_workers(setup, spawn, todo, run, first, stop)
        return
    for i, trial in enumerate(todo):
        if stop():
            yield None
            return
        prepared = run.prepare(trial)
        if i == 0:
            first()
        yield run.trial(trial, prepared, stop)


def _existing(out: Path, info: EvalInfo, full: tuple[Trial, ...]) -> TrialLog | None:
    """The evaluation already in ``out`` (None for a new one); refuses one that is not this
    evaluation's."""
    if not (out / EVAL_JSON).is_file():
        if out.exists() and (not out.is_dir() or any(out.iterdir())):
            raise EvalError(
                f"{out}: exists and is not an evaluation directory (no {EVAL_JSON}); choose "
                "another --out"
            )
        return None
    before = read_trials(out)
    old = before.info
    for name in ("protocol", "protocol_seed", "rig", "cell", "instances", "policy", "runtime"):
        was, now = getattr(old, name), getattr(info, name)
        if was != now:
            raise EvalError(
                f"{out / EVAL_JSON}: this directory evaluates {name} {_show(was)}, not "
                f"{_show(now)}; continue it with the same arguments or choose another --out "
                "(nothing in it was changed)"
            )
    if info.trials_planned < old.trials_planned:
        raise EvalError(
            f"{out / EVAL_JSON}: this directory plans {old.trials_planned} trials; continue "
            f"it with --trials {old.trials_planned} or more, not {info.trials_planned}"
        )
    for record, line in zip(before.records, before.line_numbers, strict=True):
        trial = full[record.trial] if record.trial < len(full) else None
        if trial is None or (trial.seed, trial.condition) != (record.seed, record.condition):
            want = "no such trial" if trial is None else f"{trial.condition}/seed {trial.seed}"
            raise EvalError(
                f"{out / TRIALS_JSONL}:{line}: trial {record.trial} is "
                f"{record.condition}/seed {record.seed}, but the protocol's trial "
                f"{record.trial} is {want}: the log is not this protocol's"
            )
    return before


def _show(value: Any) -> str:
    if is_dataclass(value) and not isinstance(value, type):
        value = asdict(value)
    return json.dumps(value, sort_keys=True) if isinstance(value, dict) else repr(value)


def _lost_server(episode: EpisodeLog) -> str:
    """Why the episode's policy server went away mid-episode ("" if it did not): a lost
    server says nothing about the policy, so such a trial is not logged as a failure."""
    if episode.ended_by != "policy_error":
        return ""
    gone = [c.reason for c in episode.chunks if c.reason.startswith("PolicyServerGone")]
    return gone[-1] if gone else ""


def _server_gone(trial: Trial, reason: str) -> EvalError:
    return EvalError(
        f"trial {trial.index}: the policy server went away ({reason}); the trial is not "
        "logged (the trials before it are): start the server again and rerun the same "
        "command to continue"
    )


@dataclass
class _Prepared:
    rig: Rig
    sup: SafetySupervisor
    task: TaskSpec
    world: WorldSpec
    runtime: Runtime


class _Run:
    """One call's trials: their rigs, runtimes, recordings and log lines."""

    def __init__(
        self,
        setup: EvalSetup,
        source: PolicySource,
        rigs: RigSession,
        judge: Judge | None,
        out: Path,
        stride: int | None,
    ) -> None:
        self.setup, self.source, self.rigs, self.judge = setup, source, rigs, judge
        self.out = out
        self.rollouts = Rollouts(out, stride)
        self._open: _Prepared | None = None

    def prepare(self, trial: Trial) -> _Prepared:
        """The trial's rig and the runtime of its policy (``ContractError`` where the policy
        does not fit the rig)."""
        rig, sup, task, world = self.rigs.open(trial)
        try:
            policy = self.source.policy_for(rig, trial)
            runtime = Runtime(rig, policy, sup, self.setup.runtime)
        except BaseException:
            self.rigs.release(rig)
            raise
        self._open = _Prepared(rig, sup, task, world, runtime)
        return self._open

    def trial(self, trial: Trial, p: _Prepared, stop: Callable[[], bool]) -> TrialRecord | None:
        """Run, judge, record and log one trial; None when it was stopped."""
        try:
            played = self.play(trial, p, stop)
            if played is None:
                return None
            episode, recorder = played
            return self.commit(trial, episode, self.rollouts.save(recorder, trial, episode))
        finally:
            self._release()

    def commit(self, trial: Trial, episode: EpisodeLog, video: str | None) -> TrialRecord:
        """Log a finished trial (recorded, where it is, as ``video``)."""
        record = trial_record(trial, episode, video)
        append_trial(self.out / TRIALS_JSONL, record)
        log.info("trial %d (%s): %s", trial.index, trial.condition, record.outcome)
        return record

    def play(
        self, trial: Trial, p: _Prepared, stop: Callable[[], bool]
    ) -> tuple[EpisodeLog, Any] | None:
        """Run and judge one trial: its episode and its recorder (None where it is not
        recorded); None when it was stopped."""
        start = self.rigs.start(p.rig, trial, p.task, p.world)
        recorder = self.rollouts.recorder(trial, p.rig, p.runtime.contract)
        judge = self.judge
        halt = stop if judge is None else (lambda: stop() or judge.pressed())
        max_s = self.setup.runtime.max_s or p.task.episode_s
        read = self.rigs.progress(p.rig)
        funnel = Funnel() if read is not None else None

        def hook(step: StepLog, obs: dict[str, Any] | None) -> None:
            if recorder is not None:
                recorder.on_step(step, obs)
            if funnel is not None and read is not None:
                funnel.update(read())

        if judge is not None:
            judge.begin()
        try:
            episode = p.runtime.run_episode(start, max_s, on_step=hook, should_stop=halt)
        except ConnectionError as err:
            raise _server_gone(trial, str(err)) from err
        lost = _lost_server(episode)
        if lost or (episode.ended_by == "stopped" and stop()):
            if recorder is not None:
                recorder.discard()
            if lost:
                raise _server_gone(trial, lost)
            return None
        if judge is not None:
            episode.outcome, episode.success, episode.ended_by = judge.verdict(episode)
        if funnel is not None:
            episode.progress = asdict(funnel.result(episode.outcome))
        return episode, recorder

    def _release(self) -> None:
        p, self._open = self._open, None
        if p is not None:
            p.runtime.close()
            self.rigs.release(p.rig)

    def close(self) -> None:
        self._release()
        self.rollouts.close()
