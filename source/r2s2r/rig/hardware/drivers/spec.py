"""HardwareSpec: the real cell's devices (``config/rig/hardware.example.yaml``).

Anything a world already knows (camera intrinsics, arm base poses) defaults to that world's
value, so a hardware file names only serials and devices unless it overrides them.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from r2s2r.spec.base import Spec
from r2s2r.spec.world import IntrinsicsSpec, Pose

Side = Literal["left", "right"]
CameraName = Literal["head", "left_wrist", "right_wrist"]
PosFloat = Annotated[float, Field(gt=0)]
Quat = tuple[float, float, float, float]


class ArmLimitsCfg(Spec):
    """Velocity and acceleration limits of the arms' own motion generator (m, rad, s)."""

    max_linear_vel: PosFloat = 0.5
    max_angular_vel: PosFloat = 1.0
    max_linear_acc: PosFloat = 2.0
    max_angular_acc: PosFloat = 5.0


class ArmCfg(Spec):
    """One Flexiv arm: its serial, joint group and base pose in the cell (default: the world's)."""

    serial: Annotated[str, Field(min_length=1)]
    group: str = "ARM_1"
    base_pose: Pose | None = None


class HandCfg(Spec):
    """One Wuji hand; ``serial`` picks it when several are plugged in."""

    serial: str | None = None


class OpenCVCameraCfg(Spec):
    """A UVC camera read through OpenCV (the fisheye wrist cameras)."""

    driver: Literal["opencv"]
    device: int | str
    fps: PosFloat = 30.0
    fourcc: Annotated[str, Field(min_length=4, max_length=4)] = "MJPG"
    intrinsics: IntrinsicsSpec | None = None


class ZedCameraCfg(Spec):
    """The ZED head camera: SDK where installed (``auto``), or forced ``sdk`` / ``uvc``."""

    driver: Literal["zed"]
    backend: Literal["auto", "sdk", "uvc"] = "auto"
    device: int | str = 0
    serial: int | None = None
    fps: PosFloat = 30.0
    depth_mode: str = "NEURAL"
    intrinsics: IntrinsicsSpec | None = None


CameraDriverCfg = Annotated[OpenCVCameraCfg | ZedCameraCfg, Field(discriminator="driver")]


class GloveCfg(Spec):
    """A Manus glove behind a ZMQ bridge, and the Vive tracker on the same wrist."""

    endpoint: Annotated[str, Field(min_length=1)]
    topic: str = ""
    tracker_serial: str | None = None
    # Turns the glove's hand-root frame into the retargeter's wrist frame (w, x, y, z).
    wrist_rotation: Quat = (1.0, 0.0, 0.0, 0.0)


class ConveyorCfg(Spec):
    """The belt, set by the operator; ``initial_speed`` is what it runs at when the rig opens."""

    initial_speed: Annotated[float, Field(ge=0)] = 0.0


class HardwareSpec(Spec):
    """The real cell: which device is which, and what overrides the world's nominal values."""

    # The world whose intrinsics and base poses are the defaults, and the task whose objects
    # the operator presents (preset names or YAML paths).
    world: str = "nominal"
    task: str = "pick_sort"
    arms: dict[Side, ArmCfg]
    arm_limits: ArmLimitsCfg = ArmLimitsCfg()
    connect_timeout_s: PosFloat = 30.0
    hands: dict[Side, HandCfg] = {}
    cameras: dict[CameraName, CameraDriverCfg] = {}
    gloves: dict[Side, GloveCfg] = {}
    conveyor: ConveyorCfg = ConveyorCfg()
