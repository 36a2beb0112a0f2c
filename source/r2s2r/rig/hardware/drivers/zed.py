"""The ZED Mini head camera: the ZED SDK (``pyzed``) where installed, else its UVC stream.

With the SDK the camera delivers the rectified left image, a depth map in metres and the
factory calibration of the rectified image (a pinhole without distortion). Without it the
camera is an ordinary UVC device whose frames hold the two raw (unrectified) images side by
side; this driver returns the left half, reports the configured intrinsics (those of the raw
left image), and has no depth.

Written for the ZED SDK 4.x's Python API (``pyzed`` 4.x, installed by Stereolabs' installer;
PyPI's ``pyzed`` is an unrelated package) and checked when the SDK path opens (``PYZED``).
Assumptions about that API (from Stereolabs' documentation; not checked against a device or
the SDK from here): ``Camera()``, ``InitParameters`` with ``camera_resolution``,
``camera_fps``, ``depth_mode``, ``coordinate_units`` and ``set_from_serial_number``;
``open``/``grab`` return ``ERROR_CODE.SUCCESS``; ``retrieve_image(mat, VIEW.LEFT)`` gives BGRA,
``retrieve_measure(mat, MEASURE.DEPTH)`` float32 metres (NaN/inf where unknown); the rectified
left calibration is
``get_camera_information().camera_configuration.calibration_parameters.left_cam``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any, Literal

import numpy as np

from r2s2r.optional import missing_extra
from r2s2r.rig.hardware.drivers.opencv_camera import (
    check_size,
    grab_frame,
    is_live_device,
    open_capture,
)
from r2s2r.rig.hardware.drivers.sdk import SdkRequirement, require_sdk
from r2s2r.rig.hardware.drivers.stream import LatestValue
from r2s2r.rig.interfaces import Frame
from r2s2r.sim.camera import Intrinsics

log = logging.getLogger("r2s2r.drivers")

PYZED = SdkRequirement(
    dist="pyzed",
    written_for="4.x",
    supported=">=4,<5",
    what="the ZED camera driver's SDK path",
    install="the ZED SDK 4.x from Stereolabs' installer, then its get_python_api.py "
    "(or use backend 'uvc')",
)
# ZED resolutions by (width, height) of one image.
ZED_RESOLUTIONS = {
    (672, 376): "VGA",
    (1280, 720): "HD720",
    (1920, 1080): "HD1080",
    (2208, 1242): "HD2K",
}


def import_pyzed() -> Any:
    """The one place r2s2r imports the ZED SDK's Python API."""
    try:
        import pyzed.sl as sl
    except ImportError as err:
        hint = missing_extra(err, "zed")
        raise ImportError(
            f"{hint} The 'zed' extra installs nothing itself: pyzed comes with the ZED SDK "
            "from Stereolabs' installer (then run its get_python_api.py)."
        ) from err
    return sl


