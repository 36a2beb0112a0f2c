"""The real-hardware drivers, without the hardware.

No device can be reached here, so each driver's pure logic is tested directly (frame and
unit conversions, reshaping, message parsing), and the command building and bring-up flow
of the SDK-backed drivers run against small in-test fakes of the vendors' *documented* APIs
(fake module objects that record calls and check argument shapes the way the SDK documents
them). This tests that the driver speaks the documented API, not that the API is as
documented. The OpenCV paths (wrist cameras, the ZED's UVC fallback) run for real against
video files written by the tests.
"""

from __future__ import annotations

import importlib.util
import itertools
import json
import logging
import sys
import threading
import time
import types
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import pytest
import yaml
from scipy.spatial.transform import Rotation

from r2s2r.geometry.poses import compose, invert
from r2s2r.paths import presets_dir
from r2s2r.rig import interfaces
from r2s2r.rig.hardware import HardwareRig
from r2s2r.rig.hardware.drivers import flexiv, manus, vive, wuji, zed
from r2s2r.rig.hardware.drivers.manual import ManualConveyor, OperatorPresenter
from r2s2r.rig.hardware.drivers.opencv_camera import OpenCVCamera
from r2s2r.rig.hardware.drivers.sdk import SdkVersionError
from r2s2r.rig.safety import SafetyLimits
from r2s2r.sim import robots
from r2s2r.sim.camera import Intrinsics
from r2s2r.spec import SpecError
from r2s2r.spec.world import ArmControllerSpec

EXAMPLE = Path(str(presets_dir() / "rig" / "hardware.example.yaml"))
BASE = np.array([0.35, -0.60, 0.75, np.sqrt(0.5), 0.0, 0.0, np.sqrt(0.5)])  # 90 deg about z


def _quat(rot: Rotation) -> np.ndarray:
    q = rot.as_quat(scalar_first=True)
    return -q if q[0] < 0 else q


# --------------------------------------------------------------------------- fake SDKs
def fake_flexivrdk(
    faulted: bool = False, clear_works: bool = True, operational_after: int = 1
) -> types.ModuleType:
    """The parts of flexivrdk 2.0 the driver uses, recording every call (tests/flexiv runs the
    driver on the real wheel's types)."""
    mod = types.ModuleType("flexivrdk")
    mod.__version__ = flexiv.FLEXIVRDK.written_for  # type: ignore[attr-defined]
    mod.calls = []  # type: ignore[attr-defined]

    class Mode:
        IDLE = "IDLE"
        NRT_CARTESIAN_MOTION_FORCE = "NRT_CARTESIAN_MOTION_FORCE"

    class JointGroup:
        ALL, ARM_1, ARM_2 = "ALL", "ARM_1", "ARM_2"

    class NrtCartesianCmd:
        # The documented constructor: pose_d (7), wrench_d (6), twist_d (6), four limits.
        def __init__(
            self,
            pose_d: list[float],
            wrench_d: list[float] = [0.0] * 6,  # noqa: B006
            twist_d: list[float] = [0.0] * 6,  # noqa: B006
            max_linear_vel: float = 0.5,
            max_angular_vel: float = 1.0,
            max_linear_acc: float = 2.0,
            max_angular_acc: float = 5.0,
        ) -> None:
            assert len(pose_d) == 7 and len(wrench_d) == 6 and len(twist_d) == 6
            limits = (max_linear_vel, max_angular_vel, max_linear_acc, max_angular_acc)
            if min(limits) < 0:
                raise ValueError("negative limit")  # The RDK throws std::invalid_argument.
            self.pose_d, self.wrench_d, self.twist_d = list(pose_d), list(wrench_d), list(twist_d)
            self.limits = limits

    class RobotStates:
        def __init__(self) -> None:
            self.q, self.dq = [0.1] * 7, [0.0] * 7
            self.tcp_pose = [0.5, 0.0, 0.3, 1.0, 0.0, 0.0, 0.0]

    class Robot:
        def __init__(self, serial: str) -> None:
            mod.calls.append(("Robot", serial))  # type: ignore[attr-defined]
            self._fault, self._enabled, self._polls = faulted, False, 0
            self.mode = Mode.IDLE
            self.sent: list[dict[str, Any]] = []
            self.estop = True
            mod.robot = self  # type: ignore[attr-defined]

        def fault(self) -> bool:
            return self._fault

        def ClearFault(self) -> bool:  # noqa: N802
            mod.calls.append(("ClearFault",))  # type: ignore[attr-defined]
            if clear_works:
                self._fault = False
            return clear_works

        def Enable(self) -> None:  # noqa: N802
            mod.calls.append(("Enable",))  # type: ignore[attr-defined]
            self._enabled = True

        def operational(self) -> bool:
            self._polls += 1
            return self._enabled and 0 <= operational_after <= self._polls

        def estop_released(self) -> bool:
            return self.estop

        def SwitchMode(self, mode: str) -> None:  # noqa: N802
            mod.calls.append(("SwitchMode", mode))  # type: ignore[attr-defined]
            self.mode = mode

        def states(self) -> dict[str, RobotStates]:
            return {JointGroup.ARM_1: RobotStates()}

        def info(self) -> types.SimpleNamespace:
            return types.SimpleNamespace(model_name="Rizon4s", software_ver="")

        def SendCartesianMotionForce(self, cmds: dict[str, NrtCartesianCmd]) -> None:  # noqa: N802
            if self.mode != Mode.NRT_CARTESIAN_MOTION_FORCE:
                raise RuntimeError("not in the correct control mode")  # std::logic_error
            self.sent.append(cmds)

        def Stop(self) -> None:  # noqa: N802
            mod.calls.append(("Stop",))  # type: ignore[attr-defined]
            self.mode = Mode.IDLE

    mod.Mode, mod.JointGroup, mod.Robot = Mode, JointGroup, Robot  # type: ignore[attr-defined]
    mod.NrtCartesianCmd = NrtCartesianCmd  # type: ignore[attr-defined]
    return mod


