"""What one episode of the runtime is given, and what it leaves: the start, the per-step and
per-chunk log, and the outcome."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from r2s2r.rig.interfaces import Rig
from r2s2r.rig.safety import SafetyEvent
from r2s2r.spec import TaskSpec, WorldSpec
from r2s2r.spec.worlds import sorting_arm


@dataclass(frozen=True)
class EpisodeStart:
    """An episode as it begins: the presented object, the arm that sorts it, the belt speed,
    the instruction, the arms' TCP poses (by side) and, where the rig tracks it, the object's
    pose (7,). Scripted policies read it in ``begin``; learned ones need only the
    instruction."""

    object_name: str
    arm: str
    belt_speed: float
    instruction: str
    tcp_poses: dict[str, np.ndarray]
    object_pose: np.ndarray | None = None


def start_episode(rig: Rig, task: TaskSpec, world: WorldSpec) -> EpisodeStart:
    """Present an object on ``rig`` and describe the episode that starts."""
    name = rig.present()
    return EpisodeStart(
        object_name=name,
        arm=sorting_arm(task, world, name),
        belt_speed=float(rig.conveyor.speed()),
        instruction=task.instruction_for(name),
        tcp_poses={s: rig.arms[s].state().tcp_pose.copy() for s in rig.embodiment.sides},
        object_pose=rig.presenter.object_pose(),
    )


@dataclass(frozen=True)
class StepLog:
    """One control period."""

    step: int
    t: float  # Rig clock, seconds since the episode began.
    state: np.ndarray  # (S,) proprio at the start of the period.
    action: np.ndarray | None  # (A,) what was commanded (None: nothing, the arms held).
    chunk: int | None  # The chunk the action came from.
    period_ms: float  # Wall time since the previous period began.
    overhead_ms: float  # Wall time of the loop's own work in this period (not the rig's step).


@dataclass(frozen=True)
class ChunkLog:
    """One inference."""

    index: int
    requested_step: int
    arrived_step: int | None  # None: it never arrived (the episode ended, or it failed).
    latency_ms: float | None
    delay: int  # The committed prefix it was asked to keep (RTC), or 0.
    guided: bool
    accepted: bool
    reason: str  # Why it was rejected or failed ("" when accepted).
    actions: np.ndarray | None  # (H, A)


@dataclass
class EpisodeLog:
    """Everything an episode did, in order."""

    start: EpisodeStart
    steps: list[StepLog] = field(default_factory=list)
    chunks: list[ChunkLog] = field(default_factory=list)
    events: list[SafetyEvent] = field(default_factory=list)
    outcome: str = "pending"
    success: bool = False
    # verdict | timeout | safety_stop | estop | policy_error | stopped (should_stop)
    ended_by: str = ""
    messages: list[str] = field(default_factory=list)
    # What an evaluation measured of the episode's progress from outside the policy's view
    # (the twin's funnel: ``stage``, ``min_hand_distance_m``); empty where nothing did.
    progress: dict[str, Any] = field(default_factory=dict)

    def timing(self) -> dict[str, Any]:
        """Control-period and inference figures of the episode (milliseconds)."""
        periods = np.array([s.period_ms for s in self.steps[1:]]) if len(self.steps) > 1 else None
        overhead = np.array([s.overhead_ms for s in self.steps]) if self.steps else None
        latency = np.array([c.latency_ms for c in self.chunks if c.latency_ms is not None])

        def q(x: np.ndarray | None, p: float) -> float | None:
            return None if x is None or not len(x) else float(np.quantile(x, p))

        return {
            "steps": len(self.steps),
            "period_p50_ms": q(periods, 0.5),
            "period_p99_ms": q(periods, 0.99),
            "period_max_ms": q(periods, 1.0),
            "overhead_ms": q(overhead, 0.5),
            "overhead_p99_ms": q(overhead, 0.99),
            "infer_ms_p50": q(latency, 0.5),
            "infer_ms_p99": q(latency, 0.99),
            "chunks": len(self.chunks),
            "rejected_chunks": sum(not c.accepted for c in self.chunks),
            # Periods in which no chunk covered the step, so the arms held.
            "stalls": sum(s.action is None for s in self.steps),
        }
