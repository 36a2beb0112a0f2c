"""The Flexiv driver against the real flexivrdk 2.0.0 wheel (``make test-flexiv``).

flexivrdk has no wheel for the project's Python 3.11: ``make flexiv-venv`` makes a Python 3.12
venv with the real wheel, where this module runs; elsewhere it is skipped. No robot is reached
and no network is used: the driver runs against a stand-in robot that replaces only the
connection. Everything it hands the driver or takes from it is the real module's (its enums,
``RobotStates``, ``RobotInfo``, ``NrtCartesianCmd``), every call the driver makes is checked
against the real signature, and the names a run touches must be exactly the ones the driver
declares (``SDK_CALLS``, ``SDK_ATTRIBUTES``), each of which must exist in the wheel.
"""

from __future__ import annotations

import importlib.metadata
import itertools
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

rdk = pytest.importorskip("flexivrdk", reason="flexivrdk runs in its own venv: make test-flexiv")

import flexiv_api  # noqa: E402

from r2s2r.geometry.poses import compose, invert  # noqa: E402
from r2s2r.rig.hardware.drivers import flexiv  # noqa: E402
from r2s2r.rig.hardware.drivers.sdk import SdkVersionError  # noqa: E402

BASE = np.array([0.35, -0.60, 0.75, np.sqrt(0.5), 0.0, 0.0, np.sqrt(0.5)])  # 90 deg about z
SERIAL = "Rizon4s-123456"
DECLARED = set(flexiv.SDK_CALLS) | set(flexiv.SDK_ATTRIBUTES)


Log = list[tuple[str, int, tuple[str, ...]]]
# What the robot's methods return, logged as the types they are.
RESULTS = {"Robot.states": "RobotStates.", "Robot.info": "RobotInfo."}


class Recorded:
    """An SDK object as the driver sees it: each attribute it reads is logged as
    ``(prefix + name, -1, ())`` and each call as ``(prefix + name, positional count,
    keywords)``; what ``states()`` and ``info()`` return is recorded in turn."""

    def __init__(self, target: Any, prefix: str, log: Log) -> None:
        self._target, self._prefix, self._log = target, prefix, log

    def __getattr__(self, name: str) -> Any:
        full = f"{self._prefix}{name}"
        value = getattr(self._target, name)
        self._log.append((full, -1, ()))
        if not callable(value):
            return value

        def call(*args: Any, **kwargs: Any) -> Any:
            self._log.append((full, len(args), tuple(kwargs)))
            result = value(*args, **kwargs)
            if full in RESULTS and isinstance(result, dict):
                return {k: Recorded(v, RESULTS[full], self._log) for k, v in result.items()}
            if full in RESULTS:
                return Recorded(result, RESULTS[full], self._log)
            return result

        return call


class StandInRobot:
    """``flexivrdk.Robot`` without the connection: a robot that starts faulted and becomes
    operational on the ``operational_after``-th poll after ``Enable()``, and takes commands
    only in the NRT Cartesian mode. It returns and accepts the real module's types."""

    def __init__(self, robot_sn: str, operational_after: int = 2, estop: bool = True) -> None:
        self.serial = robot_sn
        self._fault, self._enabled, self._polls = True, False, 0
        self._operational_after, self._estop = operational_after, estop
        self._mode = rdk.Mode.IDLE
        self.sent: list[dict[Any, Any]] = []

    def fault(self) -> bool:
        return self._fault

    def ClearFault(self, timeout_sec: int = 30) -> bool:  # noqa: N802
        self._fault = False
        return True

    def Enable(self) -> None:  # noqa: N802
        self._enabled = True

    def operational(self) -> bool:
        self._polls += self._enabled
        return self._enabled and 0 < self._operational_after <= self._polls

    def estop_released(self) -> bool:
        return self._estop

    def SwitchMode(self, mode: Any) -> None:  # noqa: N802
        assert isinstance(mode, rdk.Mode), mode
        self._mode = mode

    def mode(self) -> Any:
        return self._mode

    def info(self) -> Any:
        info = rdk.RobotInfo()
        info.serial_num, info.model_name = self.serial, flexiv.serial_model(self.serial)
        return info

    def states(self) -> dict[Any, Any]:
        states = rdk.RobotStates()
        states.q, states.dq = [0.1 * i for i in range(7)], [0.0] * 7
        states.tcp_pose = [0.5, 0.0, 0.3, 1.0, 0.0, 0.0, 0.0]
        return {rdk.JointGroup.ARM_1: states}

    def SendCartesianMotionForce(self, cmds: dict[Any, Any]) -> None:  # noqa: N802
        assert all(isinstance(g, rdk.JointGroup) for g in cmds), cmds
        assert all(isinstance(c, rdk.NrtCartesianCmd) for c in cmds.values()), cmds
        if self._mode != rdk.Mode.NRT_CARTESIAN_MOTION_FORCE:
            raise RuntimeError("[flexiv::rdk::Robot] not in the NRT Cartesian mode")
        self.sent.append(cmds)

    def Stop(self) -> None:  # noqa: N802
        self._mode = rdk.Mode.IDLE


