"""The Flexiv Rizon arm through the Flexiv RDK 2.0 (``flexivrdk``, the 'flexiv' extra).

The arm runs in the RDK's non-real-time Cartesian motion-force mode: each
``send_tcp_target`` sends one ``NrtCartesianCmd`` and the robot's own motion generator moves
the TCP there under the configured velocity and acceleration limits. Poses in the RDK are
``[x, y, z, qw, qx, qy, qz]`` in the robot's world frame, which this driver takes to be the
robot base (the Flexiv default); ``base_pose_in_cell`` maps it to the cell frame.

Written for flexivrdk 2.0.0 and checked at open (``FLEXIVRDK``): 2.1 connects only to Enlight
and MICO robots ("Product model [Rizon4s] is not supported") and renamed ``Enable()`` to
``ServoOn()``. flexivrdk publishes wheels for Python 3.10 and 3.12 only. Every name the driver
takes from the SDK is listed in ``SDK_CALLS`` and ``SDK_ATTRIBUTES``; ``make test-flexiv``
checks each against the real 2.0.0 wheel and runs the driver against a stand-in robot built on
its types.

The pure parts (frame conversion, command building, the bring-up state machine) take the
SDK module as a parameter, so they run against any object with the same API.

What the wheel does not show and is assumed (not checked against a robot from here): pure
motion control is the mode's default (force control off on every axis), so no
``SetForceControlAxis`` call is made; ``info().model_name`` names the arm's model as its
serial does ("Rizon4s" or "Rizon 4s", spaces and case aside).
"""

from __future__ import annotations

import enum
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from r2s2r.geometry.poses import as_pose, compose, invert
from r2s2r.optional import missing_extra
from r2s2r.rig.hardware.drivers.sdk import SdkRequirement, require_sdk
from r2s2r.rig.interfaces import ArmState
from r2s2r.spec.world import ArmControllerSpec

log = logging.getLogger("r2s2r.drivers")

FLEXIVRDK = SdkRequirement(
    dist="flexivrdk",
    written_for="2.0.0",
    supported="==2.0.*",
    what="the Flexiv arm driver (Rizon arms)",
    install="pip install 'flexivrdk==2.0.0' (wheels for Python 3.10 and 3.12 only)",
    known_breaks=(
        (
            ">=2.1",
            "flexivrdk 2.1 connects only to Enlight and MICO robots (a Rizon serial gets "
            "'Product model [Rizon4s] is not supported') and has no Robot.Enable().",
        ),
    ),
)
# The models flexivrdk 2.0.0 connects to among Flexiv's 7-joint arms: it reads the model from
# the serial (the part before "-", spaces dropped: "Rizon 4s-123456" is "Rizon4s-123456", case
# kept), refuses an unknown one at once and searches the network for these.
RIZON_MODELS = ("Rizon4", "Rizon4s", "Rizon4R", "Rizon4sR", "Rizon4M", "Rizon10", "Rizon10s")

# Every name the driver takes from flexivrdk, in one place: what it calls, with how many
# positional arguments, and what it reads. tests/flexiv checks each against the real wheel
# and that a run of the driver touches exactly these; tests/test_driver_sdks.py checks that
# the code names no other.
SDK_CALLS: dict[str, int] = {
    "Robot": 1,
    "Robot.fault": 0,
    "Robot.ClearFault": 0,
    "Robot.Enable": 0,
    "Robot.operational": 0,
    "Robot.estop_released": 0,
    "Robot.SwitchMode": 1,
    "Robot.info": 0,
    "Robot.states": 0,
    "Robot.SendCartesianMotionForce": 1,
    "Robot.Stop": 0,
    "NrtCartesianCmd": 7,
}
SDK_ATTRIBUTES = (
    "__version__",
    "JointGroup.ARM_1",  # The default group; a configured one is looked up by name.
    "Mode.NRT_CARTESIAN_MOTION_FORCE",
    "RobotStates.q",
    "RobotStates.dq",
    "RobotStates.tcp_pose",
    "RobotInfo.model_name",
    "RobotInfo.software_ver",
)
# NrtCartesianCmd's parameters, in the order build_cartesian_command passes them.
NRT_CARTESIAN_ARGS = (
    "pose_d",
    "wrench_d",
    "twist_d",
    "max_linear_vel",
    "max_angular_vel",
    "max_linear_acc",
    "max_angular_acc",
)


