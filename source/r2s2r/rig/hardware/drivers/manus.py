"""The Manus glove through a ZMQ bridge (``pyzmq``, the 'teleop' extra).

Manus has no Python SDK: a small bridge built on the vendor's C++ SDK (or a ROS 2 node)
publishes the raw hand skeleton. This driver subscribes to it and turns each message into the
21 keypoints the retargeter takes, in the wrist frame (written for pyzmq 27.3.0, checked at
open: ``PYZMQ``); the wrist pose comes from a tracker on
the back of the hand (``ViveTracker``), and is NaN without one, which the teleop path passes on
and the safety supervisor rejects.

Wire format: one JSON object per ZMQ message (or a two-part message: topic, JSON)::

    {"stamp": 12.345,            # sender clock, seconds (informative; the host stamps)
     "side": "right",            # "left" or "right"
     "units": "m",               # "m", "cm" or "mm" (default "m")
     "nodes": [{"chain": "hand", "joint": "root", "pos": [x, y, z], "rot": [w, x, y, z]},
               {"chain": "thumb", "joint": "metacarpal", "pos": [x, y, z]},
               ...]}

Nodes are the Manus raw skeleton, positions in any right-handed frame shared by all nodes of
one message. ``chain`` is hand, thumb, index, middle, ring or pinky; ``joint`` is root (the
hand only, with its rotation), metacarpal, proximal, intermediate, distal or tip. The 21
keypoints are, in MediaPipe order: the hand root; thumb metacarpal, proximal, distal, tip;
then for each other finger proximal, intermediate, distal, tip (finger metacarpals unused).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any, Protocol

import numpy as np

from r2s2r.geometry.poses import unit_quat
from r2s2r.geometry.rotations import quat_to_mat
from r2s2r.optional import missing_extra
from r2s2r.rig.hardware.drivers.sdk import SdkRequirement, require_sdk
from r2s2r.rig.hardware.drivers.stream import LatestValue
from r2s2r.rig.interfaces import HandKeypoints

FINGER_JOINTS = ("proximal", "intermediate", "distal", "tip")
THUMB_JOINTS = ("metacarpal", "proximal", "distal", "tip")
# (chain, joint) of each of the 21 keypoints, in MediaPipe / MANO order.
KEYPOINT_NODES: tuple[tuple[str, str], ...] = (
    (("hand", "root"),)
    + tuple(("thumb", j) for j in THUMB_JOINTS)
    + tuple((f, j) for f in ("index", "middle", "ring", "pinky") for j in FINGER_JOINTS)
)
UNITS = {"m": 1.0, "cm": 0.01, "mm": 0.001}
# The glove's side of the wire: a SUB socket with a receive timeout (the calls used are the same
# in pyzmq 25.1.2 and 27.3.0, both run against a socket here).
PYZMQ = SdkRequirement(
    dist="pyzmq",
    written_for="27.3.0",
    supported=">=25,<28",
    what="the Manus glove's bridge client",
    install="pip install 'r2s2r[teleop]'",
)


def import_zmq() -> Any:
    """The one place r2s2r imports pyzmq."""
    try:
        import zmq
    except ImportError as err:
        raise missing_extra(err, "teleop") from err
    return zmq


class PoseSource(Protocol):
    """Anything that reads a timestamped pose (7,), e.g. a ``ViveTracker``."""

    def read_pose(self) -> tuple[float, np.ndarray]: ...


def skeleton_to_keypoints(
    message: dict[str, Any], wrist_rotation: np.ndarray | None = None
) -> np.ndarray:
    """The 21 keypoints (21, 3) in metres in the wrist frame of one decoded bridge message.

    Points are moved into the hand root's frame; ``wrist_rotation`` (w, x, y, z) then turns
    the root frame of the glove into the wrist frame the retargeter uses.
    """
    scale = UNITS.get(message.get("units", "m"))
    if scale is None:
        raise ValueError(f"units: expected one of {sorted(UNITS)}, got {message.get('units')!r}")
    nodes: dict[tuple[str, str], dict[str, Any]] = {}
    for node in message.get("nodes", []):
        nodes[(str(node.get("chain", "")).lower(), str(node.get("joint", "")).lower())] = node
    missing = [f"{c}/{j}" for c, j in KEYPOINT_NODES if (c, j) not in nodes]
    if missing:
        raise ValueError(f"skeleton message lacks nodes {missing}")
    points = np.array([nodes[key].get("pos") for key in KEYPOINT_NODES], dtype=float)
    if points.shape != (21, 3) or not np.isfinite(points).all():
        raise ValueError("skeleton message: every node needs a finite 3-D 'pos'")
    root_rot = nodes[("hand", "root")].get("rot")
    if root_rot is None:
        raise ValueError("skeleton message: the hand root node needs its rotation 'rot'")
    rot = quat_to_mat(unit_quat(np.asarray(root_rot, dtype=float), "hand root rotation"))
    # Rows of (p - p_root) @ R are R^T (p - p_root): the points in the root frame.
    local = (points - points[0]) @ rot * scale
    if wrist_rotation is not None:
        local = local @ quat_to_mat(unit_quat(np.asarray(wrist_rotation, dtype=float))).T
    return local


def decode_message(frames: list[bytes]) -> dict[str, Any]:
    """The JSON object of a one-part or (topic, payload) ZMQ message."""
    try:
        data = json.loads(frames[-1].decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ValueError(f"skeleton message is not JSON: {err}") from None
    if not isinstance(data, dict):
        raise ValueError("skeleton message: expected a JSON object")
    return data


class ManusGlove:
    """One glove (the ``HandTracker`` interface, keypoints from the glove, wrist from a tracker).

    Subscribes to ``endpoint`` (e.g. ``tcp://127.0.0.1:5555``), on ``topic`` if given, and
    keeps the newest message for ``side`` in a background thread.
    """

    def __init__(
        self,
        endpoint: str,
        side: str = "right",
        name: str | None = None,
        topic: str = "",
        wrist_tracker: PoseSource | None = None,
        wrist_rotation: tuple[float, float, float, float] = (1.0, 0.0, 0.0, 0.0),
        clock: Callable[[], float] = time.monotonic,
        timeout_s: float = 2.0,
    ) -> None:
        self.name = name or f"{side}_glove"
        self.side, self.wrist_tracker, self._clock = side, wrist_tracker, clock
        self.wrist_rotation = unit_quat(np.asarray(wrist_rotation, dtype=float))
        zmq = import_zmq()
        self.sdk_version = require_sdk(PYZMQ, zmq, self.name)
        self._ctx = zmq.Context.instance()
        self._sock = self._ctx.socket(zmq.SUB)
        self._sock.setsockopt(zmq.RCVTIMEO, 200)
        self._sock.setsockopt(zmq.SUBSCRIBE, topic.encode())
        self._sock.connect(endpoint)
        self._latest = LatestValue(self._receive, self.name, background=True, timeout_s=timeout_s)

    def _receive(self) -> tuple[float, np.ndarray]:
        while True:
            message = decode_message(self._sock.recv_multipart())
            if message.get("side", self.side) == self.side:
                return self._clock(), skeleton_to_keypoints(message, self.wrist_rotation)

    def read(self) -> HandKeypoints:
        stamp, keypoints = self._latest.read()
        wrist = np.full(7, np.nan)
        if self.wrist_tracker is not None:
            wrist = self.wrist_tracker.read_pose()[1]
        return HandKeypoints(stamp, keypoints.copy(), wrist)

    def close(self) -> None:
        self._latest.close()
        self._sock.close(linger=0)
