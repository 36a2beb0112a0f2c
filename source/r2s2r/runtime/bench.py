"""``r2s2r runtime bench``: how well the loop keeps its 20 ms period on the wall-clock twin.

One policy runs twice on the twin paced to the wall clock, with the same seed: through the
runtime as configured (inference in its thread, chunks joined by RTC or blending), and as
its peer in synchronous execution (the control loop waits for every inference, as a loop
that calls the policy itself does). For each: the control periods' jitter (p50/p99/max),
the inference latency, the loop's own work per period (observation, command, watchdog;
the rig's step excluded) and the stalls (periods after the first chunk with no fresh
action: the arms held, or the loop waited for the policy), against the 20 ms budget.
Without a policy of its own it runs the scripted operator's take replayed in chunks, made
``latency_ms`` slower (``ReplayPolicy``, ``slow``): a policy slower than the period, whose
latency async execution hides.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from r2s2r.policy.base import Policy
from r2s2r.rig.kinds import RigOptions, open_rig
from r2s2r.rig.twin import TwinRig
from r2s2r.runtime.config import Execution, RuntimeCfg
from r2s2r.runtime.episode import EpisodeLog
from r2s2r.runtime.loop import CONTROL_HZ

BUDGET_MS = 1e3 / CONTROL_HZ


def stall_periods(episode: EpisodeLog) -> dict[str, int]:
    """Periods after the episode's first executed action without a fresh one: ``held``
    (no chunk covered them) and ``waited`` (the rig stepped while the loop waited for the
    policy, in synchronous execution: gaps in the steps' rig times)."""
    steps = episode.steps
    first = next((i for i, s in enumerate(steps) if s.action is not None), len(steps))
    held = sum(s.action is None for s in steps[first:])
    t = np.array([s.t for s in steps[first:]])
    gaps = np.round(np.diff(t) * CONTROL_HZ).astype(int) - 1 if len(t) > 1 else np.zeros(0)
    waited = int(np.clip(gaps, 0, None).sum())
    return {"held": held, "waited": waited, "stalls": held + waited}


def figures(episode: EpisodeLog) -> dict[str, Any]:
    """The bench's figures of one episode."""
    timing = episode.timing()
    stalls = stall_periods(episode)
    delays = [c.delay for c in episode.chunks[1:] if c.accepted]
    out = {
        k: timing[k]
        for k in (
            "period_p50_ms",
            "period_p99_ms",
            "period_max_ms",
            "overhead_ms",
            "overhead_p99_ms",
            "infer_ms_p50",
            "infer_ms_p99",
            "steps",
            "chunks",
            "rejected_chunks",
        )
    }
    periods = np.array([s.period_ms for s in episode.steps[1:]])
    out.update(
        stalls=stalls["stalls"],
        held_periods=stalls["held"],
        waited_periods=stalls["waited"],
        over_budget_periods=int((periods > 1.5 * BUDGET_MS).sum()),
        delay_p50=float(np.median(delays)) if delays else None,
        outcome=episode.outcome,
    )
    return out


def _run(make: Callable[[TwinRig], Policy], cfg: RuntimeCfg, seconds: float, seed: int) -> Any:
    from r2s2r.rig.safety import SafetySupervisor
    from r2s2r.runtime.episode import start_episode
    from r2s2r.runtime.loop import Runtime

    with open_rig("twin", RigOptions(seed=seed, realtime=True)) as twin:
        sup = SafetySupervisor(dict(twin.arms), dict(twin.hands), twin.now, twin.embodiment)
        with Runtime(twin, make(twin), sup, cfg) as runtime:
            start = start_episode(twin, twin.task, twin.nominal)
            return figures(runtime.run_episode(start, seconds))


def run_bench(
    policy: Path | None = None,
    seconds: float = 6.0,
    execution: Execution = "rtc",
    latency_ms: float = 60.0,
    seed: int = 0,
    device: str = "auto",
) -> dict[str, Any]:
    """The figures of ``policy`` (a training run; None: the built-in slow replay) through
    the runtime with ``execution`` and of its synchronous peer, ``seconds`` each."""
    from r2s2r.runtime.replay import ReplayPolicy, operator_take, slow

    if policy is None:
        take = operator_take(seed)
        name = f"replay of the scripted operator (seed {seed}), {latency_ms:g} ms per inference"

        def make(twin: TwinRig) -> Policy:
            return slow(ReplayPolicy(take, twin.embodiment, twin.now), latency_ms)

    else:
        from r2s2r.policy.learned import load_policy

        learned = load_policy(policy, device=device)
        name = str(policy)

        def make(twin: TwinRig) -> Policy:
            return learned

    runs = _run(make, RuntimeCfg(execution=execution), seconds, seed)
    peer = _run(make, RuntimeCfg(execution="sync"), seconds, seed)

    def ratio(key: str) -> float | None:
        a, b = runs[key], peer[key]
        return None if a is None or b is None or a == 0 else float(b / a)

    return {
        "policy": name,
        "execution": execution,
        "seconds": seconds,
        "budget_ms": BUDGET_MS,
        **runs,
        "overhead_share_of_budget": (runs["overhead_ms"] or 0.0) / BUDGET_MS,
        "peer": {"execution": "sync", **peer},
        "peer_ratio": {
            "period_p99": ratio("period_p99_ms"),
            "period_max": ratio("period_max_ms"),
            "stalls": (peer["stalls"], runs["stalls"]),
        },
    }