def import_flexivrdk() -> Any:
    """The one place r2s2r imports the Flexiv RDK."""
    try:
        import flexivrdk
    except ImportError as err:
        raise missing_extra(err, "flexiv") from err
    return flexivrdk


class FlexivError(RuntimeError):
    """The robot refused to come up or to take a command (fault, timeout, E-stop), or the
    serial names a robot this driver does not drive."""


def serial_model(serial: str) -> str:
    """The product model a Flexiv serial names (``Rizon4s-123456`` -> ``Rizon4s``), read as
    flexivrdk 2.0 reads it."""
    model, dash, number = serial.replace(" ", "").partition("-")
    if not (model and dash and number) or "-" in number:
        raise FlexivError(
            f"{serial!r} is not a Flexiv serial number (MODEL-NUMBER, e.g. Rizon4s-123456)"
        )
    return model


def reported_model(model_name: str) -> str | None:
    """The Rizon model a robot's ``info().model_name`` names ("Rizon 4s" -> ``Rizon4s``; the
    longest known model the name holds, spaces and case aside), None if it names none."""
    flat = model_name.replace(" ", "").lower()
    found = [m for m in RIZON_MODELS if m.lower() in flat]
    return max(found, key=len) if found else None


def check_reported_model(model_name: str, model: str, name: str = "arm") -> None:
    """Refuse a connected robot whose reported model is not the one its serial names (an
    empty report is logged: the robot's software did not say)."""
    if not model_name:
        log.warning("%s: the robot reports no model; driving it as its serial's %s", name, model)
        return
    found = reported_model(model_name)
    if found != model:
        what = f"the {found}" if found else "no Rizon arm this driver drives"
        raise FlexivError(
            f"{name}: the connected robot reports model {model_name!r} ({what}), but its "
            f"serial names a {model}; check the serial in the cell's config"
        )


def check_sdk_and_model(sdk: Any, serial: str, name: str = "arm") -> tuple[str, str]:
    """The installed flexivrdk release and the serial's model; raises ``SdkVersionError`` or
    ``FlexivError``, naming both and the release needed, if this driver cannot drive them."""
    model = serial_model(serial)
    version = require_sdk(FLEXIVRDK, sdk, f"{name} (serial {serial}, model {model})")
    if model not in RIZON_MODELS:
        raise FlexivError(
            f"{name} (serial {serial}): model {model} is not an arm this driver drives with "
            f"flexivrdk {version}; it drives {', '.join(RIZON_MODELS)} through flexivrdk"
            f"{FLEXIVRDK.supported} (written for {FLEXIVRDK.written_for})"
        )
    return version, model


@dataclass(frozen=True)
class CartesianLimits:
    """Limits the robot's motion generator applies when moving to a target (m, rad, s).

    The defaults are the RDK's own safe defaults; ``from_controller`` takes the limits of the
    simulated controller, so that real and simulated arms move alike.
    """

    max_linear_vel: float = 0.5
    max_angular_vel: float = 1.0
    max_linear_acc: float = 2.0
    max_angular_acc: float = 5.0

    def __post_init__(self) -> None:
        for name in ("max_linear_vel", "max_angular_vel", "max_linear_acc", "max_angular_acc"):
            value = getattr(self, name)
            # The RDK throws on a negative limit; zero would never move.
            if not (math.isfinite(value) and value > 0):
                raise ValueError(f"{name} must be positive and finite, got {value!r}")

    @classmethod
    def from_controller(cls, spec: ArmControllerSpec) -> CartesianLimits:
        """The limits of a world's simulated Cartesian controller."""
        return cls(spec.max_lin_vel, spec.max_ang_vel, spec.max_lin_acc, spec.max_ang_acc)


