"""How the runtime executes a policy's chunks: the strategy, its horizons, and its clock."""

from __future__ import annotations

from typing import Literal

from pydantic import model_validator

from r2s2r.policy.base import RTC_BETA, GuidanceSchedule
from r2s2r.spec import Spec
from r2s2r.spec.base import Pos

Execution = Literal["rtc", "blend", "sync"]


class RuntimeCfg(Spec):
    """The runtime's settings (see ``r2s2r.runtime.loop``)."""

    # How consecutive chunks are joined: real-time chunking (the next chunk is generated
    # consistent with the committed actions of this one), plain overlap blending, or
    # synchronous execution (the robot waits while the policy infers).
    execution: Execution = "rtc"
    # s: actions of a chunk executed before the next inference starts (RTC's execution
    # horizon; sync: actions executed per chunk). Capped at the policy's horizon.
    exec_horizon: int = 10
    # RTC's guidance: the clip of its weight (beta) and how the weights decay over the
    # overlap (``r2s2r.policy.base.ChunkPrefix``).
    rtc_beta: Pos = RTC_BETA
    rtc_schedule: GuidanceSchedule = "exp"
    # Blending: over how many steps the old chunk hands over to the new one.
    blend_steps: int = 8
    # Chunks the delay estimate ignores (the first calls of a policy are slow: warm-up).
    warmup_calls: int = 2
    # The delay estimate: this quantile of the last ``delay_window`` measured delays.
    delay_window: int = 10
    delay_quantile: float = 0.9
    # On a rig that is not paced to the wall clock (the twin as fast as it can), inference
    # is simulated in lockstep: each chunk arrives this many periods after its observation
    # (deterministic), or, with None, after its measured latency (the simulation then never
    # runs ahead of the wall clock while a chunk is being inferred).
    delay_periods: int | None = 3
    # Episode length limit in seconds (default: the task's episode length).
    max_s: Pos | None = None

    @model_validator(mode="after")
    def _check(self) -> RuntimeCfg:
        if self.exec_horizon < 1:
            raise ValueError(f"exec_horizon must be at least 1, got {self.exec_horizon}")
        if self.blend_steps < 1:
            raise ValueError(f"blend_steps must be at least 1, got {self.blend_steps}")
        if self.delay_periods is not None and self.delay_periods < 0:
            raise ValueError(f"delay_periods must be >= 0 or None, got {self.delay_periods}")
        if not 0.0 < self.delay_quantile <= 1.0:
            raise ValueError(f"delay_quantile must lie in (0, 1], got {self.delay_quantile}")
        if self.warmup_calls < 0 or self.delay_window < 1:
            raise ValueError("warmup_calls must be >= 0 and delay_window >= 1")
        return self
