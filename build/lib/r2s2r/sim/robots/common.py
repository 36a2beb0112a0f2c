"""Shared pieces of the robot builders: element names, frames, inertia."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import mujoco
import numpy as np

Vec3 = Sequence[float]
Quat = Sequence[float]


@dataclass(frozen=True)
class ArmNames:
    """Names of the elements created by :func:`add_rizon4s`, and what the MJCF cannot hold."""

    # The robot this is a model of (part of the embodiment's name).
    robot: str
    base: str
    joints: tuple[str, ...]
    flange: str
    flange_site: str
    tcp_site: str
    # Joint velocity limits (rad/s), base to wrist: MJCF has no field for them.
    velocity_limits: tuple[float, ...]


@dataclass(frozen=True)
class HandNames:
    """Names of the elements created by :func:`add_wuji_hand`."""

    # The robot this is a model of (part of the embodiment's name).
    robot: str
    joints: tuple[str, ...]
    tip_sites: tuple[str, ...]
    palm_site: str
    bodies: tuple[str, ...]


def rpy_to_matrix(rpy: Sequence[float]) -> np.ndarray:
    """Return the rotation matrix Rz(yaw) @ Ry(pitch) @ Rx(roll) (URDF convention)."""
    r, p, y = rpy
    cr, sr, cp, sp, cy, sy = np.cos(r), np.sin(r), np.cos(p), np.sin(p), np.cos(y), np.sin(y)
    rx = np.array([[1.0, 0.0, 0.0], [0.0, cr, -sr], [0.0, sr, cr]])
    ry = np.array([[cp, 0.0, sp], [0.0, 1.0, 0.0], [-sp, 0.0, cp]])
    rz = np.array([[cy, -sy, 0.0], [sy, cy, 0.0], [0.0, 0.0, 1.0]])
    return rz @ ry @ rx


def rpy_to_quat(rpy: Sequence[float]) -> np.ndarray:
    """Return the unit quaternion (w, x, y, z) of a roll-pitch-yaw rotation."""
    quat = np.zeros(4)
    mujoco.mju_mat2Quat(quat, rpy_to_matrix(rpy).ravel())
    return quat


def axis_angle_matrix(axis: np.ndarray, angle: float) -> np.ndarray:
    """Return the rotation matrix of ``angle`` radians about the unit vector ``axis``."""
    x, y, z = axis
    k = np.array([[0.0, -z, y], [z, 0.0, -x], [-y, x, 0.0]])
    return np.eye(3) + np.sin(angle) * k + (1.0 - np.cos(angle)) * (k @ k)


def angle_scale(element: mujoco.MjsBody) -> float:
    """Return the factor converting radians to the angle unit the spec compiler expects."""
    # MjSpec defaults to ``compiler.degree = True``, which also applies to joint ranges set via
    # the Python API, so radian values must be converted unless the user switched it off.
    return 180.0 / np.pi if element.compiler.degree else 1.0


def cylinder_inertia(mass: float, radius: float, length: float) -> list[float]:
    """Return the diagonal inertia of a solid cylinder whose axis is the local z axis."""
    ixx = mass * (3.0 * radius**2 + length**2) / 12.0
    return [ixx, ixx, 0.5 * mass * radius**2]


def set_inertial(
    body: mujoco.MjsBody, mass: float, ipos: Sequence[float], inertia: Sequence[float]
) -> None:
    """Give ``body`` an explicit inertial so its mass is exactly ``mass``."""
    body.explicitinertial = True
    body.mass = mass
    body.ipos = list(ipos)
    body.inertia = list(inertia)
