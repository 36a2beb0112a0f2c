"""The observation and action contract: what crosses between a robot and whatever drives it.

A ``Contract`` is an embodiment, an action mode and the camera views carried. The env, the
vector env, the twin rig's recorder and the dataset schema all build observations, proprio
vectors and actions through it, so their layouts cannot drift apart, and anything that meets
another thing (a dataset and an env, a dataset and a rig) is checked against it in one call.

An observation of one world (a batch of N worlds adds a leading N to every array, the
instruction becomes a tuple of N strings and the embodiment id an (N,) array)::

    tcp_pose           (S, 7)   each arm's TCP pose in the cell frame (x y z qw qx qy qz)
    arm_joints         (S, J)   arm joint positions, base to wrist
    hand_joints        (S, H)   hand joint positions, thumb first
    instruction        str
    embodiment_id      int
    images             {camera: (h, w, 3) uint8}   where views are rendered
    head_depth         (h, w) float32, metres      where depth is rendered
    environment_state  (7,)     the presented object's pose, where it is tracked

An action is, per arm (S of them), the arm's command (``tcp``: a TCP pose target (7);
``joint``: J joint targets), then its hand's H joint targets. The proprio vector (a dataset's
``observation.state``) is every TCP pose, then every arm's joints, then every hand's joints.
"""

from __future__ import annotations

import string
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
from gymnasium import spaces

from r2s2r.sim.embodiment import (
    EMBODIMENT_IDS,
    POSE_NAMES,
    TCP_POSE_DIM,
    ActionMode,
    Embodiment,
)

# The proprio parts of an observation, in the order of the proprio vector.
PROPRIO_KEYS = ("tcp_pose", "arm_joints", "hand_joints")
# The environment state: the presented object's pose in the cell frame.
ENV_STATE_NAMES: tuple[str, ...] = tuple(f"object_{p}" for p in POSE_NAMES)
ENV_STATE_DIM = len(ENV_STATE_NAMES)
# Bounds of a TCP pose target in an action (metres; quaternion entries).
_TCP_BOUND = (2.0,) * 3 + (1.0,) * 4
Views = Literal["equal", "subset", "ignore"]


class ContractError(ValueError):
    """Two things that do not fit one another, or data that does not fit a contract."""


