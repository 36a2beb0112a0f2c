"""The 50 Hz loop that runs any ``Policy`` on any ``Rig``.

Every control period the loop reads the rig (the recorder's code path, ``rig.observe``),
starts an inference when one is due (in the ``InferenceWorker``'s thread, never on the
loop's critical path, except in ``sync`` execution, whose point is to wait), takes a chunk
that has arrived, commands the period's action through the safety supervisor, ticks its
watchdog and lets the rig step.

Clocks: on a rig paced to the wall clock (hardware, or the twin with ``realtime``), chunks
arrive when inference finishes, so the delay in periods is measured. On the twin run as fast
as it goes, the loop runs in lockstep: a chunk arrives ``delay_periods`` after its
observation (deterministic), or after its measured latency (``delay_periods=None``).

Safety: a chunk with a non-finite value, of the wrong shape, with a TCP target outside the
supervisor's workspace box, or that jumps (a TCP target further than the supervisor's
``max_jump_m`` from the one before) is rejected and the current chunk goes on; when no chunk
covers a period the arms hold, and the supervisor stops them after its limit, which ends the
episode; a policy that fails ends it with the arms held; ``emergency_stop`` works from any
thread.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from r2s2r.policy.base import ChunkPrefix, GuidedPolicy, Policy
from r2s2r.rig.interfaces import Rig
from r2s2r.rig.observe import observe
from r2s2r.rig.safety import SafetySupervisor
from r2s2r.runtime.checks import check_policy_fits, validate_chunk
from r2s2r.runtime.chunks import ChunkExecutor, DelayEstimator
from r2s2r.runtime.config import RuntimeCfg
from r2s2r.runtime.episode import ChunkLog, EpisodeLog, EpisodeStart, StepLog
from r2s2r.runtime.request import StateHistory, build_request, wants_request
from r2s2r.runtime.worker import Inference, InferenceWorker
from r2s2r.sim.contract import Contract

log = logging.getLogger("r2s2r.runtime")
CONTROL_HZ = 50.0
StepHook = Callable[[StepLog, dict[str, Any] | None], None]


class Runtime:
    """Runs ``policy`` on ``rig`` with every command through ``supervisor``."""

    def __init__(
        self,
        rig: Rig,
        policy: Policy,
        supervisor: SafetySupervisor,
        cfg: RuntimeCfg | None = None,
        lockstep: bool | None = None,
    ) -> None:
        self.rig, self.policy, self.sup = rig, policy, supervisor
        self.cfg = cfg or RuntimeCfg()
        meta = policy.metadata
        self.contract: Contract = check_policy_fits(policy, rig, CONTROL_HZ)
        self.dt = 1.0 / CONTROL_HZ
        # The twin exposes whether it is paced to the wall clock; hardware always is.
        self.lockstep = (not getattr(rig, "realtime", True)) if lockstep is None else lockstep
        self.horizon = meta.action_horizon
        execution = self.cfg.execution if self.horizon > 1 else "sync"
        self.execution = execution
        self.exec_horizon = min(self.cfg.exec_horizon, self.horizon)
        self.executor = ChunkExecutor(execution, self.exec_horizon, self.cfg.blend_steps)
        self.delays = DelayEstimator(
            self.cfg.warmup_calls, self.cfg.delay_window, self.cfg.delay_quantile
        )
        self.worker = InferenceWorker(policy)
        # RTC asks for guided chunks where the policy makes them (a policy server says so on
        # connect); otherwise it still executes the committed actions and switches after them.
        self.guided = isinstance(policy, GuidedPolicy) and bool(getattr(policy, "guided", True))
        if execution == "rtc" and not self.guided:
            log.info("runtime: the policy makes no guided chunks; RTC switches after the delay")
        # Learned policies and servers take the dataset's form, with the loop's history.
        self.request_form = wants_request(meta)
        self.history = StateHistory(meta.state_history, meta.quaternions)
        # A (diagnostic) policy that reads the object's true pose gets it from the rig.
        self.object_pose = meta.environment_state
        self._estop = threading.Event()
        self._estop_reason = ""
        # Measured lockstep: a result that came back before its latency's periods passed.
        self._early: Inference | None = None
        # The episode in progress (or the last one): its steps and chunks so far, for live
        # views (read them from the step hook, which runs in the loop's thread).
        self.episode: EpisodeLog | None = None
        for name in self.contract.cameras:
            supervisor.watch_camera(rig.cameras[name])

    # ------------------------------------------------------------------ control
    def emergency_stop(self, reason: str = "emergency stop") -> None:
        """Stop the arms now and end the episode; callable from any thread."""
        # The arms stop first; the loop, told after, ends the episode with the stop logged
        # (a latched stop of the supervisor ends it as an e-stop too, whoever pressed it).
        self._estop_reason = reason
        self.sup.emergency_stop(reason)
        self._estop.set()

    def close(self) -> None:
        self.worker.close()

    def __enter__(self) -> Runtime:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ episodes
    def run_episode(
        self,
        start: EpisodeStart,
        max_s: float,
        on_step: StepHook | None = None,
        views_every_step: bool = False,
        should_stop: Callable[[], bool] | None = None,
    ) -> EpisodeLog:
        """Run one episode from ``start`` (an object just presented: ``start_episode``)
        for at most ``max_s`` seconds. ``on_step(step, observation)`` is called every period
        with the observation read then (views included every period with
        ``views_every_step``, else only where an inference started; None otherwise)."""
        rig, sup = self.rig, self.sup
        episode = self.episode = EpisodeLog(start)
        n_events = len(sup.events)
        self.policy.reset()
        begin = getattr(self.policy, "begin", None)
        if begin is not None:
            begin(start)
        self.executor.reset()
        self.history.reset()
        self._drain()
        for side in self.contract.embodiment.sides:
            sup.arm(side).resync()
        t0 = rig.now()
        max_steps = int(round(max_s * CONTROL_HZ))
        pending: ChunkLog | None = None
        last_wall: float | None = None
        held = False
        for k in range(max_steps):
            wall = time.perf_counter()
            period_ms = 0.0 if last_wall is None else (wall - last_wall) * 1e3
            last_wall = wall
            if self._estop.is_set():
                self._end(episode, "estop", f"emergency stop: {self._estop_reason}")
                break
            # A chunk that has arrived (lockstep: when its simulated delay has passed).
            if pending is not None:
                result = self._arrival(pending, k)
                if result is not None:
                    pending = self._receive(episode, pending, result, k)
                    if episode.ended_by:
                        break
            # An inference that is due starts from this period's observation.
            need_views = views_every_step or (pending is None and self.executor.due(k))
            obs = observe(
                rig,
                self.contract,
                start.instruction,
                images=need_views,
                environment_state=self.object_pose,
            )
            state = self.contract.state(obs)
            self.history.push(state)
            if pending is None and self.executor.due(k):
                pending = self._request(episode, obs, k)
                if self.execution == "sync":
                    pending = self._wait_sync(episode, pending, k)
                    if episode.ended_by:
                        break
            action, chunk = self.executor.action(k)
            if action is None:
                if not held:
                    msg = f"no chunk covers step {k} ({(rig.now() - t0):.2f} s): the arms hold"
                    log.warning("runtime: %s", msg)
                    episode.messages.append(msg)
                    self._hold("runtime: no fresh chunk")
                    held = True
            else:
                held = False
                self._command(action)
            sup.tick()
            overhead_ms = (time.perf_counter() - wall) * 1e3
            step = StepLog(k, rig.now() - t0, state, action, chunk, period_ms, overhead_ms)
            episode.steps.append(step)
            if on_step is not None:
                on_step(step, obs)
            rig.step()
            if self._judge(episode):
                break
            if should_stop is not None and should_stop():
                self._end(episode, "stopped", "stopped by the caller")
                break
        else:
            episode.ended_by = "timeout"
        if pending is not None:
            episode.chunks.append(pending)
        self._drain()
        self._finish(episode)
        episode.events = list(sup.events[n_events:])
        return episode

    # ------------------------------------------------------------------ internals
    def _request(self, episode: EpisodeLog, obs: dict[str, Any], k: int) -> ChunkLog:
        delay = self._delay()
        prefix = None
        if self.execution == "rtc":
            tail = self.executor.prefix(k, self.horizon)
            if tail is not None:
                # RTC needs d <= s <= H - d.
                d = min(delay, len(tail), self.horizon // 2)
                s = min(max(self.exec_horizon, d, 1), self.horizon - d)
                prefix = ChunkPrefix(tail, d, s, self.cfg.rtc_beta, self.cfg.rtc_schedule)
        if self.request_form:
            obs = build_request(obs, self.history, self.contract.cameras)
        self.worker.submit(obs, prefix if self.guided else None, k)
        self.executor.last_request = k
        d = 0 if prefix is None else prefix.delay
        return ChunkLog(len(episode.chunks), k, None, None, d, False, False, "", None)

    def _delay(self) -> int:
        if self.lockstep and self.cfg.delay_periods is not None:
            return self.cfg.delay_periods
        return self.delays.estimate()

    def _arrival(self, pending: ChunkLog, k: int) -> Inference | None:
        """The pending chunk's result if it has arrived by step ``k``."""
        if not self.lockstep:
            return self.worker.poll()
        waited = k - pending.requested_step
        if self.cfg.delay_periods is not None:
            return self.worker.wait() if waited >= self.cfg.delay_periods else None
        # Measured lockstep: the simulation does not run ahead of the inference's wall time,
        # and a chunk arrives after as many periods as its latency lasted.
        if self._early is None:
            submitted = self.worker.submitted_at or time.perf_counter()
            remaining = submitted + waited * self.dt - time.perf_counter()
            self._early = self.worker.wait(timeout=max(remaining, 0.0))
            if self._early is None:
                return None
        if waited < math.ceil(self._early.latency_ms / 1e3 / self.dt):
            return None
        result, self._early = self._early, None
        return result

    def _receive(
        self, episode: EpisodeLog, pending: ChunkLog, result: Inference, k: int
    ) -> ChunkLog | None:
        """Take (or reject) an arrived chunk; None: no request is pending any more."""
        delay = k - pending.requested_step
        if result.error is not None:
            reason = f"{type(result.error).__name__}: {result.error}"
            episode.chunks.append(_done(pending, k, result, False, reason))
            msg = f"the policy failed at step {k} ({reason}): the arms hold, episode over"
            log.error("runtime: %s", msg)
            episode.messages.append(msg)
            self._hold("runtime: the policy failed")
            episode.ended_by = "policy_error"
            return None
        self.delays.add(delay)
        first = k - pending.requested_step
        if self.execution == "rtc":
            first = max(first, pending.delay)
        elif self.execution == "sync":
            first = 0
        reason = validate_chunk(
            result.actions,
            (self.horizon, self.contract.action_dim),
            self.contract,
            self.sup.limits.max_jump_m,
            first,
            self._tcp_now(),
            (self.sup.limits.workspace_min, self.sup.limits.workspace_max),
        )
        if reason:
            msg = f"chunk {pending.index} rejected at step {k}: {reason}"
            log.warning("runtime: %s", msg)
            episode.messages.append(msg)
            episode.chunks.append(_done(pending, k, result, False, reason))
            return None
        assert result.actions is not None
        self.executor.accept(
            result.actions, pending.requested_step, k, pending.delay, pending.index
        )
        episode.chunks.append(_done(pending, k, result, True, ""))
        return None

    def _wait_sync(self, episode: EpisodeLog, pending: ChunkLog, k: int) -> ChunkLog | None:
        """Sync execution: wait for the chunk. On a wall-clock rig the robot waits too: the
        loop keeps commanding where the arms are and lets the periods pass."""
        if self.lockstep:
            result = self.worker.wait()
            assert result is not None
            return self._receive(episode, pending, result, k)
        while True:
            result = self.worker.wait(timeout=self.dt)
            if result is not None:
                return self._receive(episode, pending, result, k)
            for side in self.contract.embodiment.sides:
                arm = self.sup.arm(side)
                arm.send_tcp_target(arm.state().tcp_pose)
            self.sup.tick()
            self.rig.step()

    def _command(self, action: np.ndarray) -> None:
        arm_cmd, hand_cmd = self.contract.split_action(action)
        for i, side in enumerate(self.contract.embodiment.sides):
            self.sup.arm(side).send_tcp_target(arm_cmd[i])
            self.sup.hand(side).send_joint_targets(hand_cmd[i])

    def _hold(self, reason: str) -> None:
        for side in self.contract.embodiment.sides:
            self.sup.arm(side).hold(reason)

    def _tcp_now(self) -> np.ndarray:
        """The arms' last accepted TCP targets (S, 7): what the supervisor measures a jump
        from (an arm lagging its plan is no jump of the plan's)."""
        return np.stack([self.sup.arm(s).target for s in self.contract.embodiment.sides])

    def _judge(self, episode: EpisodeLog) -> bool:
        """Whether the episode is over: the rig's verdict, or the supervisor stopped an arm."""
        verdict = self.rig.episode_outcome()
        if verdict is not None and verdict[2]:
            episode.outcome, episode.success = verdict[0], bool(verdict[1])
            episode.ended_by = "verdict"
            return True
        if self._estop.is_set() or self.sup.estopped:
            # An emergency stop from another thread during this period (the runtime's, or
            # the supervisor's pressed directly).
            reason = self._estop_reason or "the supervisor's emergency stop is latched"
            self._end(episode, "estop", f"emergency stop: {reason}")
            return True
        stopped = [s for s in self.contract.embodiment.sides if self.sup.arm(s).mode == "stopped"]
        if stopped:
            self._end(
                episode, "safety_stop", f"the supervisor stopped the {', '.join(stopped)} arm"
            )
            return True
        return False

    def _end(self, episode: EpisodeLog, how: str, msg: str) -> None:
        log.warning("runtime: %s; episode over", msg)
        episode.messages.append(msg)
        episode.ended_by = how

    def _finish(self, episode: EpisodeLog) -> None:
        if episode.ended_by == "verdict":
            return
        verdict = self.rig.episode_outcome()
        status, success = (
            (verdict[0], bool(verdict[1])) if verdict is not None else ("pending", False)
        )
        if episode.ended_by in ("safety_stop", "estop"):
            episode.outcome = "safety_stop"
        elif episode.ended_by == "policy_error":
            episode.outcome = "failed"
        else:
            episode.outcome = "timeout" if status == "pending" else status
        episode.success = success and episode.outcome == "sorted"

    def _drain(self) -> None:
        """Forget a request still in flight (its result belongs to no episode)."""
        self._early = None
        if self.worker.busy:
            self.worker.wait()


def _done(pending: ChunkLog, k: int, result: Inference, accepted: bool, reason: str) -> ChunkLog:
    return ChunkLog(
        pending.index,
        pending.requested_step,
        k,
        result.latency_ms,
        pending.delay,
        result.guided,
        accepted,
        reason,
        result.actions,
    )