def fake_wujihandpy(version: str = wuji.WUJIHANDPY.written_for) -> types.ModuleType:
    mod = types.ModuleType("wujihandpy")
    mod.__version__ = version  # type: ignore[attr-defined]

    class Hand:
        def __init__(self, serial_number: str | None = None) -> None:
            self.serial_number, self.enabled = serial_number, False
            self.written: list[np.ndarray] = []
            self.actual = np.arange(20, dtype=float).reshape(5, 4) / 100
            mod.hands.append(self)  # type: ignore[attr-defined]

        def write_joint_enabled(self, on: bool) -> None:
            self.enabled = on

        def read_joint_actual_position(self) -> np.ndarray:
            return self.actual.copy()

        def write_joint_target_position(self, target: np.ndarray) -> None:
            assert np.asarray(target).shape == (5, 4)
            self.written.append(np.array(target))

    mod.Hand, mod.hands = Hand, []  # type: ignore[attr-defined]
    return mod


# --------------------------------------------------------------------------- Flexiv
def test_flexiv_bring_up_clears_a_fault_then_enables_waits_and_switches_mode() -> None:
    sdk = fake_flexivrdk(faulted=True, operational_after=3)
    arm = flexiv.FlexivArm("Rizon4s-1", BASE, name="left_arm", sdk=sdk, connect_timeout_s=5)
    assert sdk.calls == [  # type: ignore[attr-defined]
        ("Robot", "Rizon4s-1"),
        ("ClearFault",),
        ("Enable",),
        ("SwitchMode", "NRT_CARTESIAN_MOTION_FORCE"),
    ]
    assert sdk.robot._polls == 3  # type: ignore[attr-defined]
    assert isinstance(arm, interfaces.Arm)


def test_flexiv_checks_the_sdk_release_and_the_model_before_it_connects() -> None:
    sdk = fake_flexivrdk()
    sdk.__version__ = "2.1.0"  # type: ignore[attr-defined]
    with pytest.raises(SdkVersionError, match=r"model Rizon4s\).*flexivrdk 2\.1\.0 is installed"):
        flexiv.FlexivArm("Rizon4s-1", BASE, sdk=sdk)
    with pytest.raises(flexiv.FlexivError, match="model Moonlight is not an arm"):
        flexiv.FlexivArm("Moonlight-1", BASE, sdk=fake_flexivrdk())
    assert sdk.calls == []  # type: ignore[attr-defined]
    arm = flexiv.FlexivArm("Rizon 4s-1", BASE, sdk=fake_flexivrdk())
    assert (arm.sdk_version, arm.model) == ("2.0.0", "Rizon4s")


def test_flexiv_refuses_a_connected_robot_whose_reported_model_is_not_its_serials(
    caplog: pytest.LogCaptureFixture,
) -> None:
    assert flexiv.reported_model("Rizon 4s") == "Rizon4s"
    assert flexiv.reported_model("RIZON4") == "Rizon4"
    assert flexiv.reported_model("Flexiv Rizon 10s") == "Rizon10s"
    assert flexiv.reported_model("Moonlight") is None
    flexiv.check_reported_model("Rizon 4s", "Rizon4s", "left_arm")
    with pytest.raises(flexiv.FlexivError, match=r"left_arm: .*'Rizon 4'.*the Rizon4\), but its "
                       r"serial names a Rizon4s"):  # fmt: skip
        flexiv.check_reported_model("Rizon 4", "Rizon4s", "left_arm")
    with pytest.raises(flexiv.FlexivError, match=r"'Moonlight' \(no Rizon arm"):
        flexiv.check_reported_model("Moonlight", "Rizon4s", "left_arm")
    with caplog.at_level(logging.WARNING, logger=flexiv.log.name):
        flexiv.check_reported_model("", "Rizon4s", "left_arm")
    assert "reports no model" in caplog.text
    # At open: a serial of one model on a robot reporting another stops before bring-up.
    sdk = fake_flexivrdk()
    with pytest.raises(flexiv.FlexivError, match=r"serial Rizon4-1\).*'Rizon4s'"):
        flexiv.FlexivArm("Rizon4-1", BASE, sdk=sdk)
    assert ("Enable",) not in sdk.calls  # type: ignore[attr-defined]


def _bring_up(sdk: types.ModuleType) -> flexiv.FlexivBringUp:
    ticks = itertools.count(0.0, 1.0)  # A clock that advances one second per reading.
    robot = sdk.Robot("Rizon4s-1")  # type: ignore[attr-defined]
    return flexiv.FlexivBringUp(robot, sdk, timeout_s=5, clock=lambda: next(ticks), sleep=id)