def cell_to_base(pose_in_cell: np.ndarray, base_pose_in_cell: np.ndarray) -> np.ndarray:
    """A cell-frame pose (7,) expressed in the robot's base frame."""
    return compose(invert(base_pose_in_cell), as_pose(pose_in_cell))


def base_to_cell(pose_in_base: np.ndarray, base_pose_in_cell: np.ndarray) -> np.ndarray:
    """A robot-base-frame pose (7,) expressed in the cell frame."""
    return compose(base_pose_in_cell, as_pose(pose_in_base, "robot TCP pose"))


def resolve_group(sdk: Any, name: str) -> Any:
    """The RDK ``JointGroup`` called ``name`` (e.g. ``ARM_1``)."""
    group = getattr(sdk.JointGroup, name, None)
    if group is None:
        known = [n for n in dir(sdk.JointGroup) if n.isupper()]
        raise ValueError(f"unknown Flexiv joint group {name!r}; the RDK has {known}")
    return group


def build_cartesian_command(
    sdk: Any, group: Any, pose_in_base: np.ndarray, limits: CartesianLimits
) -> dict[Any, Any]:
    """The ``SendCartesianMotionForce`` argument for a pure-motion target (no wrench, twist)."""
    pose = as_pose(pose_in_base, "TCP target")
    cmd = sdk.NrtCartesianCmd(
        [float(v) for v in pose],
        [0.0] * 6,  # wrench_d: no force control.
        [0.0] * 6,  # twist_d: zero feed-forward favours robustness over tracking.
        limits.max_linear_vel,
        limits.max_angular_vel,
        limits.max_linear_acc,
        limits.max_angular_acc,
    )
    return {group: cmd}


class BringUp(enum.Enum):
    START = "start"
    CLEARING_FAULT = "clearing fault"
    ENABLING = "enabling"
    WAITING_OPERATIONAL = "waiting until operational"
    SWITCHING_MODE = "switching mode"
    READY = "ready"


class FlexivBringUp:
    """Brings a robot from connected to ready for NRT Cartesian commands, one step at a time.

    ``fault()`` → ``ClearFault()`` → ``Enable()`` → wait ``operational()`` →
    ``SwitchMode(NRT_CARTESIAN_MOTION_FORCE)``; each waiting phase gives up after
    ``timeout_s`` with an error that says what to check.
    """

    def __init__(
        self,
        robot: Any,
        sdk: Any,
        timeout_s: float = 30.0,
        poll_s: float = 0.1,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        name: str = "arm",
    ) -> None:
        self.robot, self.sdk, self.name = robot, sdk, name
        self.timeout_s, self.poll_s, self.clock, self.sleep = timeout_s, poll_s, clock, sleep
        self.state = BringUp.START
        self._phase_start = clock()

    def _enter(self, state: BringUp) -> BringUp:
        self.state, self._phase_start = state, self.clock()
        return state

    def _timed_out(self) -> bool:
        return self.clock() - self._phase_start > self.timeout_s

    def step(self) -> BringUp:
        """Make one transition (or one poll of a waiting phase); returns the new state."""
        robot = self.robot
        if self.state is BringUp.START:
            if robot.fault():
                robot.ClearFault()
                return self._enter(BringUp.CLEARING_FAULT)
            return self._enter(BringUp.ENABLING)
        if self.state is BringUp.CLEARING_FAULT:
            if not robot.fault():
                return self._enter(BringUp.ENABLING)
            if self._timed_out():
                raise FlexivError(
                    f"{self.name}: the robot's fault could not be cleared within "
                    f"{self.timeout_s:.0f} s; read the event log on the teach pendant "
                    "(a critical fault needs a power cycle)"
                )
            return self.state
        if self.state is BringUp.ENABLING:
            robot.Enable()
            return self._enter(BringUp.WAITING_OPERATIONAL)
        if self.state is BringUp.WAITING_OPERATIONAL:
            if robot.operational():
                return self._enter(BringUp.SWITCHING_MODE)
            if robot.fault():
                raise FlexivError(f"{self.name}: the robot faulted while enabling")
            if self._timed_out():
                hint = ""
                if not robot.estop_released():
                    hint = " The emergency stop is pressed: release it."
                raise FlexivError(
                    f"{self.name}: the robot did not become operational within "
                    f"{self.timeout_s:.0f} s after Enable().{hint} Check that it is in Auto "
                    "(Remote) mode and that its brakes are released."
                )
            return self.state
        if self.state is BringUp.SWITCHING_MODE:
            robot.SwitchMode(self.sdk.Mode.NRT_CARTESIAN_MOTION_FORCE)
            return self._enter(BringUp.READY)
        return self.state

    def run(self) -> None:
        """Step until ready, polling every ``poll_s`` in the waiting phases."""
        while self.state is not BringUp.READY:
            before = self.state
            if self.step() is before:
                self.sleep(self.poll_s)