class StandInSdk:
    """The real flexivrdk module with ``Robot`` replaced by the stand-in, as the driver sees it
    (every name it touches logged)."""

    def __init__(self) -> None:
        self.log: Log = []
        self.robots: list[StandInRobot] = []

    def __getattr__(self, name: str) -> Any:
        if name == "Robot":
            self.log.append(("Robot", -1, ()))
            return self.connect
        if name in ("Mode", "JointGroup"):
            self.log.append((name, -1, ()))
            return Recorded(getattr(rdk, name), f"{name}.", self.log)
        return Recorded(rdk, "", self.log).__getattr__(name)

    def connect(self, *args: Any, **kwargs: Any) -> Recorded:
        """``Robot(...)``: a stand-in robot, seen through the log."""
        self.log.append(("Robot", len(args), tuple(kwargs)))
        self.robots.append(StandInRobot(*args, **kwargs))
        return Recorded(self.robots[-1], "Robot.", self.log)


def test_the_installed_wheel_is_the_release_the_driver_was_written_for() -> None:
    assert rdk.__version__ == importlib.metadata.version("flexivrdk") == "2.0.0"
    assert flexiv.check_sdk_and_model(rdk, SERIAL) == ("2.0.0", "Rizon4s")


def test_every_sdk_name_the_driver_declares_exists_with_a_matching_signature() -> None:
    assert flexiv_api.problems(rdk) == []
    # The parser reads the wheel's signatures (so that an empty list above means something).
    (init,) = flexiv_api.overloads(rdk.Robot.__init__, "__init__")
    assert [p.name for p in init] == ["robot_sn", "network_interface_whitelist", "verbose", "lite"]
    assert flexiv_api.accepts(rdk, "Robot.SwitchMode", 1)
    assert not flexiv_api.accepts(rdk, "Robot.SwitchMode", 0)
    assert not flexiv_api.accepts(rdk, "NrtCartesianCmd", 8)
    # The stand-in offers nothing the real Robot lacks.
    for name in vars(StandInRobot):
        assert name.startswith("_") or hasattr(rdk.Robot, name), name


