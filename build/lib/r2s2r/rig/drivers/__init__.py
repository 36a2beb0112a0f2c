"""Drivers for the real cell's devices, each behind a rig interface.

Every vendor SDK is an optional extra, imported in one function of its driver's module when
a device is opened: ``flexivrdk`` (flexiv), ``wujihandpy`` (wuji), ``pyzed`` (zed, from the
ZED SDK installer), ``pyzmq`` (teleop) and ``openvr`` (vive). Importing this package needs
none of them.
"""

from r2s2r.rig.drivers.flexiv import CartesianLimits, FlexivArm, FlexivBringUp, FlexivError
from r2s2r.rig.drivers.manual import ManualConveyor, OperatorPresenter
from r2s2r.rig.drivers.manus import ManusGlove, skeleton_to_keypoints
from r2s2r.rig.drivers.opencv_camera import OpenCVCamera
from r2s2r.rig.drivers.vive import OpenVRSession, ViveTracker, openvr_matrix_to_pose
from r2s2r.rig.drivers.wuji import WujiHand
from r2s2r.rig.drivers.zed import ZedCamera, split_side_by_side

__all__ = [
    "CartesianLimits",
    "FlexivArm",
    "FlexivBringUp",
    "FlexivError",
    "ManualConveyor",
    "ManusGlove",
    "OpenCVCamera",
    "OpenVRSession",
    "OperatorPresenter",
    "ViveTracker",
    "WujiHand",
    "ZedCamera",
    "openvr_matrix_to_pose",
    "skeleton_to_keypoints",
    "split_side_by_side",
]
