"""Board captures through a rig for camera grounding (the file layout is described in
``r2s2r.ground.cameras``): the presenter props the board up for the head camera, and each arm
moves its wrist camera around it through the safety supervisor, aimed with the CAD mount."""

from __future__ import annotations

import json
from pathlib import Path

import cv2
import numpy as np
from scipy.spatial.transform import Rotation
from tqdm import tqdm

from r2s2r.geometry.board import Checkerboard
from r2s2r.geometry.poses import matrix_to_pose, pose_to_matrix
from r2s2r.ground.calibrate import pose_from_rvec, solve_pose
from r2s2r.ground.cameras import spec_pose_matrix, tcp_from_camera_nominal
from r2s2r.ground.detect import detect
from r2s2r.rig.interfaces import Rig
from r2s2r.rig.safety import SafetySupervisor
from r2s2r.spec import WorldSpec
from r2s2r.spec.world import ARM_SIDES

PERIOD_S = 0.02
# Board placements the head camera sees, and how many of them each wrist camera visits.
HEAD_PLACEMENTS = 20
WRIST_PLACEMENTS = 5
WRIST_VIEWS = 5


def _move(
    rig: Rig,
    supervisor: SafetySupervisor,
    side: str,
    goal: np.ndarray,
    seconds: float,
    settle_s: float = 0.8,
) -> None:
    """Move arm ``side`` (through the supervisor) to ``goal`` along a minimum-jerk path and let
    it settle; the other arms are told to hold where they are, so their watchdogs stay calm."""
    arm = supervisor.arm(side)
    holds = {
        other: np.asarray(supervisor.arm(other).state().tcp_pose, dtype=float)
        for other in ARM_SIDES
        if other != side
    }

    def hold() -> None:
        for other, pose in holds.items():
            supervisor.arm(other).send_tcp_target(pose)

    start = np.asarray(arm.state().tcp_pose, dtype=float)
    r0 = Rotation.from_quat(start[3:], scalar_first=True)
    r1 = Rotation.from_quat(goal[3:], scalar_first=True)
    turn = (r0.inv() * r1).as_rotvec()
    # A minimum-jerk move peaks at 1.9x its mean speed: stay under 0.5 m/s and 1 rad/s.
    seconds = max(seconds, 3.75 * float(np.linalg.norm(goal[:3] - start[:3])))
    seconds = max(seconds, 1.9 * float(np.linalg.norm(turn)))
    steps = max(1, int(seconds / PERIOD_S))
    for i in range(1, steps + 1):
        t = i / steps
        s = t**3 * (10.0 + t * (-15.0 + 6.0 * t))
        rot = r0 * Rotation.from_rotvec(turn * s)
        pose = np.concatenate(
            [start[:3] + (goal[:3] - start[:3]) * s, rot.as_quat(scalar_first=True)]
        )
        arm.send_tcp_target(pose)
        hold()
        supervisor.tick()
        rig.step()
    for _ in range(int(settle_s / PERIOD_S)):
        arm.send_tcp_target(goal)
        hold()
        supervisor.tick()
        rig.step()


def _aim(
    centre: np.ndarray, normal: np.ndarray, x_cam: np.ndarray, rng: np.random.Generator
) -> np.ndarray:
    """A TCP pose (7,) that puts the CAD-mounted wrist camera 33-45 cm from the board centre,
    looking at it from the robots' side of the belt, 25-50 degrees from the board normal."""
    up = normal if normal[2] > 0 else -normal
    away = rng.uniform(np.radians(25.0), np.radians(50.0))
    azimuth = np.radians(-90.0 + rng.uniform(-40.0, 40.0))
    tilt_dir = np.array([np.cos(azimuth), np.sin(azimuth), 0.0])
    tilt_dir -= up * (tilt_dir @ up)
    tilt_dir /= np.linalg.norm(tilt_dir)
    view_dir = np.cos(away) * up + np.sin(away) * tilt_dir
    eye = centre + rng.uniform(0.33, 0.45) * view_dir
    z = (centre - eye) / np.linalg.norm(centre - eye)
    # Image "down" roughly along the cell's -y (the camera upright as seen from the robots).
    y = np.array([0.0, -1.0, 0.0]) - z * (-z[1])
    y /= np.linalg.norm(y)
    cam = np.eye(4)
    cam[:3, :3] = np.column_stack([np.cross(y, z), y, z])
    cam[:3, 3] = eye
    spin = Rotation.from_euler("z", rng.uniform(-15.0, 15.0), degrees=True).as_matrix()
    cam[:3, :3] = cam[:3, :3] @ spin
    return matrix_to_pose(cam @ np.linalg.inv(x_cam))


