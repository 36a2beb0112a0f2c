"""WorldSpec: every parameter of the cell that world grounding can change."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from r2s2r.spec.base import NonNeg, Pos, Spec, Unit

Vec3 = tuple[float, float, float]
Quat = tuple[float, float, float, float]
CAMERA_NAMES = ("head", "left_wrist", "right_wrist")
ARM_SIDES = ("left", "right")


class Pose(Spec):
    """A rigid transform: position (m) and unit quaternion (w, x, y, z)."""

    pos: Vec3 = (0.0, 0.0, 0.0)
    quat: Quat = (1.0, 0.0, 0.0, 0.0)

    @model_validator(mode="after")
    def _unit_quat(self) -> Pose:
        n = sum(q * q for q in self.quat) ** 0.5
        if abs(n - 1.0) > 1e-3:
            raise ValueError(f"quat: must be a unit quaternion (w, x, y, z), norm is {n:.4f}")
        return self


class IntrinsicsSpec(Spec):
    """Camera intrinsics at the native resolution, OpenCV conventions."""

    model: Literal["pinhole", "fisheye"]
    width: Annotated[int, Field(gt=0)]
    height: Annotated[int, Field(gt=0)]
    fx: Pos
    fy: Pos
    cx: float
    cy: float
    # Fisheye: Kannala–Brandt k1..k4. Pinhole: OpenCV k1, k2, p1, p2[, k3] or empty.
    dist: tuple[float, ...] = ()

    @model_validator(mode="after")
    def _check_intrinsics(self) -> IntrinsicsSpec:
        if self.model == "fisheye" and len(self.dist) != 4:
            raise ValueError(f"dist: a fisheye camera takes 4 coefficients, got {len(self.dist)}")
        if self.model == "pinhole" and len(self.dist) not in (0, 4, 5):
            raise ValueError(
                f"dist: a pinhole camera takes 0, 4 or 5 coefficients, got {len(self.dist)}"
            )
        if not (0 <= self.cx <= self.width and 0 <= self.cy <= self.height):
            raise ValueError(f"cx, cy: principal point ({self.cx}, {self.cy}) is outside the image")
        return self


class CameraSpec(IntrinsicsSpec):
    """A camera: intrinsics and distortion, mount and extrinsics, exposure.

    The extrinsic ``pose`` is the camera frame in OpenCV convention (x right, y down, z along
    the optical axis) expressed in the ``mount`` frame: ``world`` or an arm's flange.
    """

    mount: Literal["world", "left_flange", "right_flange"]
    pose: Pose
    # Exposure gain applied to the rendered image, and shutter time (s) for motion blur.
    exposure: Pos = 1.0
    motion_blur_s: NonNeg = 0.0


class BeltLayout(Spec):
    """Belt placement: centre of its top surface, heading of travel, and size."""

    pos: Vec3
    yaw_deg: float = 0.0
    length: Pos = 1.6
    width: Pos = 0.3
    thickness: Pos = 0.04
    # The belt is shifted back by one texture period when it has moved this far.
    texture_period: Pos = 0.05


class BinLayout(Spec):
    pos: Vec3
    yaw_deg: float = 0.0


class LayoutSpec(Spec):
    """Where things are: belt, bins (by name) and the two arm bases."""

    belt: BeltLayout
    bins: dict[str, BinLayout]
    robots: dict[Literal["left", "right"], Pose]
    table_height: Pos = 0.75

    @model_validator(mode="after")
    def _both_arms(self) -> LayoutSpec:
        missing = set(ARM_SIDES) - set(self.robots)
        if missing:
            raise ValueError(f"robots: missing base pose for {sorted(missing)}")
        return self


class ArmControllerSpec(Spec):
    """The Cartesian motion controller that stands in for the arm's NRT Cartesian mode."""

    kp_pos: Pos = 2000.0  # N/m
    kp_rot: Pos = 60.0  # N·m/rad
    damping_ratio: Pos = 1.0
    # Effective TCP mass (kg) and rotational inertia (kg·m²) used to turn the damping ratio
    # into damping gains.
    tcp_mass: Pos = 4.0
    tcp_inertia: Pos = 0.03
    delay_s: NonNeg = 0.004
    max_lin_vel: Pos = 1.0
    max_ang_vel: Pos = 2.0
    max_lin_acc: Pos = 4.0
    max_ang_acc: Pos = 8.0
    # Joint-space stiffness (N·m/rad) that holds the redundant elbow near its home posture.
    null_stiffness: NonNeg = 2.0
    joint_damping: NonNeg = 2.0
    joint_armature: NonNeg = 0.1
    # Coulomb friction (N·m) on each arm joint, MuJoCo's frictionloss: what the arm's torque
    # control leaves uncompensated. Grounding fits it; the data sheets give none.
    joint_friction: NonNeg = 0.0
    # Joint-position action mode gains.
    joint_kp: Pos = 400.0
    joint_kv: Pos = 40.0
    home: tuple[float, float, float, float, float, float, float] = (
        0.05,
        0.29,
        0.26,
        2.41,
        0.09,
        0.55,
        0.25,
    )


