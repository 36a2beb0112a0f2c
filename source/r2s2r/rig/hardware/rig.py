"""The real cell behind the rig interfaces, built from a hardware YAML.

``HardwareRig`` is a ``Rig``, as ``TwinRig`` is (``arms``, ``hands``, ``cameras``, the
teleoperation ``trackers``, ``conveyor``, ``presenter``, ``embodiment``, ``now()``,
``step()``). Its arms and hands are the raw drivers, as the twin's are: every stage wraps them
in a ``SafetySupervisor``, which ``supervise()`` builds with the rig's clock, watching its
cameras and ticking from a timer thread. Each vendor SDK is imported only when its device is
built; a missing SDK fails with the extra to install.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any

import numpy as np

from r2s2r.rig.hardware.drivers.flexiv import CartesianLimits, FlexivArm
from r2s2r.rig.hardware.drivers.manual import ManualConveyor, OperatorPresenter, Prompt
from r2s2r.rig.hardware.drivers.manus import ManusGlove
from r2s2r.rig.hardware.drivers.opencv_camera import OpenCVCamera
from r2s2r.rig.hardware.drivers.spec import CameraDriverCfg, HardwareSpec, OpenCVCameraCfg
from r2s2r.rig.hardware.drivers.vive import OpenVRSession, ViveTracker
from r2s2r.rig.hardware.drivers.wuji import WujiHand
from r2s2r.rig.hardware.drivers.zed import ZedCamera
from r2s2r.rig.interfaces import (
    DEPTH_CAMERA,
    Arm,
    Camera,
    Conveyor,
    DepthCamera,
    Hand,
    HandTracker,
    ObjectPresenter,
)
from r2s2r.rig.safety import SafetyLimits, SafetySupervisor
from r2s2r.sim.camera import Intrinsics
from r2s2r.sim.embodiment import Embodiment
from r2s2r.sim.scene import build_scene
from r2s2r.spec import WorldSpec
from r2s2r.spec.worlds import load_task, load_world

log = logging.getLogger("r2s2r.drivers")
# The control period the recorder and the safety watchdog run at (50 Hz).
PERIOD_S = 0.02


class HardwareRig:
    """The real cell: drivers for two arms, two hands, three cameras, gloves and trackers, of
    ``embodiment`` (the robot of the cell's world model)."""

    def __init__(
        self,
        arms: dict[str, Arm],
        hands: dict[str, Hand],
        cameras: dict[str, Camera],
        conveyor: Conveyor,
        presenter: ObjectPresenter,
        embodiment: Embodiment,
        trackers: dict[str, HandTracker] | None = None,
        clock: Callable[[], float] | None = None,
        resources: list[Any] | None = None,
    ) -> None:
        self.arms, self.hands, self.cameras = arms, hands, cameras
        self.embodiment = embodiment
        self.conveyor, self.presenter = conveyor, presenter
        self.trackers = trackers or {}
        self._start = time.monotonic()
        self._clock = clock or self._since_start
        # Things to close besides the devices (a shared OpenVR session).
        self._resources = resources or []
        self._next_step = 0.0
        self._watchdog: threading.Thread | None = None
        self._stop_watchdog = threading.Event()

    @classmethod
    def from_config(cls, path: str | Path, prompt: Prompt = input) -> HardwareRig:
        """Connect every device named in a hardware YAML (see ``HardwareSpec``)."""
        return build_rig(HardwareSpec.load(path), prompt)

    def depth_camera(self) -> DepthCamera:
        """The head camera, where it is an RGB-D one (the ZED)."""
        camera = self.cameras.get(DEPTH_CAMERA)
        if not isinstance(camera, DepthCamera):
            what = "no head camera" if camera is None else "an RGB-only head camera"
            raise RuntimeError(
                f"this rig has {what}; depth needs the ZED (driver: zed) as camera "
                f"{DEPTH_CAMERA!r} in the hardware YAML"
            )
        return camera

    def _since_start(self) -> float:
        return time.monotonic() - self._start

    def now(self) -> float:
        """Seconds on the host's monotonic clock since the rig was opened."""
        return self._clock()

    def step(self, periods: int = 1) -> None:
        """Wait until ``periods`` control periods from the last step have passed (as the twin's
        ``step`` advances them); the real cell moves on its own meanwhile."""
        self._next_step = max(self._next_step + periods * PERIOD_S, self.now())
        delay = self._next_step - self.now()
        if delay > 0:
            time.sleep(delay)

    def present(self, object_name: str | None = None) -> str:
        """Have the operator put an object on the belt; returns its name."""
        return self.presenter.present(object_name)

    def episode_outcome(self) -> None:
        """The real cell does not judge its episodes: the operator does."""
        return None

    def supervise(
        self, limits: SafetyLimits | None = None, period_s: float = PERIOD_S
    ) -> SafetySupervisor:
        """A safety supervisor over the arms and hands, ticked every ``period_s`` by a thread."""
        if self._watchdog is not None and self._watchdog.is_alive():
            raise RuntimeError("this rig is already supervised; use the supervisor it returned")
        sup = SafetySupervisor(self.arms, self.hands, self.now, self.embodiment, limits)
        for camera in self.cameras.values():
            sup.watch_camera(camera)
        self._stop_watchdog.clear()

        def tick() -> None:
            while not self._stop_watchdog.wait(period_s):
                try:
                    sup.tick()
                except Exception as err:  # A watchdog that cannot check must stop the arms.
                    sup.emergency_stop(f"watchdog failed: {err}")
                    return

        self._watchdog = threading.Thread(target=tick, name="safety-watchdog", daemon=True)
        self._watchdog.start()
        return sup

    def close(self) -> None:
        """Stop the watchdog and the arms, and release every device."""
        self._stop_watchdog.set()
        if self._watchdog is not None:
            self._watchdog.join(timeout=1.0)
        devices: list[Any] = [
            *self.arms.values(),
            *self.hands.values(),
            *self.cameras.values(),
            *self.trackers.values(),
            *self._resources,
        ]
        errors = _close_all(devices)
        if errors:
            raise RuntimeError("some devices did not close cleanly: " + "; ".join(errors))

    def __enter__(self) -> HardwareRig:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def build_rig(spec: HardwareSpec, prompt: Prompt = input) -> HardwareRig:
    """Connect the devices of ``spec`` in order (arms, hands, cameras, gloves); on a failure
    the devices already open are closed again before the error propagates."""
    world = load_world(spec.world)
    task = load_task(spec.task)
    # The cell's robot, from its world model (before any device opens: a bad model fails here).
    embodiment = build_scene(task, world).embodiment
    start = time.monotonic()

    def clock() -> float:
        return time.monotonic() - start

    opened: list[Any] = []

    def keep(device: Any) -> Any:
        opened.append(device)
        return device

    try:
        limits = CartesianLimits(**spec.arm_limits.model_dump())
        arms: dict[str, Arm] = {}
        for side, arm_cfg in spec.arms.items():
            base = arm_cfg.base_pose or world.layout.robots[side]
            arms[side] = keep(
                FlexivArm(
                    arm_cfg.serial,
                    np.array([*base.pos, *base.quat]),
                    name=f"{side}_arm",
                    group=arm_cfg.group,
                    limits=limits,
                    connect_timeout_s=spec.connect_timeout_s,
                    clock=clock,
                )
            )
        hands: dict[str, Hand] = {
            side: keep(
                WujiHand(
                    f"{side}_hand", hand_cfg.serial, clock=clock, joints=embodiment.hand_joints
                )
            )
            for side, hand_cfg in spec.hands.items()
        }
        cameras: dict[str, Camera] = {
            name: keep(_open_camera(name, cam_cfg, world, clock))
            for name, cam_cfg in spec.cameras.items()
        }
        trackers: dict[str, HandTracker] = {}
        resources: list[Any] = []
        session: OpenVRSession | None = None
        for side, glove_cfg in spec.gloves.items():
            wrist = None
            if glove_cfg.tracker_serial is not None:
                if session is None:
                    session = keep(OpenVRSession())
                    resources.append(session)
                wrist = ViveTracker(glove_cfg.tracker_serial, session, f"{side}_tracker", clock)
            trackers[side] = keep(
                ManusGlove(
                    glove_cfg.endpoint,
                    side,
                    topic=glove_cfg.topic,
                    wrist_tracker=wrist,
                    wrist_rotation=glove_cfg.wrist_rotation,
                    clock=clock,
                )
            )
    except BaseException:
        # Report, but do not mask, the error that stopped the build.
        for error in _close_all(reversed(opened)):
            log.warning("while closing after a failed start: %s", error)
        raise
    return HardwareRig(
        arms,
        hands,
        cameras,
        ManualConveyor(prompt, spec.conveyor.initial_speed),
        OperatorPresenter([o.name for o in task.all_objects], prompt),
        embodiment,
        trackers,
        clock,
        resources,
    )


def _open_camera(
    name: str, cfg: CameraDriverCfg, world: WorldSpec, clock: Callable[[], float]
) -> Camera:
    """Open one camera with its configured intrinsics, else the world's for the same name."""
    intr = Intrinsics.from_spec(cfg.intrinsics or world.cameras[name])
    if isinstance(cfg, OpenCVCameraCfg):
        return OpenCVCamera(
            cfg.device, intr, fps=cfg.fps, name=name, clock=clock, fourcc=cfg.fourcc
        )
    # The intrinsics serve the UVC fallback; the SDK reports its own calibration.
    return ZedCamera(
        name,
        backend=cfg.backend,
        device=cfg.device,
        serial=cfg.serial,
        intrinsics=intr,
        width=intr.width,
        height=intr.height,
        fps=cfg.fps,
        depth_mode=cfg.depth_mode,
        clock=clock,
    )


def _close_all(devices: Any) -> list[str]:
    """Close each device that can be closed; returns what failed (the rest still close)."""
    errors = []
    for device in devices:
        close = getattr(device, "close", None)
        if close is None:
            continue
        try:
            close()
        except Exception as err:  # Keep closing the rest; report at the end.
            errors.append(f"{getattr(device, 'name', device)}: {err}")
    return errors