def test_bring_up_state_command_and_stop_against_a_stand_in_on_the_real_types() -> None:
    sdk = StandInSdk()
    clock = itertools.count(10.0)
    limits = flexiv.CartesianLimits(0.4, 0.9, 1.5, 4.0)
    arm = flexiv.FlexivArm(
        SERIAL, BASE, "left_arm", limits=limits, sdk=sdk, clock=lambda: next(clock)
    )
    (robot,) = sdk.robots
    assert robot.serial == SERIAL and not robot.fault()
    assert robot.mode() == rdk.Mode.NRT_CARTESIAN_MOTION_FORCE
    assert (arm.sdk_version, arm.model) == ("2.0.0", "Rizon4s")
    bring_up = [name for name, n, _ in sdk.log if n >= 0]
    assert bring_up[: bring_up.index("Robot.SwitchMode") + 1] == [
        "Robot",
        "Robot.info",
        "Robot.fault",
        "Robot.ClearFault",
        "Robot.fault",
        "Robot.Enable",
        "Robot.operational",
        "Robot.fault",
        "Robot.operational",
        "Robot.SwitchMode",
    ]

    state = arm.state()
    np.testing.assert_allclose(state.q, [0.1 * i for i in range(7)])
    np.testing.assert_allclose(state.tcp_pose[:3], [0.35, -0.10, 1.05], atol=1e-12)
    target = np.array([0.1, -0.3, 1.0, *BASE[3:]])
    arm.send_tcp_target(target)
    ((group, cmd),) = robot.sent[-1].items()
    assert group == rdk.JointGroup.ARM_1
    np.testing.assert_allclose(cmd.pose_d, compose(invert(BASE), target), atol=1e-12)
    assert cmd.wrench_d == [0.0] * 6 and cmd.twist_d == [0.0] * 6
    got = (cmd.max_linear_vel, cmd.max_angular_vel, cmd.max_linear_acc, cmd.max_angular_acc)
    assert got == (0.4, 0.9, 1.5, 4.0)

    arm.stop()
    assert robot.mode() == rdk.Mode.IDLE
    arm.send_tcp_target(target)  # Switches back to the Cartesian mode first.
    assert len(robot.sent) == 2 and robot.mode() == rdk.Mode.NRT_CARTESIAN_MOTION_FORCE
    arm.close()
    assert robot.mode() == rdk.Mode.IDLE

    # A robot that never becomes operational with its E-stop pressed: the driver says so.
    stuck = sdk.connect(SERIAL)
    sdk.robots[-1]._operational_after, sdk.robots[-1]._estop = 0, False
    ticks = itertools.count(0.0, 1.0)
    bring_up_stuck = flexiv.FlexivBringUp(stuck, sdk, 3, clock=lambda: next(ticks), sleep=id)
    with pytest.raises(flexiv.FlexivError, match="emergency stop is pressed"):
        bring_up_stuck.run()

    # Every call binds to the wheel's signature, with the arity the driver declares.
    calls = [(name, n, kw) for name, n, kw in sdk.log if n >= 0]
    for name, positional, keywords in calls:
        assert flexiv_api.accepts(rdk, name, positional, keywords), (name, positional)
        assert keywords == () and positional == flexiv.SDK_CALLS[name], name
    # The run touched exactly the names the driver declares.
    touched = {name for name, _, _ in sdk.log}
    declared = DECLARED | {name.split(".")[0] for name in DECLARED}
    assert touched <= declared, sorted(touched - declared)
    assert touched >= DECLARED, sorted(DECLARED - touched)


def test_the_real_sdk_reads_serials_as_the_driver_does() -> None:
    # These serials are refused by the real Robot at once, before it looks for a robot.
    with pytest.raises(RuntimeError, match=r"Robot model \[Foo\] is not supported"):
        rdk.Robot("Foo-123456")
    with pytest.raises(flexiv.FlexivError, match="model Foo is not an arm"):
        flexiv.check_sdk_and_model(rdk, "Foo-123456")
    for bad in ("Rizon4s", "Enlight-L-123456"):
        with pytest.raises(ValueError, match="serial number .* is invalid"):
            rdk.Robot(bad)
        with pytest.raises(flexiv.FlexivError, match="not a Flexiv serial number"):
            flexiv.serial_model(bad)


REFUSAL = """
import json, flexivrdk, flexiv_api
from r2s2r.rig.hardware.drivers import flexiv
print("VERSION", flexivrdk.__version__)
print("PROBLEMS", json.dumps(flexiv_api.problems(flexivrdk)))
for make in (lambda: flexiv.FlexivArm("Rizon4s-123456", [0, 0, 0, 1, 0, 0, 0], "left_arm"),
             lambda: flexivrdk.Robot("Rizon4s-123456")):
    try:
        make()
    except Exception as err:
        print("REFUSED", type(err).__name__, err)
"""


def test_flexivrdk_2_1_is_refused_by_the_driver_with_its_message() -> None:
    target = os.environ.get("FLEXIV_RDK_21", "")
    if not (Path(target) / "flexivrdk").is_dir():
        pytest.skip("flexivrdk 2.1.0 is not unpacked (make flexiv-venv sets FLEXIV_RDK_21)")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([target, str(Path(__file__).parent)])}
    out = subprocess.run(
        [sys.executable, "-c", REFUSAL], env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    lines = dict(line.split(" ", 1) for line in out.stdout.splitlines() if " " in line)
    assert lines["VERSION"] == "2.1.0"
    # What 2.1.0 lacks of what the driver uses.
    assert '"Robot.Enable: missing"' in lines["PROBLEMS"]
    refusals = [line for line in out.stdout.splitlines() if line.startswith("REFUSED")]
    driver, sdk_itself = refusals
    assert driver.startswith(f"REFUSED {SdkVersionError.__name__} left_arm (serial Rizon4s-123456")
    for part in ("model Rizon4s", "needs flexivrdk==2.0.*", "flexivrdk 2.1.0 is installed"):
        assert part in driver, driver
    # ... and why: 2.1.0's own Robot refuses the Rizon at once.
    assert "Product model [Rizon4s] is not supported" in sdk_itself