class HandActuatorSpec(Spec):
    """Position actuators of the hand joints: one value for all, or one per joint (thumb first;
    the cell checks the count against the hand it builds)."""

    kp: tuple[Pos, ...] = (0.5,)
    kv: tuple[NonNeg, ...] = (0.02,)
    force_limit: tuple[Pos, ...] = (0.5,)
    armature: tuple[NonNeg, ...] = (0.0003,)
    damping: tuple[NonNeg, ...] = (0.01,)

    @model_validator(mode="after")
    def _lengths(self) -> HandActuatorSpec:
        counts = {k: len(getattr(self, k)) for k in HAND_ACTUATOR_FIELDS}
        per_joint = {n for n in counts.values() if n != 1}
        if len(per_joint) > 1:
            raise ValueError(
                f"give each of {list(counts)} 1 value or one per hand joint, the same number "
                f"for all; got {counts}"
            )
        return self

    def per_joint(self) -> int | None:
        """How many joints the per-joint values are for (None: every field is one value)."""
        counts = {len(getattr(self, k)) for k in HAND_ACTUATOR_FIELDS} - {1}
        return counts.pop() if counts else None


HAND_ACTUATOR_FIELDS = ("kp", "kv", "force_limit", "armature", "damping")


class LightingSpec(Spec):
    rgb: tuple[Unit, Unit, Unit] = (1.0, 1.0, 1.0)
    intensity: NonNeg = 0.8
    # Direction the key light shines along (world frame); normalised when used.
    direction: Vec3 = (0.3, 0.4, -1.0)
    ambient: Unit = 0.3


class AppearanceRanges(Spec):
    """Ranges for appearance randomization (drawn per episode when enabled)."""

    object_rgb_jitter: Unit = 0.15
    belt_rgb_jitter: Unit = 0.1
    light_intensity: tuple[NonNeg, NonNeg] = (0.6, 1.1)
    light_direction_jitter_deg: NonNeg = 15.0
    texture_scale: tuple[Pos, Pos] = (0.7, 1.4)


class AssetsSpec(Spec):
    """Optional vendor MJCFs to use instead of the models this project authors."""

    arm_mjcf: str | None = None
    hand_mjcf: str | None = None
    # Joint velocity limits (rad/s, base to wrist) of the vendor arm, which MJCF cannot hold;
    # needed where the file has no <velocity> actuators to read them from.
    arm_velocity_limits: tuple[Pos, ...] | None = None


class RenderSpec(Spec):
    shadows: bool = False
    # Shadow map resolution when shadows are on (cost grows with it on a software rasterizer).
    shadow_map: Annotated[int, Field(ge=128, le=8192)] = 512
    offsamples: Annotated[int, Field(ge=0)] = 0
    # Slices around capsules, cylinders and spheres when drawn (MuJoCo's default is 28; the
    # software rasterizer's cost grows with it, and 12 looks the same at 256 pixels).
    tessellation: Annotated[int, Field(ge=4, le=64)] = 12
    obs_size: tuple[Annotated[int, Field(gt=0)], Annotated[int, Field(gt=0)]] = (256, 256)
    # Widest field of view rendered for a fisheye camera before remapping.
    fisheye_max_fov_deg: Annotated[float, Field(gt=10, lt=170)] = 150.0
    # Pixel density of that wide render at its centre relative to the fisheye image's (1.0
    # keeps full detail at the centre; lower renders fewer pixels, and the fisheye's own
    # compression towards the edges hides most of the loss).
    fisheye_oversample: Annotated[float, Field(gt=0.1, le=4.0)] = 0.6


class WorldSpec(Spec):
    """The cell as the simulator sees it; the ``nominal`` preset is the CAD world."""

    name: str
    cameras: dict[str, CameraSpec]
    layout: LayoutSpec
    controller: ArmControllerSpec = ArmControllerSpec()
    hand: HandActuatorSpec = HandActuatorSpec()
    lighting: LightingSpec = LightingSpec()
    appearance: AppearanceRanges = AppearanceRanges()
    assets: AssetsSpec = AssetsSpec()
    render: RenderSpec = RenderSpec()
    timestep: Annotated[float, Field(gt=0, le=0.01)] = 0.002

    @model_validator(mode="after")
    def _cameras(self) -> WorldSpec:
        missing = set(CAMERA_NAMES) - set(self.cameras)
        if missing:
            raise ValueError(f"cameras: missing {sorted(missing)} (need {list(CAMERA_NAMES)})")
        return self
