"""The hardware interfaces every stage talks to, and the ``Rig`` that holds them; the twin
(``TwinRig``) and the real cell (``HardwareRig``) implement them.

Poses are ``[x, y, z, qw, qx, qy, qz]`` in metres in the cell frame (the Flexiv RDK's
convention). Every reading carries the time it was taken, in seconds on the rig's clock
(``Rig.now()``): the twin's simulated time, or the host's monotonic clock on hardware.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import Protocol, Self, runtime_checkable

import numpy as np

from r2s2r.sim.camera import Intrinsics
from r2s2r.sim.embodiment import Embodiment


@dataclass(frozen=True)
class ArmState:
    """One arm reading: joint positions/velocities (7,) and the TCP pose (7,)."""

    stamp: float
    q: np.ndarray
    dq: np.ndarray
    tcp_pose: np.ndarray


@dataclass(frozen=True)
class HandState:
    """One hand reading: joint positions (20,), thumb first."""

    stamp: float
    q: np.ndarray


@dataclass(frozen=True)
class Frame:
    """One camera image (H, W, 3) uint8 RGB, or a depth map (H, W) float32 in metres."""

    stamp: float
    image: np.ndarray


@dataclass(frozen=True)
class HandKeypoints:
    """21 hand keypoints (21, 3) in the tracker frame and the wrist pose (7,)."""

    stamp: float
    keypoints: np.ndarray
    wrist_pose: np.ndarray


@runtime_checkable
class Arm(Protocol):
    name: str

    def state(self) -> ArmState: ...

    def send_tcp_target(self, pose: np.ndarray) -> None:
        """Command a TCP pose target (7,); the arm moves there under its own limits."""
        ...

    def stop(self) -> None:
        """Stop the arm and hold the current pose until commanded again."""
        ...


@runtime_checkable
class Hand(Protocol):
    name: str

    def state(self) -> HandState: ...

    def send_joint_targets(self, q: np.ndarray) -> None:
        """Command 20 joint position targets (radians, thumb first)."""
        ...


@runtime_checkable
class Camera(Protocol):
    name: str

    def intrinsics(self) -> Intrinsics:
        """The intrinsics the driver reports (nominal for the twin, as a real driver's are)."""
        ...

    def read(self) -> Frame:
        """The latest frame."""
        ...


@runtime_checkable
class DepthCamera(Camera, Protocol):
    def read_depth(self) -> Frame: ...


@runtime_checkable
class HandTracker(Protocol):
    name: str

    def read(self) -> HandKeypoints: ...


@runtime_checkable
class Conveyor(Protocol):
    def set_speed(self, speed: float) -> None:
        """Belt speed in m/s along its direction of travel."""
        ...

    def speed(self) -> float: ...


@runtime_checkable
class ObjectPresenter(Protocol):
    def present(self, object_name: str | None = None) -> str:
        """Put an object on the belt (twin: spawn it; hardware: prompt the operator).

        Returns the name of the object presented.
        """
        ...

    def place_board(self, placement: int) -> None:
        """Put the calibration board in a new, tilted pose over the belt, the same one for the
        same ``placement`` (twin: places it; hardware: prompts the operator and waits)."""
        ...

    def remove_board(self) -> None:
        """Take the calibration board out of the cell."""
        ...

    def object_pose(self) -> np.ndarray | None:
        """The presented object's pose (7,: x y z qw qx qy qz) in the cell frame where the
        rig tracks it (twin: its simulation), else None. Recorded as the dataset's
        environment state, which demo adaptation needs."""
        ...


# The rig's RGB-D camera.
DEPTH_CAMERA = "head"


@runtime_checkable
class Rig(Protocol):
    """A cell every stage talks to: its devices, its clock, and the control period.

    Arms, hands and hand trackers are keyed by side (``left`` / ``right``), cameras by name.
    The arms and hands are the raw devices: a stage wraps them in a ``SafetySupervisor``.
    """

    @property
    def embodiment(self) -> Embodiment:
        """The robot the rig carries: its arms, joints, limits and cameras."""
        ...

    @property
    def arms(self) -> Mapping[str, Arm]: ...

    @property
    def hands(self) -> Mapping[str, Hand]: ...

    @property
    def cameras(self) -> Mapping[str, Camera]: ...

    @property
    def trackers(self) -> Mapping[str, HandTracker]:
        """The teleoperation trackers (gloves on a real cell; none on the twin, whose scripted
        operator is built next to it)."""
        ...

    @property
    def conveyor(self) -> Conveyor: ...

    @property
    def presenter(self) -> ObjectPresenter: ...

    def depth_camera(self) -> DepthCamera:
        """The RGB-D camera (``DEPTH_CAMERA``); raises if the rig has none."""
        ...

    def now(self) -> float:
        """Seconds on the rig's clock (the stamps of its readings)."""
        ...

    def step(self, periods: int = 1) -> None:
        """Let ``periods`` control periods (50 Hz) pass with the latest commands."""
        ...

    def present(self, object_name: str | None = None) -> str:
        """Start an episode with an object on the belt (``presenter.present``); its name."""
        ...

    def episode_outcome(self) -> tuple[str, bool, bool] | None:
        """(the presented object's status, whether the episode succeeded, whether it is
        over) where the rig can judge an episode itself (the twin); None where a person
        must (the real cell)."""
        ...

    def close(self) -> None:
        """Release every device; the rig is not used afterwards."""
        ...

    def __enter__(self) -> Self: ...

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None: ...