def test_flexiv_bring_up_fails_clearly_on_timeout_and_on_a_stuck_fault() -> None:
    sdk = fake_flexivrdk(operational_after=-1)
    bring_up = _bring_up(sdk)
    bring_up.robot.estop = False
    with pytest.raises(flexiv.FlexivError, match="did not become operational.*emergency stop"):
        bring_up.run()
    assert bring_up.state is flexiv.BringUp.WAITING_OPERATIONAL
    stuck = _bring_up(fake_flexivrdk(faulted=True, clear_works=False))
    with pytest.raises(flexiv.FlexivError, match="fault could not be cleared"):
        stuck.run()


def test_flexiv_state_and_targets_convert_between_cell_and_base_frames() -> None:
    sdk = fake_flexivrdk()
    clock = itertools.count(10.0)
    arm = flexiv.FlexivArm("Rizon4s-1", BASE, sdk=sdk, clock=lambda: next(clock))
    state = arm.state()
    # The base is turned 90 degrees about z: base x is cell y.
    np.testing.assert_allclose(state.tcp_pose[:3], [0.35, -0.10, 1.05], atol=1e-12)
    np.testing.assert_allclose(state.tcp_pose[3:], BASE[3:], atol=1e-12)
    assert state.stamp == 10.0 and state.q.shape == (7,)

    rot = Rotation.from_euler("xyz", [0.3, -0.2, 1.0])
    target = np.concatenate([[0.1, -0.3, 1.0], _quat(rot)])
    arm.send_tcp_target(target)
    (cmds,) = sdk.robot.sent  # type: ignore[attr-defined]
    ((group, cmd),) = cmds.items()
    assert group == "ARM_1"
    expected = compose(invert(BASE), target)
    np.testing.assert_allclose(cmd.pose_d, expected, atol=1e-12)
    np.testing.assert_allclose(compose(BASE, np.array(cmd.pose_d)), target, atol=1e-12)
    # The base-frame position is the cell position relative to the base, rotated by -90 deg.
    np.testing.assert_allclose(cmd.pose_d[:3], [-0.3 + 0.6, -(0.1 - 0.35), 0.25], atol=1e-12)
    assert cmd.wrench_d == [0.0] * 6 and cmd.twist_d == [0.0] * 6


def test_flexiv_command_normalises_quaternions_and_uses_the_configured_limits() -> None:
    sdk = fake_flexivrdk()
    limits = flexiv.CartesianLimits.from_controller(ArmControllerSpec())
    assert limits == flexiv.CartesianLimits(1.0, 2.0, 4.0, 8.0)
    cmds = flexiv.build_cartesian_command(
        sdk, "ARM_1", np.array([0, 0, 0.5, -2.0, 0, 0, 0]), limits
    )
    cmd = cmds["ARM_1"]
    assert cmd.pose_d == [0.0, 0.0, 0.5, 1.0, 0.0, 0.0, 0.0]  # Unit norm, w >= 0.
    assert cmd.limits == (1.0, 2.0, 4.0, 8.0)
    with pytest.raises(ValueError, match="no direction"):
        flexiv.build_cartesian_command(sdk, "ARM_1", np.zeros(7), limits)
    with pytest.raises(ValueError, match="must be positive"):
        flexiv.CartesianLimits(max_linear_vel=0.0)
    with pytest.raises(ValueError, match="unknown Flexiv joint group 'ARM_3'"):
        flexiv.resolve_group(sdk, "ARM_3")


def test_flexiv_stop_idles_the_robot_and_the_next_target_resumes_the_mode() -> None:
    sdk = fake_flexivrdk()
    arm = flexiv.FlexivArm("Rizon4s-1", BASE, sdk=sdk)
    arm.stop()
    assert sdk.robot.mode == "IDLE"  # type: ignore[attr-defined]
    arm.send_tcp_target(arm.state().tcp_pose)
    assert sdk.calls[-2:] == [("Stop",), ("SwitchMode", "NRT_CARTESIAN_MOTION_FORCE")]  # type: ignore[attr-defined]
    assert len(sdk.robot.sent) == 1  # type: ignore[attr-defined]
    with pytest.raises(ValueError, match="non-finite"):
        arm.send_tcp_target(np.full(7, np.nan))
    sdk.robot._fault = True  # type: ignore[attr-defined]
    with pytest.raises(flexiv.FlexivError, match="in fault"):
        arm.send_tcp_target(arm.state().tcp_pose)
    assert len(sdk.robot.sent) == 1  # type: ignore[attr-defined]


# --------------------------------------------------------------------------- Wuji
# The vendor's joint names (wuji-hand-description, mjcf/right.xml and mjcf/left.xml) and the
# SDK's (5, 4) grid: row = finger - 1 (the thumb first), column = joint - 1.
VENDOR_HAND_JOINTS = {
    side: [f"{side}_finger{f}_joint{k}" for f in range(1, 6) for k in range(1, 5)]
    for side in ("right", "left")
}


