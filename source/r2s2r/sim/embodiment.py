"""The embodiment: the robot the cell carries, read from the model the scene compiled.

An ``Embodiment`` names the arms, each arm's joints and each hand's joints, and carries their
position limits (the compiled joint ranges, so a vendor model brings its own), the arms'
velocity limits (MJCF has no field for them: the arm builder publishes them and the scene
stores them in the model as one custom numeric per arm), the TCP sites and the cameras.
Every part of the system that needs a robot dimension or limit reads it from here.

The scene names everything by side: an arm's joints ``{side}_{joint}`` (``left_j1``), a
hand's ``{side}_hand_{joint}`` (``left_hand_finger1_joint1``: the vendor's joint name without
its side); both arms carry the same robot.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Literal

import mujoco
import numpy as np

from r2s2r.spec.registry import Registry
from r2s2r.spec.world import ARM_SIDES, CAMERA_NAMES

ActionMode = Literal["tcp", "joint"]
ACTION_MODES: tuple[str, ...] = ("tcp", "joint")
# A TCP pose: position (3) and unit quaternion (w, x, y, z).
POSE_NAMES = ("x", "y", "z", "qw", "qx", "qy", "qz")
TCP_POSE_DIM = len(POSE_NAMES)
# The custom text element holding the embodiment's name in a compiled cell.
NAME_TEXT = "embodiment"

# Embodiment ids, shared with the policy's per-embodiment projectors: an id never changes
# meaning, so ids are registered here once and only added to.
EMBODIMENT_IDS: Registry[int] = Registry("embodiment")
EMBODIMENT_IDS.register("rizon4s_wuji2_bimanual", 0)


class EmbodimentError(ValueError):
    """A model that does not hold a whole embodiment, or arms that differ."""


def arm_prefix(side: str) -> str:
    """The prefix of every element of arm ``side`` in the cell."""
    return f"{side}_"


def hand_prefix(side: str) -> str:
    """The prefix of every element of hand ``side`` in the cell."""
    return f"{side}_hand_"


def velocity_numeric(side: str) -> str:
    """The custom numeric holding arm ``side``'s joint velocity limits (rad/s)."""
    return f"{side}_arm_velocity_limit"


def embodiment_name(arm_robot: str, hand_robot: str, arms: int) -> str:
    """The name of ``arms`` arms of ``arm_robot`` with ``hand_robot`` hands."""
    layout = "bimanual" if arms == 2 else f"{arms}_arm"
    return f"{arm_robot}_{hand_robot}_{layout}"


def joint_ranges(model: mujoco.MjModel, names: tuple[str, ...] | list[str]) -> np.ndarray:
    """The position limits (n, 2) of the joints ``names`` in ``model``."""
    return np.array([model.jnt_range[model.joint(n).id] for n in names], dtype=float)


def _text(model: mujoco.MjModel, name: str) -> str | None:
    i = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_TEXT, name)
    if i < 0:
        return None
    adr, size = int(model.text_adr[i]), int(model.text_size[i])
    return bytes(model.text_data[adr : adr + size - 1]).decode()


def _pairs(a: np.ndarray) -> tuple[tuple[float, float], ...]:
    return tuple((float(lo), float(hi)) for lo, hi in a)


