"""The seam between a policy and what runs it: ``reset()``, ``infer(observation)`` -> an action
chunk, and the metadata that says which robot, actions and rate the chunk is for.

The observation is the dict the env returns (``PickSortEnv``: ``tcp_pose``, ``arm_joints``,
``hand_joints``, ``instruction``, ``embodiment_id`` and, with cameras, ``images``); a chunk is
the next ``action_horizon`` actions, executed one per control period before ``infer`` is called
again (openpi's action-chunk broker).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, get_args, runtime_checkable

import numpy as np

from r2s2r.sim.embodiment import EMBODIMENT_IDS, ActionMode


class PolicyError(ValueError):
    """A policy that cannot act (bad metadata, or no plan to follow)."""


@dataclass(frozen=True)
class PolicyMetadata:
    """What a policy's actions are for."""

    # The embodiment the actions drive (a key of ``EMBODIMENT_IDS``).
    embodiment: str
    # How an action commands the arms: TCP pose targets or joint targets (``ActionMode``).
    action_mode: str
    # Numbers per action (both arms).
    action_dim: int
    # Actions per chunk (H).
    action_horizon: int
    # Actions per second.
    control_hz: float
    # The camera views the policy reads (none for a policy that ignores images).
    cameras: tuple[str, ...] = ()
    # The proprio vector's size, and how many past samples (oldest first, the newest is now)
    # a request in the dataset's form carries as ``observation.state`` (state_history, state_dim).
    state_dim: int = 0
    state_history: int = 1

    def __post_init__(self) -> None:
        if self.embodiment not in EMBODIMENT_IDS:
            raise PolicyError(f"embodiment: {EMBODIMENT_IDS.unknown(self.embodiment)}")
        modes = get_args(ActionMode)
        if self.action_mode not in modes:
            raise PolicyError(f"action_mode: expected one of {modes}, got {self.action_mode!r}")
        for name in ("action_dim", "action_horizon", "state_history"):
            if getattr(self, name) < 1:
                raise PolicyError(f"{name}: expected at least 1, got {getattr(self, name)}")
        if not self.control_hz > 0:
            raise PolicyError(f"control_hz: expected a positive rate, got {self.control_hz}")


# A request in the dataset's form (what a policy server receives): one (H, W, 3) uint8 image
# per camera under ``data.config.IMAGE_PREFIX + camera``, ``data.config.STATE_KEY``
# (state_history, state_dim) float32 oldest first, and ``TASK_KEY``, the instruction.
TASK_KEY = "task"
# Optional in a request: (state_history,) bool, True where the history reaches back before the
# episode's start (those rows repeat the first sample; training masks them the same way).
STATE_PAD_KEY = "observation.state_is_pad"


@runtime_checkable
class Policy(Protocol):
    """Maps observations to action chunks."""

    @property
    def metadata(self) -> PolicyMetadata: ...

    def reset(self) -> None:
        """Start a new episode (forget what the last one left)."""
        ...

    def infer(self, observation: dict[str, Any]) -> np.ndarray:
        """The next actions (action_horizon, action_dim) float64 for ``observation``: the
        env's observation dict, or a request in the dataset's form (see ``TASK_KEY``)."""
        ...


@dataclass(frozen=True)
class ChunkPrefix:
    """What the chunk being executed will still do when a new one is inferred (real-time
    chunking): ``actions[i]`` (n, action_dim) float64, robot units, runs at the new chunk's
    step ``i`` (its step 0 is the observation's time); the first ``delay`` of them are
    committed (executed whatever happens); ``exec_horizon`` (s) actions of the new chunk
    run before the one after it is inferred."""

    actions: np.ndarray
    delay: int
    exec_horizon: int

    def __post_init__(self) -> None:
        actions = np.asarray(self.actions, dtype=np.float64)
        if actions.ndim != 2 or len(actions) == 0:
            raise PolicyError(
                f"prefix.actions: expected (n, action_dim) with n >= 1, got {actions.shape}"
            )
        if not np.isfinite(actions).all():
            raise PolicyError("prefix.actions: non-finite values")
        if not 0 <= self.delay <= len(actions):
            raise PolicyError(
                f"prefix.delay: expected 0 <= d <= {len(actions)} (the prefix's length), "
                f"got {self.delay}"
            )
        if self.exec_horizon < 1:
            raise PolicyError(f"prefix.exec_horizon: expected at least 1, got {self.exec_horizon}")
        object.__setattr__(self, "actions", actions)


@runtime_checkable
class GuidedPolicy(Policy, Protocol):
    """A policy that can generate a chunk consistent with a committed prefix (RTC)."""

    def infer_guided(self, observation: dict[str, Any], prefix: ChunkPrefix) -> np.ndarray:
        """The next actions (action_horizon, action_dim) float64, their first ``prefix.delay``
        equal (as nearly as the policy can) to the prefix's and continuing from them."""
        ...