@pytest.mark.parametrize("side", ["right", "left"])
def test_wuji_hand_maps_the_vendors_joint_names_to_the_sdk_grid(side: str) -> None:
    for name in VENDOR_HAND_JOINTS[side]:
        finger, joint = int(name.split("finger")[1][0]), int(name[-1])
        assert wuji.sdk_index(name) == (finger - 1, joint - 1)
    assert wuji.sdk_index(f"{side}_finger2_joint1") == (1, 0)  # Index flexion.
    assert wuji.sdk_index(f"{side}_finger2_joint2") == (1, 1)  # Index abduction.
    # The cell's names are the vendor's without the side, in the cell's order.
    cell = [n.removeprefix(f"{side}_") for n in VENDOR_HAND_JOINTS[side]]
    assert tuple(cell) == robots.WUJI_JOINT_NAMES
    # By name, not by position: the same value reaches the same joint in any order.
    rng = np.random.default_rng(0)
    order = rng.permutation(20)
    shuffled = wuji.JointMap([cell[i] for i in order])
    q = np.arange(20) / 10
    grid = wuji.JointMap(cell).to_grid(q)
    np.testing.assert_array_equal(shuffled.to_grid(q[order]), grid)
    np.testing.assert_array_equal(grid[1], q[4:8])
    np.testing.assert_array_equal(shuffled.from_grid(grid), q[order])
    for bad in (cell[:19] + cell[:1], [*cell[:19], "finger6_joint1"]):
        with pytest.raises(ValueError, match="Wuji hand joint|exactly once"):
            wuji.JointMap(bad)


def test_wuji_hand_refuses_an_sdk_it_was_not_written_for() -> None:
    for version in ("2.0.1", "1.9.0", "1.7.3", "dev"):
        needs = r"written for wujihandpy 1\.8\.0 and needs wujihandpy==1\.8\.\*"
        with pytest.raises(SdkVersionError, match=rf"right_hand: .*{needs}; wujihandpy {version}"):
            wuji.WujiHand("right_hand", sdk=fake_wujihandpy(version))
    hand = wuji.WujiHand("right_hand", sdk=fake_wujihandpy("1.8.4"))
    assert hand.sdk_version == "1.8.4"


def test_wuji_hand_reshapes_thumb_first_and_rejects_wrong_shapes() -> None:
    sdk = fake_wujihandpy()
    hand = wuji.WujiHand("right_hand", serial_number="WJ-7", sdk=sdk)
    (device,) = sdk.hands  # type: ignore[attr-defined]
    assert device.enabled and device.serial_number == "WJ-7"
    assert isinstance(hand, interfaces.Hand)
    q = hand.state().q
    np.testing.assert_array_equal(q, np.arange(20) / 100)
    np.testing.assert_array_equal(q[:4], device.actual[0])  # The thumb is the first row.
    target = np.linspace(-0.3, 0.9, 20)
    hand.send_joint_targets(target)
    np.testing.assert_array_equal(device.written[-1][1], target[4:8])  # Index finger row.
    # Given the cell's joints in another order, the driver still writes each by its name.
    names = list(robots.WUJI_JOINT_NAMES)
    names[4], names[5] = names[5], names[4]
    swapped = wuji.WujiHand("right_hand", sdk=sdk, joints=names)
    swapped.send_joint_targets(target)
    np.testing.assert_array_equal(sdk.hands[-1].written[-1][1], target[[5, 4, 6, 7]])  # type: ignore[attr-defined]
    for bad in (np.zeros((5, 4)), np.zeros(21), np.full(20, np.inf)):
        with pytest.raises(ValueError, match="right_hand joint targets"):
            hand.send_joint_targets(bad)
    assert len(device.written) == 1
    hand.close()
    assert not device.enabled


# --------------------------------------------------------------------------- OpenCV
def _write_video(path: Path, frames: list[np.ndarray], fps: float = 30.0) -> Path:
    """An MJPG .avi (OpenCV's built-in writer, no FFmpeg needed) of BGR frames."""
    h, w = frames[0].shape[:2]
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter.fourcc(*"MJPG"), fps, (w, h))
    assert writer.isOpened()
    for frame in frames:
        writer.write(frame)
    writer.release()
    return path


def _solid(w: int, h: int, bgr: tuple[int, int, int]) -> np.ndarray:
    return np.full((h, w, 3), bgr, dtype=np.uint8)


FISHEYE = Intrinsics("fisheye", 64, 48, 25.0, 25.0, 32.0, 24.0, (0.1, 0.0, 0.0, 0.0))


def test_opencv_camera_delivers_rgb_frames_stamped_at_grab_time(tmp_path: Path) -> None:
    # Blue-dominant BGR frames, a little brighter each time.
    video = _write_video(
        tmp_path / "wrist.avi", [_solid(64, 48, (200, 90, 20 + 10 * i)) for i in range(5)]
    )
    ticks = itertools.count(1.0, 0.02)
    cam = OpenCVCamera(str(video), FISHEYE, name="left_wrist", clock=lambda: next(ticks))
    assert isinstance(cam, interfaces.Camera) and cam.intrinsics() == FISHEYE
    frames = [cam.read() for _ in range(5)]
    stamps = [f.stamp for f in frames]
    assert np.all(np.diff(stamps) > 0)
    for i, frame in enumerate(frames):
        assert frame.image.shape == (48, 64, 3) and frame.image.dtype == np.uint8
        r, g, b = frame.image.reshape(-1, 3).mean(axis=0)
        assert abs(b - 200) < 8 and abs(g - 90) < 8 and abs(r - (20 + 10 * i)) < 8
    with pytest.raises(RuntimeError, match="end of stream"):
        cam.read()
    cam.close()