@dataclass(frozen=True)
class Embodiment:
    """The robot of a cell: arms, joints, hands, limits, TCP sites and cameras."""

    name: str
    # The id of ``name`` (``EMBODIMENT_IDS``, where every model this reads is registered).
    id: int
    # The arms, each with a hand, in action and observation order.
    sides: tuple[str, ...]
    # One arm's joints, base to wrist, and one hand's joints, thumb first (without the side).
    arm_joints: tuple[str, ...]
    hand_joints: tuple[str, ...]
    # Position limits (rad) per arm joint and per hand joint; velocity limits (rad/s) per arm
    # joint.
    arm_range: tuple[tuple[float, float], ...]
    arm_velocity: tuple[float, ...]
    hand_range: tuple[tuple[float, float], ...]
    # The TCP site of each arm, and the cameras (views) in observation order.
    tcp_sites: tuple[str, ...]
    cameras: tuple[str, ...]

    def __post_init__(self) -> None:
        checks = (
            ("arm_range", len(self.arm_range), len(self.arm_joints)),
            ("arm_velocity", len(self.arm_velocity), len(self.arm_joints)),
            ("hand_range", len(self.hand_range), len(self.hand_joints)),
            ("tcp_sites", len(self.tcp_sites), len(self.sides)),
        )
        for field, got, want in checks:
            if got != want:
                raise EmbodimentError(
                    f"embodiment {self.name}: {field} has {got} entries, not {want}"
                )

    # ------------------------------------------------------------------ sizes
    @property
    def num_arms(self) -> int:
        return len(self.sides)

    @property
    def arm_dof(self) -> int:
        """Joints per arm."""
        return len(self.arm_joints)

    @property
    def hand_dof(self) -> int:
        """Joints per hand."""
        return len(self.hand_joints)

    def arm_action_dim(self, mode: ActionMode) -> int:
        """What commands one arm: a TCP pose (7) or its joint targets."""
        return TCP_POSE_DIM if _mode(mode) == "tcp" else self.arm_dof

    def action_per_arm(self, mode: ActionMode) -> int:
        """One arm's share of an action: its arm command, then its hand's joint targets."""
        return self.arm_action_dim(mode) + self.hand_dof

    def action_dim(self, mode: ActionMode) -> int:
        return self.num_arms * self.action_per_arm(mode)

    @property
    def state_dim(self) -> int:
        """The proprio vector: every TCP pose, then every arm's joints, then every hand's."""
        return self.num_arms * (TCP_POSE_DIM + self.arm_dof + self.hand_dof)

    # ------------------------------------------------------------------ limits as arrays
    @cached_property
    def arm_limits(self) -> np.ndarray:
        """Arm joint position limits (J, 2), radians."""
        return _frozen(np.array(self.arm_range, dtype=float).reshape(-1, 2))

    @cached_property
    def arm_velocity_limits(self) -> np.ndarray:
        """Arm joint velocity limits (J,), rad/s."""
        return _frozen(np.array(self.arm_velocity, dtype=float))

    @cached_property
    def hand_limits(self) -> np.ndarray:
        """Hand joint position limits (H, 2), radians, thumb first."""
        return _frozen(np.array(self.hand_range, dtype=float).reshape(-1, 2))

    @cached_property
    def hand_open(self) -> np.ndarray:
        """The open hand (H,): every joint at zero, or at the end of its range nearest zero
        (the vendor's thumb cannot turn back to its own zero at joint 1)."""
        limits = self.hand_limits
        return _frozen(np.clip(0.0, limits[:, 0], limits[:, 1]))

    # ------------------------------------------------------------------ names in the model
    def arm_joint_names(self, side: str) -> tuple[str, ...]:
        """Arm ``side``'s joints as the cell names them, base to wrist."""
        return tuple(arm_prefix(self._side(side)) + j for j in self.arm_joints)

    def hand_joint_names(self, side: str) -> tuple[str, ...]:
        """Hand ``side``'s joints as the cell names them, thumb first."""
        return tuple(hand_prefix(self._side(side)) + j for j in self.hand_joints)

    def _side(self, side: str) -> str:
        if side not in self.sides:
            raise EmbodimentError(f"embodiment {self.name} has no arm {side!r} (has {self.sides})")
        return side

    # ------------------------------------------------------------------ building, JSON
    @classmethod
    def of(cls, model: mujoco.MjModel) -> Embodiment:
        """The embodiment of a cell model compiled by ``r2s2r.sim.scene``."""
        name = _text(model, NAME_TEXT)
        if name is None:
            raise EmbodimentError(
                f"the model names no embodiment (custom text {NAME_TEXT!r}); build it with "
                "r2s2r.sim.scene"
            )
        joints = [model.joint(i).name for i in range(model.njnt)]
        per_side = []
        for side in ARM_SIDES:
            arm_re = re.compile(re.escape(arm_prefix(side)) + r"j\d+")
            arm = [j for j in joints if arm_re.fullmatch(j)]
            hand = [
                j
                for j in joints
                if j.startswith(hand_prefix(side))
                and model.jnt_type[model.joint(j).id] == mujoco.mjtJoint.mjJNT_HINGE
            ]
            if not arm or not hand:
                raise EmbodimentError(
                    f"embodiment {name}: the model has no {'arm' if not arm else 'hand'} "
                    f"joints on side {side!r}"
                )
            numeric = velocity_numeric(side)
            if mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_NUMERIC, numeric) < 0:
                raise EmbodimentError(
                    f"embodiment {name}: the model has no arm velocity limits ({numeric!r})"
                )
            per_side.append(
                (
                    tuple(j.removeprefix(arm_prefix(side)) for j in arm),
                    tuple(j.removeprefix(hand_prefix(side)) for j in hand),
                    _pairs(joint_ranges(model, arm)),
                    tuple(float(v) for v in model.numeric(numeric).data),
                    _pairs(joint_ranges(model, hand)),
                )
            )
        for side, other in zip(ARM_SIDES[1:], per_side[1:], strict=True):
            if other != per_side[0]:
                raise EmbodimentError(
                    f"embodiment {name}: arm {side!r} differs from arm {ARM_SIDES[0]!r} "
                    "(joints or limits); both arms must carry the same robot"
                )
        tcp_sites = tuple(arm_prefix(s) + "tcp" for s in ARM_SIDES)
        for site in tcp_sites:
            if mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_SITE, site) < 0:
                raise EmbodimentError(f"embodiment {name}: the model has no TCP site {site!r}")
        missing = [
            c for c in CAMERA_NAMES if mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_CAMERA, c) < 0
        ]
        if missing:
            raise EmbodimentError(f"embodiment {name}: the model has no camera {missing}")
        arm_joints, hand_joints, arm_range, arm_velocity, hand_range = per_side[0]
        return cls(
            name=name,
            id=EMBODIMENT_IDS.get(name),
            sides=ARM_SIDES,
            arm_joints=arm_joints,
            hand_joints=hand_joints,
            arm_range=arm_range,
            arm_velocity=arm_velocity,
            hand_range=hand_range,
            tcp_sites=tcp_sites,
            cameras=CAMERA_NAMES,
        )

    def to_json(self) -> dict[str, Any]:
        """This embodiment as plain JSON values (a dataset's ``info.json`` holds it)."""
        return {
            "name": self.name,
            "id": self.id,
            "sides": list(self.sides),
            "arm_joints": list(self.arm_joints),
            "hand_joints": list(self.hand_joints),
            "arm_range": [list(r) for r in self.arm_range],
            "arm_velocity": list(self.arm_velocity),
            "hand_range": [list(r) for r in self.hand_range],
            "tcp_sites": list(self.tcp_sites),
            "cameras": list(self.cameras),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Embodiment:
        """The inverse of ``to_json``."""
        fields = set(cls.__dataclass_fields__)
        if set(data) != fields:
            raise EmbodimentError(
                f"embodiment: expected the fields {sorted(fields)}, got {sorted(data)}"
            )
        return cls(
            name=str(data["name"]),
            id=int(data["id"]),
            sides=tuple(data["sides"]),
            arm_joints=tuple(data["arm_joints"]),
            hand_joints=tuple(data["hand_joints"]),
            arm_range=tuple((float(lo), float(hi)) for lo, hi in data["arm_range"]),
            arm_velocity=tuple(float(v) for v in data["arm_velocity"]),
            hand_range=tuple((float(lo), float(hi)) for lo, hi in data["hand_range"]),
            tcp_sites=tuple(data["tcp_sites"]),
            cameras=tuple(data["cameras"]),
        )


def _mode(mode: str) -> str:
    if mode not in ACTION_MODES:
        raise ValueError(f"action_mode must be one of {ACTION_MODES}, got {mode!r}")
    return mode


def _frozen(a: np.ndarray) -> np.ndarray:
    a.setflags(write=False)
    return a