def capture_cameras(
    rig: Rig,
    supervisor: SafetySupervisor,
    out: Path,
    board: Checkerboard,
    nominal: WorldSpec,
    seed: int = 0,
    head_placements: int = HEAD_PLACEMENTS,
    wrist_placements: int = WRIST_PLACEMENTS,
    wrist_views: int = WRIST_VIEWS,
    progress: bool = True,
) -> Path:
    """Capture board views of every camera through ``rig`` into ``out/cameras``; see the
    module docstring for the layout. Arms move only through ``supervisor``."""
    folder = Path(out) / "cameras"
    rng = np.random.default_rng(seed)
    (folder / "head").mkdir(parents=True, exist_ok=True)
    head_intr = rig.cameras["head"].intrinsics()
    head_nominal = spec_pose_matrix(nominal.cameras["head"].pose)
    obj = board.object_points()
    total = head_placements + len(ARM_SIDES) * wrist_placements * wrist_views
    bar = tqdm(total=total, desc="capturing board views", unit="view", disable=not progress)
    wrist_poses: dict[str, dict[str, list[float]]] = {side: {} for side in ARM_SIDES}
    visited = 0
    for k in range(head_placements):
        rig.presenter.place_board(k)
        for side in ARM_SIDES:
            home = np.asarray(supervisor.arm(side).state().tcp_pose, dtype=float)
            _move(rig, supervisor, side, home, PERIOD_S, settle_s=0.1)
        image = rig.cameras["head"].read().image
        cv2.imwrite(str(folder / "head" / f"p{k:02d}.png"), image[:, :, ::-1])
        bar.update()
        if visited >= wrist_placements:
            continue
        # Where the board roughly is: the head camera's CAD pose and data-sheet intrinsics.
        # The wrists visit the first placements the head camera sees whole.
        gray = cv2.cvtColor(image, cv2.COLOR_RGB2GRAY)
        found = detect([("v", gray)], board).corners.get("v")
        if found is None:
            continue
        visited += 1
        rvec, tvec = solve_pose(head_intr.model, head_intr.K(), head_intr.D(), obj, found)
        cam_board = pose_to_matrix(pose_from_rvec(rvec, tvec))
        world_board = head_nominal @ cam_board
        centre = world_board[:3, :3] @ board.center_m + world_board[:3, 3]
        normal = world_board[:3, 2]
        for side in ARM_SIDES:
            arm = supervisor.arm(side)
            home = np.asarray(arm.state().tcp_pose, dtype=float)
            x_cam = tcp_from_camera_nominal(nominal, side)
            sub = folder / f"{side}_wrist"
            sub.mkdir(exist_ok=True)
            for j in range(wrist_views):
                goal = _aim(centre, normal, x_cam, rng)
                _move(rig, supervisor, side, goal, 1.5)
                view = f"p{k:02d}_v{j:02d}"
                tcp = np.asarray(arm.state().tcp_pose, dtype=float)
                frame = rig.cameras[f"{side}_wrist"].read().image
                cv2.imwrite(str(sub / f"{view}.png"), frame[:, :, ::-1])
                wrist_poses[side][view] = [float(v) for v in tcp]
                bar.update()
            _move(rig, supervisor, side, home, 1.5)
    rig.presenter.remove_board()
    bar.close()
    for side in ARM_SIDES:
        path = folder / f"{side}_wrist" / "tcp_poses.json"
        path.parent.mkdir(exist_ok=True)
        path.write_text(json.dumps(wrist_poses[side], indent=1))
    meta = {
        "board": str(board),
        "head_placements": head_placements,
        "wrist_placements": wrist_placements,
        "wrist_views": wrist_views,
        "image_sizes": {
            name: [cam.intrinsics().width, cam.intrinsics().height]
            for name, cam in rig.cameras.items()
        },
    }
    (folder / "meta.json").write_text(json.dumps(meta, indent=1))
    return folder