class FlexivArm:
    """One Flexiv arm (the ``Arm`` interface); connects and enables it on construction.

    ``sdk`` defaults to the imported ``flexivrdk``; pass another module object with the same
    API to run the driver without a robot.
    """

    def __init__(
        self,
        serial: str,
        base_pose_in_cell: np.ndarray | list[float] | tuple[float, ...],
        name: str = "arm",
        group: str = "ARM_1",
        limits: CartesianLimits | None = None,
        connect_timeout_s: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
        sdk: Any = None,
    ) -> None:
        self.name = name
        self.base_pose_in_cell = as_pose(base_pose_in_cell, f"{name} base pose")
        self.limits = limits or CartesianLimits()
        self._clock = clock
        self._sdk = import_flexivrdk() if sdk is None else sdk
        self.sdk_version, self.model = check_sdk_and_model(self._sdk, serial, name)
        self._group = resolve_group(self._sdk, group)
        self._robot = self._sdk.Robot(serial)
        info = self._robot.info()
        reported = str(info.model_name or "")
        check_reported_model(reported, self.model, f"{name} (serial {serial})")
        log.info(
            "%s: %s (serial %s, robot software %s) through flexivrdk %s",
            name,
            reported or self.model,
            serial,
            info.software_ver or "unknown",
            self.sdk_version,
        )
        FlexivBringUp(self._robot, self._sdk, connect_timeout_s, name=name).run()
        self._idle = False

    def state(self) -> ArmState:
        states = self._robot.states()[self._group]
        stamp = self._clock()
        return ArmState(
            stamp,
            np.asarray(states.q, dtype=float).copy(),
            np.asarray(states.dq, dtype=float).copy(),
            base_to_cell(np.asarray(states.tcp_pose, dtype=float), self.base_pose_in_cell),
        )

    def send_tcp_target(self, pose: np.ndarray) -> None:
        target = cell_to_base(pose, self.base_pose_in_cell)
        if self._robot.fault():
            raise FlexivError(
                f"{self.name}: the robot is in fault (e.g. a joint limit was hit); "
                "clear it on the teach pendant or reconnect"
            )
        if self._idle:
            # Stop() left the robot idle; commands need the Cartesian mode again.
            self._robot.SwitchMode(self._sdk.Mode.NRT_CARTESIAN_MOTION_FORCE)
            self._idle = False
        self._robot.SendCartesianMotionForce(
            build_cartesian_command(self._sdk, self._group, target, self.limits)
        )

    def stop(self) -> None:
        self._robot.Stop()
        self._idle = True

    def close(self) -> None:
        """Stop the arm; the connection closes when the robot object is released."""
        self.stop()