def test_opencv_camera_checks_its_size_against_the_intrinsics(tmp_path: Path) -> None:
    video = _write_video(tmp_path / "big.avi", [_solid(80, 48, (0, 0, 0))] * 2)
    with pytest.raises(RuntimeError, match="frames are 80x48.*says 64x48"):
        OpenCVCamera(str(video), FISHEYE).read()
    with pytest.raises(ValueError, match="differs from the intrinsics"):
        OpenCVCamera(str(video), FISHEYE, width=80)
    with pytest.raises(FileNotFoundError):
        OpenCVCamera(str(tmp_path / "missing.avi"), FISHEYE)


def test_opencv_camera_in_background_mode_keeps_the_last_frame(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    video = _write_video(tmp_path / "bg.avi", [_solid(64, 48, (10, 10, 10 * i)) for i in range(3)])
    caplog.set_level(logging.WARNING, logger="r2s2r.drivers")
    cam = OpenCVCamera(str(video), FISHEYE, background=True, clock=time.monotonic)
    first = cam.read()
    # The thread reads to the end of the file and says so (a foreground read would raise).
    deadline = time.monotonic() + 10.0
    while not any("end of stream" in r.getMessage() for r in caplog.records):
        assert time.monotonic() < deadline, "the background thread never reached the end"
        time.sleep(0.005)
    # After the end, every read hands out the file's last frame (red 20), the same one.
    last = cam.read()
    assert last.stamp >= first.stamp and abs(last.image[..., 0].mean() - 20) < 8
    assert cam.read().stamp == last.stamp
    cam.close()


# --------------------------------------------------------------------------- ZED
PINHOLE = Intrinsics("pinhole", 64, 48, 60.0, 60.0, 32.0, 24.0)


def test_zed_uvc_fallback_returns_the_left_half_and_has_no_depth(tmp_path: Path) -> None:
    # Side by side: the left image red, the right image blue (BGR order on disk).
    sbs = np.concatenate([_solid(64, 48, (0, 0, 220)), _solid(64, 48, (220, 0, 0))], axis=1)
    video = _write_video(tmp_path / "zed.avi", [sbs] * 3)
    cam = zed.ZedCamera("head", "uvc", str(video), intrinsics=PINHOLE, width=64, height=48)
    frame = cam.read()
    assert frame.image.shape == (48, 64, 3)
    r, g, b = frame.image.reshape(-1, 3).mean(axis=0)
    assert r > 200 and b < 20
    assert not cam.has_depth and cam.intrinsics() == PINHOLE
    with pytest.raises(RuntimeError, match="UVC fallback, which has no depth"):
        cam.read_depth()
    cam.close()
    with pytest.raises(ValueError, match="even width"):
        zed.split_side_by_side(np.zeros((4, 5, 3)))
    with pytest.raises(ValueError, match="no calibration"):
        zed.ZedCamera("head", "uvc", str(video))


@pytest.mark.skipif(importlib.util.find_spec("pyzed") is not None, reason="pyzed is installed")
def test_zed_without_its_sdk_names_the_installer_or_falls_back(tmp_path: Path) -> None:
    with pytest.raises(ImportError, match=r"r2s2r\[zed\].*Stereolabs"):
        zed.ZedCamera("head", "sdk", intrinsics=PINHOLE, width=64, height=48)
    sbs = _solid(128, 48, (0, 0, 0))
    video = _write_video(tmp_path / "auto.avi", [sbs])
    auto = zed.ZedCamera("head", "auto", str(video), intrinsics=PINHOLE, width=64, height=48)
    assert not auto.has_depth
    auto.close()


def test_zed_sdk_path_against_a_fake_sdk() -> None:
    sl = types.SimpleNamespace(
        __version__="4.2",
        ERROR_CODE=types.SimpleNamespace(SUCCESS=0),
        RESOLUTION=types.SimpleNamespace(HD720="HD720"),
        DEPTH_MODE=types.SimpleNamespace(NEURAL="NEURAL"),
        UNIT=types.SimpleNamespace(METER="METER"),
        VIEW=types.SimpleNamespace(LEFT="LEFT"),
        MEASURE=types.SimpleNamespace(DEPTH="DEPTH"),
        InitParameters=types.SimpleNamespace,
        RuntimeParameters=types.SimpleNamespace,
    )

    class Mat:
        data: np.ndarray

        def get_data(self) -> np.ndarray:
            return self.data

    class Camera:
        def open(self, init: Any) -> int:
            assert (init.camera_resolution, init.coordinate_units) == ("HD720", "METER")
            return 0

        def grab(self, runtime: Any) -> int:
            return 0

        def retrieve_image(self, mat: Mat, view: str) -> None:
            mat.data = np.zeros((720, 1280, 4), np.uint8)
            mat.data[..., 2] = 255  # BGRA: red.

        def retrieve_measure(self, mat: Mat, measure: str) -> None:
            mat.data = np.full((720, 1280), 1.5, np.float32)
            mat.data[0, 0] = np.nan

        def get_camera_information(self) -> Any:
            left = types.SimpleNamespace(fx=700.0, fy=701.0, cx=640.0, cy=360.0)
            calib = types.SimpleNamespace(left_cam=left)
            return types.SimpleNamespace(
                camera_configuration=types.SimpleNamespace(calibration_parameters=calib)
            )

        def close(self) -> None:
            pass

    sl.Camera, sl.Mat = Camera, Mat
    sl.__version__ = "5.0"
    with pytest.raises(SdkVersionError, match=r"camera head: .*needs pyzed>=4,<5; pyzed 5\.0"):
        zed.ZedCamera("head", "sdk", sdk=sl, background=False)
    sl.__version__ = "4.2"
    cam = zed.ZedCamera("head", "sdk", sdk=sl, background=False)
    assert isinstance(cam, interfaces.DepthCamera) and cam.has_depth
    assert cam.intrinsics() == Intrinsics("pinhole", 1280, 720, 700.0, 701.0, 640.0, 360.0)
    assert tuple(cam.read().image[0, 0]) == (255, 0, 0)
    depth = cam.read_depth().image
    assert depth.dtype == np.float32 and depth[0, 0] == 0.0 and depth[1, 1] == 1.5


# --------------------------------------------------------------------------- Manus
def _hand_message(local: np.ndarray, rot: Rotation, origin: np.ndarray, units: str) -> dict:
    """A bridge message for keypoints ``local`` (21, 3, metres) of a hand posed at ``rot``,
    ``origin``, with finger metacarpals and an unknown node thrown in, in shuffled order."""
    scale = {"m": 1.0, "mm": 1000.0}[units]
    world = (origin + local @ rot.as_matrix().T) * scale
    nodes = [
        {"chain": c, "joint": j, "pos": world[i].tolist()}
        for i, (c, j) in enumerate(manus.KEYPOINT_NODES)
    ]
    nodes[0]["rot"] = _quat(rot).tolist()
    nodes += [
        {"chain": f, "joint": "metacarpal", "pos": [9.0, 9.0, 9.0]} for f in ("index", "ring")
    ]
    nodes.append({"chain": "forearm", "joint": "root", "pos": [0.0, 0.0, 0.0]})
    order = np.random.default_rng(0).permutation(len(nodes))
    return {"stamp": 1.0, "side": "right", "units": units, "nodes": [nodes[i] for i in order]}


def test_manus_skeleton_becomes_21_keypoints_in_the_wrist_frame() -> None:
    local = np.random.default_rng(1).uniform(-0.1, 0.1, (21, 3))
    local[0] = 0.0
    rot = Rotation.from_euler("zyx", [1.2, -0.4, 0.3])
    message = _hand_message(local, rot, np.array([0.3, 1.1, -0.2]), "mm")
    keypoints = manus.skeleton_to_keypoints(message)
    np.testing.assert_allclose(keypoints, local, atol=1e-9)
    # MediaPipe order: the thumb tip is keypoint 4, the index tip 8, the little tip 20.
    assert manus.KEYPOINT_NODES[4] == ("thumb", "tip")
    assert manus.KEYPOINT_NODES[8] == ("index", "tip") and manus.KEYPOINT_NODES[20] == (
        "pinky",
        "tip",
    )
    # A fixed rotation turns the glove's root frame into the retargeting wrist frame.
    turn = Rotation.from_euler("x", 90, degrees=True)
    turned = manus.skeleton_to_keypoints(message, _quat(turn))
    np.testing.assert_allclose(turned, turn.apply(local), atol=1e-9)


def test_manus_messages_decode_and_bad_ones_fail_clearly() -> None:
    local = np.zeros((21, 3))
    message = _hand_message(local, Rotation.identity(), np.zeros(3), "m")
    payload = yaml.safe_dump(message).encode()  # Not JSON.
    with pytest.raises(ValueError, match="not JSON"):
        manus.decode_message([payload])
    import json

    assert manus.decode_message([b"right", json.dumps(message).encode()]) == message
    message["nodes"] = [
        n for n in message["nodes"] if (n["chain"], n["joint"]) != ("ring", "distal")
    ]
    with pytest.raises(ValueError, match=r"lacks nodes \['ring/distal'\]"):
        manus.skeleton_to_keypoints(message)
    with pytest.raises(ValueError, match="units"):
        manus.skeleton_to_keypoints({**message, "units": "inch"})


@pytest.mark.skipif(importlib.util.find_spec("zmq") is None, reason="pyzmq is not installed")
def test_manus_glove_reads_its_side_from_a_real_bridge_socket_and_refuses_other_pyzmq(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import zmq

    local = np.random.default_rng(2).uniform(-0.1, 0.1, (21, 3))
    local[0] = 0.0
    right = _hand_message(local, Rotation.from_euler("z", 0.7), np.array([0.1, 1.0, 0.2]), "m")
    left = _hand_message(np.zeros((21, 3)), Rotation.identity(), np.zeros(3), "m")
    left["side"] = "left"
    pub = zmq.Context.instance().socket(zmq.PUB)
    port = pub.bind_to_random_port("tcp://127.0.0.1")
    stop = threading.Event()

    def bridge() -> None:
        # A subscriber misses what is sent before it has joined, so the bridge keeps
        # publishing, the other glove's message last: a glove that kept the newest message
        # whatever its side would hold the left hand's.
        while not stop.is_set():
            for message in (right, left):
                pub.send_multipart([b"", json.dumps(message).encode()])
            stop.wait(0.01)

    sender = threading.Thread(target=bridge, daemon=True)
    sender.start()
    glove = manus.ManusGlove(
        f"tcp://127.0.0.1:{port}", side="right", clock=lambda: 7.0, timeout_s=10.0
    )
    try:
        assert glove.sdk_version == zmq.__version__
        reading = glove.read()  # Waits up to timeout_s for the first message.
        assert reading.stamp == 7.0
        np.testing.assert_allclose(reading.keypoints, local, atol=1e-9)
        assert np.isnan(reading.wrist_pose).all()  # No wrist tracker given.
    finally:
        glove.close()
        stop.set()
        sender.join()
        pub.close(linger=0)
    # A pyzmq release the client was not written for is refused before any socket opens.
    monkeypatch.setattr(zmq, "__version__", "24.0.1")
    with pytest.raises(SdkVersionError, match=r"left_glove: .*needs pyzmq>=25,<28; pyzmq 24\.0\.1"):
        manus.ManusGlove("tcp://127.0.0.1:1", side="left")


@pytest.mark.skipif(importlib.util.find_spec("zmq") is not None, reason="pyzmq is installed")
def test_manus_glove_without_pyzmq_names_the_teleop_extra() -> None:
    with pytest.raises(ImportError, match=r"pip install 'r2s2r\[teleop\]'"):
        manus.ManusGlove("tcp://127.0.0.1:5555")


# --------------------------------------------------------------------------- Vive
def test_openvr_matrices_become_poses() -> None:
    m = [[1.0, 0.0, 0.0, 0.1], [0.0, 1.0, 0.0, 1.2], [0.0, 0.0, 1.0, -0.3]]
    np.testing.assert_allclose(vive.openvr_matrix_to_pose(m), [0.1, 1.2, -0.3, 1, 0, 0, 0])
    # 90 degrees about y (up in OpenVR): x goes to -z.
    m = [[0.0, 0.0, 1.0, 0.0], [0.0, 1.0, 0.0, 0.0], [-1.0, 0.0, 0.0, 0.0]]
    s = np.sqrt(0.5)
    np.testing.assert_allclose(vive.openvr_matrix_to_pose(m), [0, 0, 0, s, 0, s, 0], atol=1e-12)
    # A single-precision, slightly non-orthonormal matrix still gives the right unit quaternion.
    rot = Rotation.from_rotvec([0.4, -1.1, 0.7])
    noisy = np.hstack([rot.as_matrix(), [[0.5], [1.5], [-2.0]]]).astype(np.float32)
    noisy[:3, :3] += np.float32(1e-4)
    pose = vive.openvr_matrix_to_pose(noisy)
    assert abs(np.linalg.norm(pose[3:]) - 1) < 1e-12
    assert (Rotation.from_quat(pose[3:], scalar_first=True).inv() * rot).magnitude() < 1e-3
    with pytest.raises(ValueError, match="reflection"):
        vive.openvr_matrix_to_pose(np.diag([1.0, 1.0, -1.0, 1.0])[:3])


def test_vive_tracker_finds_its_serial_and_reports_lost_tracking_as_nan() -> None:
    valid = types.SimpleNamespace(
        bPoseIsValid=True,
        mDeviceToAbsoluteTracking=[[1, 0, 0, 0.2], [0, 1, 0, 1.0], [0, 0, 1, 0.4]],
    )
    poses = [types.SimpleNamespace(bPoseIsValid=False)] * 4
    system = types.SimpleNamespace(
        getTrackedDeviceClass=lambda i: 3 if i in (1, 2) else 1,
        getStringTrackedDeviceProperty=lambda i, prop: f"LHR-{i}",
        getDeviceToAbsoluteTrackingPose=lambda origin, dt, n: poses,
    )
    sdk = types.SimpleNamespace(
        __version__=vive.OPENVR.written_for,
        init=lambda app: system,
        shutdown=lambda: None,
        VRApplication_Other=3,
        k_unMaxTrackedDeviceCount=4,
        TrackedDeviceClass_GenericTracker=3,
        Prop_SerialNumber_String=1002,
        TrackingUniverseStanding=1,
    )
    session = vive.OpenVRSession(sdk)
    assert session.sdk_version == "2.12.1401"
    tracker = vive.ViveTracker("LHR-2", session, clock=lambda: 5.0)
    assert tracker.index == 2
    assert np.isnan(tracker.read_pose()[1]).all()
    poses = [poses[0], poses[1], valid, poses[3]]
    np.testing.assert_allclose(tracker.read_pose()[1], [0.2, 1.0, 0.4, 1, 0, 0, 0])
    with pytest.raises(RuntimeError, match=r"no Vive tracker with serial 'LHR-0'.*LHR-1"):
        vive.ViveTracker("LHR-0", session)
    # pyopenvr 1.x (OpenVR 1.x) is refused before SteamVR is asked for anything.
    sdk.__version__, sdk.init = "1.26.701", None
    with pytest.raises(SdkVersionError, match=r"OpenVR session: .*openvr 1\.26\.701 is installed"):
        vive.OpenVRSession(sdk)


# --------------------------------------------------------------------------- the rig
def test_operator_conveyor_and_presenter_record_what_the_operator_says() -> None:
    replies = iter(["", "fast", "0.12", "banana", "mug", "", ""])
    questions: list[str] = []

    def prompt(question: str) -> str:
        questions.append(question)
        return next(replies)

    belt = ManualConveyor(prompt)
    belt.set_speed(0.1)
    belt.set_speed(0.15)
    assert belt.speed() == 0.12 and belt.history == [(0.1, 0.1), (0.15, 0.12)]
    assert "0.150 m/s" in questions[1] and "'fast' is not a speed" in questions[2]
    presenter = OperatorPresenter(["mug", "can"], prompt)
    assert presenter.present() == "mug"
    asked = len(questions)
    presenter.place_board(2)
    presenter.remove_board()
    assert "Board placement 3" in questions[asked] and "tilted" in questions[asked]
    assert "out of the cell" in questions[asked + 1]
    assert isinstance(belt, interfaces.Conveyor)
    assert isinstance(presenter, interfaces.ObjectPresenter)


@pytest.mark.skipif(importlib.util.find_spec("flexivrdk") is not None, reason="flexivrdk present")
def test_hardware_rig_without_the_arm_sdk_names_the_extra() -> None:
    with pytest.raises(ImportError, match=r"pip install 'r2s2r\[flexiv\]'"):
        HardwareRig.from_config(EXAMPLE)


def test_bad_hardware_yaml_names_file_and_key(tmp_path: Path) -> None:
    data = yaml.safe_load(EXAMPLE.read_text())
    data["arms"]["left"]["serail"] = data["arms"]["left"].pop("serial")
    data["cameras"]["left_wrist"]["driver"] = "webcam"
    path = tmp_path / "hw.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(SpecError) as err:
        HardwareRig.from_config(path)
    text = str(err.value)
    assert str(path) in text
    assert "arms.left.serail: unknown key" in text and "arms.left.serial: required" in text
    assert "cameras.left_wrist" in text and "webcam" in text


def test_hardware_rig_from_config_with_fake_sdks_routes_commands_through_safety(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sdk, hands = fake_flexivrdk(), fake_wujihandpy()
    monkeypatch.setitem(sys.modules, "flexivrdk", sdk)
    monkeypatch.setitem(sys.modules, "wujihandpy", hands)
    frames = [_solid(64, 48, (0, 0, 0))] * 400
    wrist = _write_video(tmp_path / "w.avi", frames)
    head = _write_video(tmp_path / "h.avi", [np.concatenate([frames[0]] * 2, axis=1)] * 400)
    intr = {"model": "pinhole", "width": 64, "height": 48, "fx": 50.0, "fy": 50.0}
    config = {
        "arms": {"left": {"serial": "Rizon4s-1"}},
        "hands": {"left": {}},
        "cameras": {
            "head": {
                "driver": "zed",
                "backend": "uvc",
                "device": str(head),
                "intrinsics": {**intr, "cx": 32.0, "cy": 24.0},
            },
            "left_wrist": {
                "driver": "opencv",
                "device": str(wrist),
                "intrinsics": {**intr, "cx": 32.0, "cy": 24.0},
            },
        },
    }
    path = tmp_path / "hw.yaml"
    path.write_text(yaml.safe_dump(config))
    with HardwareRig.from_config(path, prompt=lambda q: "") as rig:
        assert set(rig.cameras) == {"head", "left_wrist"} and rig.now() >= 0
        assert isinstance(rig.cameras["head"], interfaces.Camera)
        assert rig.present("green_can") == "green_can"  # The operator presses Enter.
        rig.step()
        t0 = rig.now()
        rig.step(25)
        # 25 periods of 20 ms, paced on the wall clock from the last step's deadline: 0.5 s
        # less however late that step returned (100 ms allowed for a loaded machine; two
        # periods with 5 ms to spare failed once beside a training job).
        assert rig.now() - t0 >= 0.4
        # The base pose defaults to the nominal world's left arm base.
        left_base = [-0.35, -0.60, 0.75, *BASE[3:]]
        np.testing.assert_allclose(rig.arms["left"].base_pose_in_cell, left_base, atol=1e-6)  # type: ignore[attr-defined]
        sup = rig.supervise(SafetyLimits(hold_after_s=0.05, stop_after_s=0.1), period_s=0.005)
        pose = sup.arm("left").state().tcp_pose
        sup.arm("left").send_tcp_target(pose + [0.005, 0, 0, 0, 0, 0, 0])
        assert len(sdk.robot.sent) == 1  # type: ignore[attr-defined]
        sup.hand("left").send_joint_targets(np.full(20, 5.0))  # Clamped by the supervisor.
        assert np.all(hands.hands[0].written[-1] < 5.0)  # type: ignore[attr-defined]
        # The command stream stops: the watchdog holds the arm (Stop() on the robot), then
        # reports the longer gap as a stop.
        deadline = time.monotonic() + 2.0
        while not any(e.kind == "stop" for e in sup.events) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert [e.kind for e in sup.events if e.kind in ("hold", "stop")] == ["hold", "stop"]
        assert ("Stop",) in sdk.calls  # type: ignore[attr-defined]
    assert not hands.hands[0].enabled  # type: ignore[attr-defined]
