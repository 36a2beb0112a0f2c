"""Camera grounding on the twin: the board the presenter props up where it says, and a capture
folder without its metadata refused. The fit against the twin's truth is judged in
test_ground_pipeline.py."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from scipy.spatial.transform import Rotation

from r2s2r.geometry.poses import matrix_to_pose, pose_to_matrix
from r2s2r.ground.calibrate import fit_board_poses
from r2s2r.ground.cameras import ground_cameras, spec_pose_matrix
from r2s2r.ground.detect import CalibrationError, find_corners
from r2s2r.rig.twin import TwinRig
from r2s2r.rig.twin.board import TWIN_BOARD
from r2s2r.sim.camera import Intrinsics


def _angle_deg(q1: np.ndarray, q2: np.ndarray) -> float:
    a = Rotation.from_quat(q1, scalar_first=True)
    b = Rotation.from_quat(q2, scalar_first=True)
    return float(np.degrees((a.inv() * b).magnitude()))


def test_twin_board_is_where_the_presenter_put_it() -> None:
    rig = TwinRig(seed=4, native_cameras=True)
    truth = rig.reveal_truth().world.cameras["head"]
    seen = []
    for placement in range(6):
        rig.presenter.place_board(placement)
        image = rig.cameras["head"].read().image
        assert image.shape == (truth.height, truth.width, 3)
        corners = find_corners(image[:, :, 1], TWIN_BOARD)
        if corners is not None:
            seen.append((placement, corners))
    # Most placements are in full view of the head camera.
    assert len(seen) >= 4
    placement, corners = seen[-1]
    cam_board = fit_board_poses(Intrinsics.from_spec(truth), TWIN_BOARD, {"v": corners})["v"]
    cell_board = matrix_to_pose(spec_pose_matrix(truth.pose) @ pose_to_matrix(cam_board))
    placed = rig.reveal_internals().board_poses[placement]
    assert np.linalg.norm(cell_board[:3] - placed[:3]) < 0.002
    assert _angle_deg(cell_board[3:], placed[3:]) < 0.1
    rig.presenter.remove_board()
    assert find_corners(rig.cameras["head"].read().image[:, :, 1], TWIN_BOARD) is None


def test_capture_without_meta_is_refused(tmp_path: Path, world) -> None:  # noqa: ANN001
    with pytest.raises(CalibrationError, match="meta.json"):
        ground_cameras(tmp_path, world, progress=False)