def split_side_by_side(image: np.ndarray) -> np.ndarray:
    """The left image (H, W, C) of a side-by-side stereo frame (H, 2W, C)."""
    if image.ndim != 3 or image.shape[1] % 2:
        raise ValueError(f"a side-by-side frame has an even width, got shape {image.shape}")
    return image[:, : image.shape[1] // 2]


class ZedCamera:
    """The head camera (``DepthCamera`` with the SDK; ``Camera`` only on the UVC fallback).

    ``backend`` is ``sdk`` (fail with the install hint when pyzed is missing), ``uvc`` (never
    use the SDK) or ``auto`` (the SDK where it imports, else UVC, with a logged warning).
    ``intrinsics`` are those of the raw left image, reported on the UVC fallback (which needs
    them); with the SDK the images are rectified and the SDK's calibration is reported.
    """

    def __init__(
        self,
        name: str = "head",
        backend: Literal["auto", "sdk", "uvc"] = "auto",
        device: int | str = 0,
        serial: int | None = None,
        intrinsics: Intrinsics | None = None,
        width: int = 1280,
        height: int = 720,
        fps: float = 30.0,
        depth_mode: str = "NEURAL",
        clock: Callable[[], float] = time.monotonic,
        background: bool | None = None,
        sdk: Any = None,
    ) -> None:
        self.name, self._clock, self._size = name, clock, (width, height)
        if backend == "auto" and sdk is None:
            try:
                sdk = import_pyzed()
            except ImportError as err:
                log.warning("camera %s: %s Using the UVC stream without depth.", name, err)
                backend = "uvc"
        self._cap: Any = None
        self._zed: Any = None
        if backend == "uvc":
            if intrinsics is None:
                raise ValueError(
                    f"camera {name}: the ZED's UVC stream carries no calibration; configure "
                    "the intrinsics of its raw left image"
                )
            check_size(name, width, height, intrinsics)
            self._intrinsics = intrinsics
            # The UVC stream is YUYV, both images side by side in one frame.
            self._cap = open_capture(device, 2 * width, height, fps, fourcc="YUYV")
            size = (width, height)
            self._frames: LatestValue[tuple[Frame, Frame | None]] = LatestValue(
                lambda: (grab_frame(self._cap, name, size, clock, split_side_by_side), None),
                f"camera {name}",
                is_live_device(device) if background is None else background,
            )
        else:
            self._sl = import_pyzed() if sdk is None else sdk
            self._open_sdk(serial, fps, depth_mode)
            self._intrinsics = self._sdk_intrinsics()
            check_size(name, width, height, self._intrinsics)
            self._frames = LatestValue(
                self._grab_sdk, f"camera {name}", True if background is None else background
            )

    @property
    def has_depth(self) -> bool:
        return self._zed is not None

    def intrinsics(self) -> Intrinsics:
        return self._intrinsics

    def read(self) -> Frame:
        return self._frames.read()[0]

    def read_depth(self) -> Frame:
        """Depth (H, W) float32 in metres of the newest frame; 0 where the SDK has none."""
        depth = self._frames.read()[1]
        if depth is None:
            raise RuntimeError(
                f"camera {self.name}: depth needs the ZED SDK (pyzed); this camera runs on the "
                "UVC fallback, which has no depth. Install the ZED SDK or use backend 'sdk'."
            )
        return depth

    def close(self) -> None:
        self._frames.close()
        if self._cap is not None:
            self._cap.release()
        if self._zed is not None:
            self._zed.close()

    # ------------------------------------------------------------------ SDK path
    def _open_sdk(self, serial: int | None, fps: float, depth_mode: str) -> None:
        sl = self._sl
        self.sdk_version = require_sdk(PYZED, sl, f"camera {self.name}")
        resolution = ZED_RESOLUTIONS.get(self._size)
        if resolution is None:
            raise ValueError(
                f"camera {self.name}: {self._size[0]}x{self._size[1]} is not a ZED resolution; "
                f"use one of {sorted(ZED_RESOLUTIONS)}"
            )
        init = sl.InitParameters()
        init.camera_resolution = getattr(sl.RESOLUTION, resolution)
        init.camera_fps = int(fps)
        init.depth_mode = getattr(sl.DEPTH_MODE, depth_mode)
        init.coordinate_units = sl.UNIT.METER
        if serial is not None:
            init.set_from_serial_number(int(serial))
        zed = sl.Camera()
        status = zed.open(init)
        if status != sl.ERROR_CODE.SUCCESS:
            raise RuntimeError(f"camera {self.name}: the ZED SDK could not open it: {status}")
        self._zed = zed
        self._runtime = sl.RuntimeParameters()
        self._image, self._depth = sl.Mat(), sl.Mat()

    def _sdk_intrinsics(self) -> Intrinsics:
        info = self._zed.get_camera_information()
        left = info.camera_configuration.calibration_parameters.left_cam
        width, height = self._size
        return Intrinsics("pinhole", width, height, left.fx, left.fy, left.cx, left.cy)

    def _grab_sdk(self) -> tuple[Frame, Frame | None]:
        sl = self._sl
        status = self._zed.grab(self._runtime)
        if status != sl.ERROR_CODE.SUCCESS:
            raise RuntimeError(f"camera {self.name}: ZED grab failed: {status}")
        stamp = self._clock()
        self._zed.retrieve_image(self._image, sl.VIEW.LEFT)
        self._zed.retrieve_measure(self._depth, sl.MEASURE.DEPTH)
        bgra = np.asarray(self._image.get_data())
        rgb = np.ascontiguousarray(bgra[:, :, 2::-1], dtype=np.uint8)
        depth = np.array(self._depth.get_data(), dtype=np.float32)
        depth[~np.isfinite(depth)] = 0.0
        return Frame(stamp, rgb), Frame(stamp, depth)
