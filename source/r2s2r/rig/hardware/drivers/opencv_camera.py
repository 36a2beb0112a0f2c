"""Cameras read through OpenCV's ``VideoCapture``: the fisheye wrist cameras (UVC).

Frames are stamped on the rig clock when they are grabbed (before decoding), converted from
OpenCV's BGR to RGB, and checked against the configured size. A live device is read by a
background thread, so that ``read()`` returns the newest frame at once and a stalled camera
shows up as an old stamp (which the safety supervisor watches); a video file is read one
frame per ``read()``, which makes it usable as a recorded stand-in for a camera. Written for
OpenCV 4.14 (``cv2``, a core dependency; its tests run against video files) and checked when a
capture opens (``OPENCV``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import cv2
import numpy as np

from r2s2r.rig.hardware.drivers.sdk import SdkRequirement, require_sdk
from r2s2r.rig.hardware.drivers.stream import LatestValue
from r2s2r.rig.interfaces import Frame
from r2s2r.sim.camera import Intrinsics

Crop = Callable[[np.ndarray], np.ndarray]
# The same range as the core dependency in pyproject.toml (OpenCV 5 changed the calling
# convention of cv2.fisheye, which the calibration code uses).
OPENCV = SdkRequirement(
    dist="opencv-python-headless",
    written_for="4.14.0",
    supported=">=4.10,<5",
    what="the OpenCV camera driver",
    install="pip install 'opencv-python-headless>=4.10,<5'",
)


def is_live_device(device: int | str) -> bool:
    """Whether ``device`` names a camera (an index or a /dev node) rather than a file."""
    return isinstance(device, int) or str(device).startswith("/dev/")


def open_capture(
    device: int | str, width: int, height: int, fps: float, fourcc: str = "MJPG"
) -> cv2.VideoCapture:
    """An opened ``VideoCapture``; on a live device, the pixel format, size and rate are set."""
    require_sdk(OPENCV, cv2, f"camera source {device!r}")
    if not is_live_device(device) and not Path(str(device)).is_file():
        raise FileNotFoundError(f"camera source {device!r} is neither a device nor a video file")
    cap = cv2.VideoCapture(device)
    if not cap.isOpened():
        raise RuntimeError(f"OpenCV could not open camera {device!r} (busy or not connected?)")
    if is_live_device(device):
        cap.set(cv2.CAP_PROP_FOURCC, cv2.VideoWriter.fourcc(*fourcc))
        cap.set(cv2.CAP_PROP_FRAME_WIDTH, width)
        cap.set(cv2.CAP_PROP_FRAME_HEIGHT, height)
        cap.set(cv2.CAP_PROP_FPS, fps)
        # Keep the driver's queue short, so that grabbed frames are fresh.
        cap.set(cv2.CAP_PROP_BUFFERSIZE, 1)
    return cap


def grab_frame(
    cap: cv2.VideoCapture,
    name: str,
    size: tuple[int, int],
    clock: Callable[[], float],
    crop: Crop | None = None,
) -> Frame:
    """Grab one frame now: stamped at grab time, cropped, checked to be ``size`` (w, h), RGB."""
    if not cap.grab():
        raise RuntimeError(f"camera {name}: no frame (end of stream or device lost)")
    stamp = clock()
    ok, bgr = cap.retrieve()
    if not ok or bgr is None:
        raise RuntimeError(f"camera {name}: a grabbed frame could not be decoded")
    image = crop(bgr) if crop is not None else bgr
    if image.ndim != 3 or image.shape[2] != 3:
        raise RuntimeError(f"camera {name}: expected a colour image, got shape {image.shape}")
    width, height = size
    if image.shape[:2] != (height, width):
        raise RuntimeError(
            f"camera {name}: frames are {image.shape[1]}x{image.shape[0]}, but the "
            f"configuration (and its intrinsics) says {width}x{height}"
        )
    return Frame(stamp, np.ascontiguousarray(cv2.cvtColor(image, cv2.COLOR_BGR2RGB)))


def check_size(name: str, width: int, height: int, intrinsics: Intrinsics) -> None:
    """Refuse a capture size that the intrinsics were not calibrated at."""
    if (width, height) != (intrinsics.width, intrinsics.height):
        raise ValueError(
            f"camera {name}: capture size {width}x{height} differs from the intrinsics' "
            f"{intrinsics.width}x{intrinsics.height}; calibrate at the capture size"
        )


class OpenCVCamera:
    """A UVC camera (or a video file) with configured intrinsics (the ``Camera`` interface).

    The reported intrinsics are the configured ones: a UVC camera does not know its own.
    ``background`` defaults to True for live devices and False for files.
    """

    def __init__(
        self,
        device: int | str,
        intrinsics: Intrinsics,
        width: int | None = None,
        height: int | None = None,
        fps: float = 30.0,
        name: str = "camera",
        clock: Callable[[], float] = time.monotonic,
        background: bool | None = None,
        fourcc: str = "MJPG",
    ) -> None:
        self.name = name
        self._intrinsics = intrinsics
        width = intrinsics.width if width is None else width
        height = intrinsics.height if height is None else height
        check_size(name, width, height, intrinsics)
        self._cap = open_capture(device, width, height, fps, fourcc)
        size = (width, height)
        self._frames = LatestValue(
            lambda: grab_frame(self._cap, name, size, clock),
            f"camera {name}",
            is_live_device(device) if background is None else background,
        )

    def intrinsics(self) -> Intrinsics:
        return self._intrinsics

    def read(self) -> Frame:
        return self._frames.read()

    def close(self) -> None:
        self._frames.close()
        self._cap.release()
