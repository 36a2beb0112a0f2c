"""Policies for the benchmark and the fault injection: a recorded take replayed in chunks,
and any policy made slower.

``ReplayPolicy`` returns a take's executed actions in chunks of ``horizon``, starting at the
step of the episode it is asked at (the rig clock since ``reset``), whatever it observes: an
open-loop replay that, on the twin of the take's seed, repeats the take. It is the base
policy of the fault injection and the benchmark (``r2s2r runtime bench``). Takes come from
the scripted operator run through the runtime (``operator_take``) or from a recorded
dataset episode (``dataset_take``). ``slow`` makes a policy slower than the control period
(with slow first calls, where asked), as a large model is.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from r2s2r.policy.base import ChunkPrefix, Policy, PolicyError, PolicyMetadata
from r2s2r.runtime.episode import EpisodeStart
from r2s2r.runtime.remote import takes_prefixes
from r2s2r.sim.embodiment import Embodiment

CONTROL_HZ = 50.0


class ReplayPolicy:
    """A take's actions (T, A), ``horizon`` at a time from the current step (``clock`` is
    the rig's, read at each call; past the take's end it holds its last action)."""

    def __init__(
        self,
        actions: np.ndarray,
        embodiment: Embodiment,
        clock: Callable[[], float],
        horizon: int = 16,
        cameras: tuple[str, ...] = (),
    ) -> None:
        actions = np.asarray(actions, dtype=np.float64)
        dim = embodiment.action_dim("tcp")
        if actions.ndim != 2 or len(actions) == 0 or actions.shape[1] != dim:
            raise PolicyError(f"take: expected actions (T, {dim}) with T >= 1, got {actions.shape}")
        if not np.isfinite(actions).all():
            raise PolicyError("take: its actions hold non-finite values")
        self.actions = actions
        self.clock = clock
        self._metadata = PolicyMetadata(
            embodiment.name,
            "tcp",
            dim,
            horizon,
            CONTROL_HZ,
            cameras=cameras,
            state_dim=embodiment.state_dim,
        )
        self._t0 = clock()

    @property
    def metadata(self) -> PolicyMetadata:
        return self._metadata

    def reset(self) -> None:
        """Start the take over: the episode begins now (on the rig's clock)."""
        self._t0 = self.clock()

    def step_now(self) -> int:
        """The episode's step at this moment."""
        return int(round((self.clock() - self._t0) * CONTROL_HZ))

    def infer(self, observation: dict[str, Any]) -> np.ndarray:
        """The take's actions from the current step (horizon, A)."""
        steps = self.step_now() + np.arange(self._metadata.action_horizon)
        return self.actions[np.minimum(steps, len(self.actions) - 1)].copy()


def operator_take(seed: int, max_s: float | None = None, condition: str = "nominal") -> np.ndarray:
    """The actions (T, A) the twin's scripted operator executes in the first episode of the
    twin of ``seed`` (run through the runtime in lockstep: what ``r2s2r record`` records)."""
    from r2s2r.rig.kinds import RigOptions, open_rig
    from r2s2r.rig.safety import SafetySupervisor
    from r2s2r.runtime.config import RuntimeCfg
    from r2s2r.runtime.episode import start_episode
    from r2s2r.runtime.loop import Runtime
    from r2s2r.runtime.scripted import OperatorPolicy

    with open_rig("twin", RigOptions(seed=seed, condition=condition)) as twin:
        sup = SafetySupervisor(dict(twin.arms), dict(twin.hands), twin.now, twin.embodiment)
        with Runtime(twin, OperatorPolicy.for_twin(twin, seed), sup, RuntimeCfg()) as rt:
            start = start_episode(twin, twin.task, twin.nominal)
            episode = rt.run_episode(start, max_s or twin.task.episode_s)
    actions = [s.action for s in episode.steps if s.action is not None]
    if not actions:
        raise PolicyError(f"the scripted operator executed no action on seed {seed}")
    return np.stack(actions)


def dataset_take(root: str | Path, episode: int = 0) -> np.ndarray:
    """The actions (T, A) of ``episode`` of the dataset at ``root``."""
    from r2s2r.data import Dataset
    from r2s2r.data.config import ACTION_KEY

    with Dataset(root) as ds:
        if not 0 <= episode < ds.num_episodes:
            raise PolicyError(
                f"{root}: episode {episode} out of range (the dataset has {ds.num_episodes})"
            )
        return np.asarray(ds.episode_arrays(episode)[ACTION_KEY], dtype=np.float64)


class SlowPolicy:
    """``policy`` whose every inference takes ``latency_ms`` longer, and its first
    ``warmup_calls`` (over its life, not per episode) ``warmup_ms`` longer instead: a model
    slower than the control period, with slow first calls (compilation, caches). The chunk
    is computed first, from the observation as it was; the delay is its late arrival."""

    def __init__(
        self,
        policy: Policy,
        latency_ms: float,
        warmup_calls: int = 0,
        warmup_ms: float = 0.0,
    ) -> None:
        if latency_ms < 0 or warmup_ms < 0 or warmup_calls < 0:
            raise PolicyError("SlowPolicy: latencies and warm-up calls must not be negative")
        self.inner, self.latency_ms = policy, latency_ms
        self.warmup_calls, self.warmup_ms = warmup_calls, warmup_ms
        self.calls = 0

    @property
    def metadata(self) -> PolicyMetadata:
        return self.inner.metadata

    def reset(self) -> None:
        self.inner.reset()

    def begin(self, start: EpisodeStart) -> None:
        begin = getattr(self.inner, "begin", None)
        if begin is not None:
            begin(start)

    def infer(self, observation: dict[str, Any]) -> np.ndarray:
        return self._slow(lambda: self.inner.infer(observation))

    def _slow(self, infer: Callable[[], np.ndarray]) -> np.ndarray:
        chunk = np.asarray(infer(), dtype=np.float64)
        self.calls += 1
        delay = self.warmup_ms if self.calls <= self.warmup_calls else self.latency_ms
        time.sleep(delay / 1e3)
        return chunk


class SlowGuidedPolicy(SlowPolicy):
    """A ``SlowPolicy`` of a policy that takes RTC prefixes."""

    def infer_guided(self, observation: dict[str, Any], prefix: ChunkPrefix) -> np.ndarray:
        inner: Any = self.inner
        return self._slow(lambda: inner.infer_guided(observation, prefix))


def slow(
    policy: Policy, latency_ms: float, warmup_calls: int = 0, warmup_ms: float = 0.0
) -> Policy:
    """``policy`` made slower (``SlowPolicy``), guided where it is."""
    cls = SlowGuidedPolicy if takes_prefixes(policy) else SlowPolicy
    return cls(policy, latency_ms, warmup_calls, warmup_ms)