@dataclass(frozen=True)
class Contract:
    """The observation and action layout of one embodiment in one action mode."""

    embodiment: Embodiment
    action_mode: ActionMode
    # The camera views an observation carries (a subset of the embodiment's, or none).
    cameras: tuple[str, ...]

    @classmethod
    def of(
        cls,
        embodiment: Embodiment,
        action_mode: ActionMode = "tcp",
        cameras: tuple[str, ...] | None = None,
    ) -> Contract:
        """The contract of ``embodiment`` in ``action_mode``, with all its cameras unless
        ``cameras`` names the views carried."""
        embodiment.action_dim(action_mode)  # Validates the mode.
        views = embodiment.cameras if cameras is None else tuple(cameras)
        return cls(embodiment, action_mode, views)

    # ------------------------------------------------------------------ sizes and names
    @property
    def arm_action_dim(self) -> int:
        return self.embodiment.arm_action_dim(self.action_mode)

    @property
    def action_per_arm(self) -> int:
        return self.embodiment.action_per_arm(self.action_mode)

    @property
    def action_dim(self) -> int:
        return self.embodiment.action_dim(self.action_mode)

    @property
    def state_dim(self) -> int:
        return self.embodiment.state_dim

    def state_names(self) -> list[str]:
        """The proprio entries: TCP poses, arm joints, hand joints, each arm after arm."""
        e = self.embodiment
        return (
            [f"{a}_tcp_{p}" for a in e.sides for p in POSE_NAMES]
            + [f"{a}_arm_{j}" for a in e.sides for j in e.arm_joints]
            + [f"{a}_hand_{h}" for a in e.sides for h in e.hand_joints]
        )

    def action_names(self) -> list[str]:
        """The action entries, per arm: a TCP or joint target, then the hand."""
        e = self.embodiment
        if self.action_mode == "tcp":
            arm = [f"tcp_{p}" for p in POSE_NAMES]
        else:
            arm = [f"arm_{j}" for j in e.arm_joints]
        return [f"{a}_{n}" for a in e.sides for n in [*arm, *(f"hand_{h}" for h in e.hand_joints)]]

    def _proprio_shapes(self) -> dict[str, tuple[int, int]]:
        e = self.embodiment
        return {
            "tcp_pose": (e.num_arms, TCP_POSE_DIM),
            "arm_joints": (e.num_arms, e.arm_dof),
            "hand_joints": (e.num_arms, e.hand_dof),
        }

    def state_layout(self) -> dict[str, slice]:
        """Where each proprio part lies in the proprio vector."""
        out, start = {}, 0
        for key, (arms, k) in self._proprio_shapes().items():
            out[key] = slice(start, start + arms * k)
            start += arms * k
        return out

    def state_quaternions(self) -> tuple[int, ...]:
        """The proprio columns where each arm's TCP quaternion (qw qx qy qz) starts."""
        start = self.state_layout()["tcp_pose"].start
        return tuple(start + arm * TCP_POSE_DIM + 3 for arm in range(self.embodiment.num_arms))

    # ------------------------------------------------------------------ building
    def observation(
        self,
        tcp_pose: np.ndarray,
        arm_joints: np.ndarray,
        hand_joints: np.ndarray,
        instruction: str | tuple[str, ...],
        images: Mapping[str, np.ndarray] | None = None,
        head_depth: np.ndarray | None = None,
        environment_state: np.ndarray | None = None,
    ) -> dict[str, Any]:
        """An observation (see the module docstring): of one world, or of a batch when the
        arrays have a leading dimension."""
        batch = np.shape(tcp_pose)[:-2]
        proprio = {"tcp_pose": tcp_pose, "arm_joints": arm_joints, "hand_joints": hand_joints}
        for key, tail in self._proprio_shapes().items():
            _check_shape(key, proprio[key], (*batch, *tail))
        eid = self.embodiment.id
        obs: dict[str, Any] = {
            **proprio,
            "instruction": instruction,
            "embodiment_id": np.full(batch, eid) if batch else eid,
        }
        if images is not None:
            if set(images) != set(self.cameras):
                raise ContractError(
                    f"observation: images of cameras {sorted(images)}, "
                    f"expected {list(self.cameras)}"
                )
            obs["images"] = {c: images[c] for c in self.cameras}
        if head_depth is not None:
            obs["head_depth"] = head_depth
        if environment_state is not None:
            _check_shape("environment_state", environment_state, (*batch, ENV_STATE_DIM))
            obs["environment_state"] = environment_state
        return obs

    def state(self, obs: Mapping[str, Any]) -> np.ndarray:
        """The proprio vector (state_dim,) of an observation ((N, state_dim) of a batch)."""
        parts = [np.asarray(obs[k]) for k in PROPRIO_KEYS]
        batch = parts[0].shape[:-2]
        out = np.concatenate([p.reshape(*batch, -1) for p in parts], axis=-1)
        if out.shape[-1] != self.state_dim:
            raise ContractError(
                f"observation: its proprio has {out.shape[-1]} entries, expected {self.state_dim}"
            )
        return out

    def split_state(self, state: np.ndarray) -> dict[str, np.ndarray]:
        """Proprio vectors (..., state_dim) -> tcp_pose (..., S, 7), arm_joints (..., S, J),
        hand_joints (..., S, H)."""
        state = np.asarray(state)
        _check_shape("state", state, (*state.shape[:-1], self.state_dim))
        shapes, layout = self._proprio_shapes(), self.state_layout()
        return {k: state[..., layout[k]].reshape(*state.shape[:-1], *shapes[k]) for k in shapes}

    def split_action(self, action: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Actions (..., action_dim) -> arm commands (..., S, A) and hand targets (..., S, H)."""
        action = np.asarray(action)
        _check_shape("action", action, (*action.shape[:-1], self.action_dim))
        per_arm = action.reshape(*action.shape[:-1], self.embodiment.num_arms, self.action_per_arm)
        a = self.arm_action_dim
        return per_arm[..., :a], per_arm[..., a:]

    def join_action(self, arm: np.ndarray, hand: np.ndarray) -> np.ndarray:
        """Arm commands (..., S, A) and hand targets (..., S, H) -> actions (..., action_dim)."""
        arm, hand = np.asarray(arm, dtype=float), np.asarray(hand, dtype=float)
        e = self.embodiment
        _check_shape("arm commands", arm, (*arm.shape[:-2], e.num_arms, self.arm_action_dim))
        _check_shape("hand targets", hand, (*arm.shape[:-2], e.num_arms, e.hand_dof))
        return np.concatenate([arm, hand], axis=-1).reshape(*arm.shape[:-2], self.action_dim)

    # ------------------------------------------------------------------ spaces
    def observation_space(
        self,
        size: tuple[int, int],
        images: bool,
        depth: bool = False,
        environment_state: bool = False,
    ) -> spaces.Dict:
        """The space of one world's observation; ``size`` is (width, height) of the views."""
        w, h = size
        shapes = self._proprio_shapes()
        obs: dict[str, spaces.Space[Any]] = {
            k: spaces.Box(-np.inf, np.inf, shape, np.float64) for k, shape in shapes.items()
        }
        obs["instruction"] = spaces.Text(max_length=256, charset=string.printable)
        obs["embodiment_id"] = spaces.Discrete(len(EMBODIMENT_IDS))
        if images:
            obs["images"] = spaces.Dict(
                {c: spaces.Box(0, 255, (h, w, 3), np.uint8) for c in self.cameras}
            )
        if depth:
            obs["head_depth"] = spaces.Box(0.0, np.inf, (h, w), np.float32)
        if environment_state:
            obs["environment_state"] = spaces.Box(-np.inf, np.inf, (ENV_STATE_DIM,), np.float64)
        return spaces.Dict(obs)

    def action_space(self) -> spaces.Box:
        """The space of one world's action, bounded by the embodiment's joint limits (and, in
        tcp mode, by a 2 m box and unit quaternion entries)."""
        e = self.embodiment
        hand = e.hand_limits
        if self.action_mode == "tcp":
            bound = np.array(_TCP_BOUND)
            lo, hi = np.concatenate([-bound, hand[:, 0]]), np.concatenate([bound, hand[:, 1]])
        else:
            arm = e.arm_limits
            lo = np.concatenate([arm[:, 0], hand[:, 0]])
            hi = np.concatenate([arm[:, 1], hand[:, 1]])
        n = e.num_arms
        return spaces.Box(np.tile(lo, n), np.tile(hi, n), (self.action_dim,), np.float64)

    # ------------------------------------------------------------------ compatibility
    def check_compatible(
        self, other: Contract, what: str, this: str = "this one", views: Views = "equal"
    ) -> None:
        """Raise ``ContractError`` naming every way ``other`` (called ``what``, e.g. "dataset
        DIR") differs from this contract (called ``this``, e.g. "this rig"): embodiment, arms,
        joints per arm, hand joints, action mode, sizes and, by ``views``, cameras (``equal``;
        ``subset``: ``other``'s cameras must all be here; ``ignore``)."""
        mine, theirs = self.embodiment, other.embodiment
        diff: list[str] = []

        def differ(theirs_: str, mine_: str) -> None:
            diff.append(f"{what} has {theirs_}, {this} has {mine_}")

        if (theirs.name, theirs.id) != (mine.name, mine.id):
            diff.append(
                f"{what} is embodiment {theirs.name!r} (id {theirs.id}), {this} is "
                f"{mine.name!r} (id {mine.id})"
            )
        if theirs.sides != mine.sides:
            differ(_arms(theirs.sides), _arms(mine.sides))
        if theirs.arm_joints != mine.arm_joints:
            differ(*_joints(theirs, mine, "arm_joints", "joints"))
        if theirs.hand_joints != mine.hand_joints:
            differ(*_joints(theirs, mine, "hand_joints", "hand joints"))
        if other.action_mode != self.action_mode:
            diff.append(
                f"{what} acts in {other.action_mode!r} mode, {this} in {self.action_mode!r} mode"
            )
        if (other.state_dim, other.action_dim) != (self.state_dim, self.action_dim):
            differ(_dims(other), _dims(self))
        if views == "equal" and other.cameras != self.cameras:
            differ(f"cameras {_names(other.cameras)}", _names(self.cameras))
        elif views == "subset":
            lacking = [c for c in other.cameras if c not in self.cameras]
            if lacking:
                diff.append(
                    f"{what} has cameras {_names(tuple(lacking))} that {this} lacks "
                    f"({this} has {_names(self.cameras)})"
                )
        elif views not in ("equal", "subset", "ignore"):
            raise ValueError(f"views must be 'equal', 'subset' or 'ignore', got {views!r}")
        if diff:
            raise ContractError(f"{what} does not fit {this}: " + "; ".join(diff))


def _check_shape(name: str, value: Any, want: tuple[int, ...]) -> None:
    got = np.shape(value)
    if got != want:
        raise ContractError(f"{name}: expected shape {want}, got {got}")


def _names(names: tuple[str, ...]) -> str:
    return "(" + ", ".join(names) + ")"


def _arms(sides: tuple[str, ...]) -> str:
    return f"{_count(len(sides))} {_names(sides)}"


def _joints(theirs: Embodiment, mine: Embodiment, field: str, kind: str) -> tuple[str, str]:
    a, b = getattr(theirs, field), getattr(mine, field)
    # Equal counts differ by name: then the names say how.
    show = (lambda n: f" {_names(n)}") if len(a) == len(b) else (lambda n: "")
    return (
        f"{_count(theirs.num_arms)} x {len(a)} {kind}{show(a)}",
        f"{_count(mine.num_arms)} x {len(b)} {kind}{show(b)}",
    )


def _count(arms: int) -> str:
    return f"{arms} arm{'' if arms == 1 else 's'}"


def _dims(c: Contract) -> str:
    return f"{c.state_dim} state and {c.action_dim} action entries"
