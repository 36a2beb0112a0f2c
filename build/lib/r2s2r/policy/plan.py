"""A scripted policy: one that follows a generated plan (the commands a behavior made for a
task instance), so that scripted and learned policies run in the same loop."""

from __future__ import annotations

from typing import Any

import numpy as np

from r2s2r.behavior.behaviors import Behavior
from r2s2r.behavior.instance import TaskInstance
from r2s2r.policy.base import PolicyError, PolicyMetadata
from r2s2r.sim.embodiment import Embodiment
from r2s2r.sim.scene import nominal_embodiment


class PlanPolicy:
    """Returns a plan's commands (T, action_dim) ``horizon`` at a time, in order, whatever it
    observes; past the end it holds the last command (as ``Executor.run`` does). Plans
    command ``embodiment`` (the nominal cell's robot by default) by TCP pose targets."""

    def __init__(
        self,
        commands: np.ndarray,
        horizon: int = 16,
        control_hz: float = 50.0,
        embodiment: Embodiment | None = None,
    ) -> None:
        embodiment = embodiment or nominal_embodiment()
        dim = embodiment.action_dim("tcp")
        commands = np.asarray(commands, dtype=np.float64)
        if commands.ndim != 2 or len(commands) == 0 or commands.shape[1] != dim:
            raise PolicyError(
                f"commands: expected a plan (T, {dim}) with T >= 1, got shape {commands.shape}"
            )
        self.commands = commands
        self._metadata = PolicyMetadata(
            embodiment.name, "tcp", dim, horizon, control_hz, state_dim=embodiment.state_dim
        )
        self._next = 0

    @classmethod
    def from_behavior(
        cls,
        behavior: Behavior,
        instance: TaskInstance,
        rng: np.random.Generator,
        horizon: int = 16,
        control_hz: float = 50.0,
        embodiment: Embodiment | None = None,
    ) -> PlanPolicy:
        """The policy that follows what ``behavior`` makes for ``instance`` (drawing from
        ``rng``); raises ``PolicyError`` with the behavior's reason when it makes nothing."""
        made = behavior.commands(instance, rng)
        if made.actions is None:
            raise PolicyError(f"no plan for {instance.object_name}: {made.reason}: {made.detail}")
        return cls(made.actions, horizon, control_hz, embodiment)

    @property
    def metadata(self) -> PolicyMetadata:
        return self._metadata

    def reset(self) -> None:
        """Follow the plan from its first command again."""
        self._next = 0

    def infer(self, observation: dict[str, Any]) -> np.ndarray:
        """The next ``horizon`` commands (horizon, action_dim); the observation is not used."""
        steps = self._next + np.arange(self._metadata.action_horizon)
        self._next += self._metadata.action_horizon
        return self.commands[np.minimum(steps, len(self.commands) - 1)]
