"""What the runtime hands a policy: the contract's observation, or a request in the dataset's
form with the proprio history the loop keeps (one sample per control period, as in a
dataset), for policies that read images or a history (learned policies, policy servers),
and the belt drive's speed where the observation has it."""

from __future__ import annotations

from collections import deque
from typing import Any

import numpy as np

from r2s2r.data.config import ENV_STATE_KEY, IMAGE_PREFIX, STATE_KEY
from r2s2r.geometry.rotations import same_hemisphere
from r2s2r.policy.base import BELT_SPEED_KEY, STATE_PAD_KEY, TASK_KEY, PolicyMetadata


def wants_request(metadata: PolicyMetadata) -> bool:
    """Whether a policy takes the dataset's form: it reads camera views or a history."""
    return bool(metadata.cameras) or metadata.state_history > 1


class StateHistory:
    """The last ``size`` proprio samples of an episode, one per period, oldest first; before
    ``size`` periods have passed the first sample fills the rest, marked as padding. The
    quaternions starting at ``quaternions`` stay on the hemisphere of the episode's previous
    sample, as recorded datasets keep them (data/continuity.py)."""

    def __init__(self, size: int, quaternions: tuple[int, ...] = ()) -> None:
        self.size = size
        self.quaternions = quaternions
        self._states: deque[np.ndarray] = deque(maxlen=size)
        self._seen = 0

    def reset(self) -> None:
        self._states.clear()
        self._seen = 0

    def push(self, state: np.ndarray) -> None:
        state = np.asarray(state, dtype=np.float32)
        if self._states:
            state = same_hemisphere(self._states[-1], state, self.quaternions)
        else:
            self._states.extend([state] * self.size)
        self._states.append(state)
        self._seen += 1

    def window(self) -> tuple[np.ndarray, np.ndarray]:
        """(states (size, S) float32 oldest first, padding (size,) bool)."""
        pad = np.arange(self.size) < self.size - self._seen
        return np.stack(self._states), pad


def build_request(
    observation: dict[str, Any], history: StateHistory, cameras: tuple[str, ...]
) -> dict[str, Any]:
    """The request of ``observation`` (with its views of ``cameras``) and the history."""
    states, pad = history.window()
    views = observation.get("images") or {}
    request: dict[str, Any] = {IMAGE_PREFIX + c: views[c] for c in cameras}
    request[STATE_KEY] = states
    request[STATE_PAD_KEY] = pad
    request[TASK_KEY] = str(observation["instruction"])
    if observation.get("belt_speed") is not None:
        request[BELT_SPEED_KEY] = float(observation["belt_speed"])
    if observation.get("environment_state") is not None:
        request[ENV_STATE_KEY] = np.asarray(observation["environment_state"], dtype=np.float32)
    return request
