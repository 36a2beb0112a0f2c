"""Programmatic MjSpec builders for the Flexiv Rizon 4S arm and the Wuji 20-DoF hand."""

from r2s2r.sim.robots.common import ArmNames, HandNames, rpy_to_matrix, rpy_to_quat
from r2s2r.sim.robots.rizon4s import (
    RIZON4S_JOINT_AXES,
    RIZON4S_JOINT_ORIGINS,
    RIZON4S_JOINT_RANGES,
    RIZON4S_LINK_MASSES,
    RIZON4S_LINK_RADII,
    RIZON4S_NAME,
    RIZON4S_TORQUE_LIMITS,
    RIZON4S_VEL_LIMITS,
    add_rizon4s,
    rizon4s_fk,
)
from r2s2r.sim.robots.wuji_hand import (
    WUJI_FINGER_RANGES,
    WUJI_HAND_JOINT_RANGES,
    WUJI_HAND_NAME,
    WUJI_THUMB_RANGES,
    add_hand_actuators,
    add_wuji_hand,
)

__all__ = [
    "RIZON4S_JOINT_AXES",
    "RIZON4S_JOINT_ORIGINS",
    "RIZON4S_JOINT_RANGES",
    "RIZON4S_LINK_MASSES",
    "RIZON4S_LINK_RADII",
    "RIZON4S_NAME",
    "RIZON4S_TORQUE_LIMITS",
    "RIZON4S_VEL_LIMITS",
    "WUJI_FINGER_RANGES",
    "WUJI_HAND_JOINT_RANGES",
    "WUJI_HAND_NAME",
    "WUJI_THUMB_RANGES",
    "ArmNames",
    "HandNames",
    "add_hand_actuators",
    "add_rizon4s",
    "add_wuji_hand",
    "rizon4s_fk",
    "rpy_to_matrix",
    "rpy_to_quat",
]
