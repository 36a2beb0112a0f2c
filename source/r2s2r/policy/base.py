"""The seam between a policy and what runs it: ``reset()``, ``infer(observation)`` -> an action
chunk, and the metadata that says which robot, actions and rate the chunk is for.

The observation is the dict the env returns (``PickSortEnv``: ``tcp_pose``, ``arm_joints``,
``hand_joints``, ``instruction``, ``embodiment_id`` and, with cameras, ``images``); a chunk is
the next ``action_horizon`` actions, executed one per control period before ``infer`` is called
again (openpi's action-chunk broker).

A ``GuidedPolicy`` also answers ``infer_guided(observation, prefix)``: a chunk that agrees with
the actions already committed to (a ``ChunkPrefix``), by real-time chunking's guided
inpainting (RTC, Black et al. 2025), so that the runtime can infer while the previous chunk
still executes and switch chunks without a jump.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal, Protocol, get_args, runtime_checkable

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
    # The state columns where each unit quaternion (qw qx qy qz) starts: a request whose
    # quaternions are not unit is refused before inference (none: not checked).
    quaternions: tuple[int, ...] = ()
    # The policy reads the presented object's true pose (``data.config.ENV_STATE_KEY`` in a
    # request): a diagnostic policy that only a rig tracking the object (the twin) can run.
    environment_state: bool = False

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
        if any(not 0 <= q <= self.state_dim - 4 for q in self.quaternions):
            raise PolicyError(
                f"quaternions: {list(self.quaternions)}, expected columns in "
                f"[0, {self.state_dim - 4}] (the state has {self.state_dim} entries)"
            )


# A request in the dataset's form (what a policy server receives): one (H, W, 3) uint8 image
# per camera under ``data.config.IMAGE_PREFIX + camera``, ``data.config.STATE_KEY``
# (state_history, state_dim) float32 oldest first, and ``TASK_KEY``, the instruction.
TASK_KEY = "task"
# Optional in a request: (state_history,) bool, True where the history reaches back before the
# episode's start (those rows repeat the first sample; training masks them the same way).
STATE_PAD_KEY = "observation.state_is_pad"
# Optional in a request: the belt drive's speed in m/s (a float), for policies that read it.
BELT_SPEED_KEY = "observation.belt_speed"


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


# How RTC's guidance weights decay between the committed actions and the free tail:
# linearly, or exponentially (c (e^c - 1) / (e - 1) of the linear c; the paper's choice).
GuidanceSchedule = Literal["exp", "linear"]
# The default clip of RTC's guidance weight (beta) for our 2 Euler steps. The weight is
# infinite at the first step and 2 at the second (t = 0.5), so beta = 2 weighs both alike,
# and beta times the step size is 1, as LeRobot's 10 for 10 steps. Measured on the tiny
# preset trained on twin takes (d = 2, 4, 8): beta 2 to 3 join the prefix best at the delay,
# 2 keeping the free tail nearer the unguided chunk; from 5 up the chunks overshoot (farther
# from the prefix than unguided ones, and from the recorded actions).
RTC_BETA = 2.0


@dataclass(frozen=True, eq=False)
class ChunkPrefix:
    """What the previous chunk will still do, as seen from a new chunk's observation.

    ``actions[i]`` (n, A) float64, in robot units, is what executes at the new chunk's step i
    (step 0 is the observation's time); the first ``delay`` (d) of them are committed: they
    execute whatever the new chunk says, as it arrives only after them. ``exec_horizon`` (s)
    is how many steps of a chunk run before the next one takes over, so the previous chunk
    overlaps the new one on its first H - s steps. Guidance pulls the new chunk onto the
    committed actions (weight 1), less and less onto the rest of the overlap, and leaves
    steps from min(H - s, n) on free (``weights``). ``beta`` clips the guidance weight of
    the first Euler steps; ``schedule`` is the decay (``GuidanceSchedule``).
    """

    actions: np.ndarray
    delay: int
    exec_horizon: int
    beta: float = RTC_BETA
    schedule: GuidanceSchedule = "exp"

    def __post_init__(self) -> None:
        actions = np.asarray(self.actions)
        if actions.ndim != 2 or actions.dtype.kind not in "fiu" or actions.shape[0] < 1:
            raise PolicyError(
                f"prefix.actions: expected (n >= 1, action_dim) floats, got "
                f"{actions.shape} {actions.dtype}"
            )
        if not np.isfinite(actions).all():
            bad = tuple(int(i) for i in np.argwhere(~np.isfinite(actions))[0])
            raise PolicyError(
                f"prefix.actions: expected finite values, got {actions[bad]} at {bad}"
            )
        for name in ("delay", "exec_horizon"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | np.integer):
                raise PolicyError(f"prefix.{name}: expected an int, got {type(value).__name__}")
            object.__setattr__(self, name, int(value))
        n, d, s = actions.shape[0], self.delay, self.exec_horizon
        if d < 0:
            raise PolicyError(f"prefix.delay: expected at least 0 steps, got {d}")
        if d > n:
            raise PolicyError(f"prefix.delay: {d} committed steps but prefix.actions has only {n}")
        if s < max(d, 1):
            raise PolicyError(
                f"prefix.exec_horizon: expected at least max(delay, 1) = {max(d, 1)}, got {s}"
            )
        beta = self.beta
        number = isinstance(beta, int | float | np.number) and not isinstance(beta, bool)
        if not (number and math.isfinite(beta) and beta > 0):
            raise PolicyError(f"prefix.beta: expected a positive finite number, got {self.beta!r}")
        object.__setattr__(self, "beta", float(self.beta))
        if self.schedule not in get_args(GuidanceSchedule):
            raise PolicyError(
                f"prefix.schedule: expected one of {get_args(GuidanceSchedule)}, "
                f"got {self.schedule!r}"
            )
        actions = actions.astype(np.float64)  # A copy: the caller's array stays theirs.
        actions.flags.writeable = False
        object.__setattr__(self, "actions", actions)

    def check(self, horizon: int, action_dim: int) -> None:
        """A ``PolicyError`` unless the prefix fits chunks of ``horizon`` (H) actions of
        ``action_dim`` numbers: d <= s <= H - d, as RTC requires."""
        if self.actions.shape[1] != action_dim:
            raise PolicyError(
                f"prefix.actions: expected (n, {action_dim}), got {self.actions.shape}"
            )
        if self.exec_horizon > horizon - self.delay:
            raise PolicyError(
                f"prefix.exec_horizon: expected at most H - delay = {horizon - self.delay} "
                f"(H = {horizon}, delay = {self.delay}), got {self.exec_horizon}"
            )

    def weights(self, horizon: int) -> np.ndarray:
        """The guidance weights (H,) float64 of a chunk of ``horizon`` (H) steps: 1 for
        i < d, c_i = (e - i) / (e - d + 1) (or c_i (e^c_i - 1) / (e - 1) for ``exp``) for
        d <= i < e, 0 from e = min(H - s, n) on (no target there)."""
        d = self.delay
        end = max(min(horizon - self.exec_horizon, self.actions.shape[0]), d)
        out = np.zeros(horizon)
        out[: min(d, horizon)] = 1.0
        steps = np.arange(d, end)
        c = (end - steps) / (end - d + 1)
        out[d:end] = c if self.schedule == "linear" else c * np.expm1(c) / (math.e - 1)
        return out


@runtime_checkable
class GuidedPolicy(Policy, Protocol):
    """A ``Policy`` that can also continue a chunk that is executing (RTC)."""

    def infer_guided(self, observation: dict[str, Any], prefix: ChunkPrefix) -> np.ndarray:
        """The next chunk (action_horizon, action_dim) float64 for ``observation`` pulled
        onto ``prefix.actions`` on its first ``prefix.delay`` steps and blending from them
        into the policy's own after (``ChunkPrefix.weights``). The pull is soft (as far as
        the model lets it): the caller executes the committed actions themselves."""
        ...
