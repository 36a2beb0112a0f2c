"""The calibration board the twin's presenter holds up: its print in the scene and the
poses a person would prop it up in."""

from __future__ import annotations

import mujoco
import numpy as np
from scipy.spatial.transform import Rotation

from r2s2r.geometry.board import Checkerboard, board_texture

# The calibration board the twin's presenter holds up: 9 x 6 inner corners of 40 mm squares.
TWIN_BOARD = Checkerboard(9, 6, 0.04)
# Where the board waits while it is not being shown (far outside every camera's view).
BOARD_PARKED = np.array([3.0, -3.0, 0.0])
# How many distinct board placements the twin's operator makes.
BOARD_PLACEMENTS = 32


def add_board(spec: mujoco.MjSpec, board: Checkerboard, px_per_square: int = 48) -> None:
    """Add a printed ``board`` on a mocap body named ``calib_board`` whose frame is the
    board's (OpenCV convention: corners in its xy plane, the printed face towards -z). It is
    seen, not touched: it collides with nothing."""
    margin = 1.0
    image = board_texture(board, px_per_square, margin)
    h, w = image.shape[:2]
    tex = spec.add_texture(
        name="calib_board_tex", type=mujoco.mjtTexture.mjTEXTURE_2D, width=w, height=h, nchannel=3
    )
    tex.data = image.tobytes()
    mat = spec.add_material(name="calib_board_mat", specular=0.0, shininess=0.0)
    mat.textures[mujoco.mjtTextureRole.mjTEXROLE_RGB] = tex.name
    s = board.square_m
    x0 = y0 = -(1.0 + margin) * s
    x1, y1 = x0 + w / px_per_square * s, y0 + h / px_per_square * s
    verts = [x0, y0, 0.0, x1, y0, 0.0, x1, y1, 0.0, x0, y1, 0.0]
    # Image row 0 is the board's -y edge; both windings, so either side shows the print.
    uv = [0.0, 0.0, 1.0, 0.0, 1.0, 1.0, 0.0, 1.0]
    mesh = spec.add_mesh(
        name="calib_board_mesh",
        uservert=verts,
        userface=[0, 2, 1, 0, 3, 2, 0, 1, 2, 0, 2, 3],
        usertexcoord=uv,
    )
    mesh.inertia = mujoco.mjtMeshInertia.mjMESH_INERTIA_SHELL
    body = spec.worldbody.add_body(name="calib_board", mocap=True, pos=list(BOARD_PARKED))
    body.explicitinertial = True
    body.mass, body.inertia = 0.2, [1e-3, 1e-3, 1e-3]
    body.add_geom(
        name="calib_board_geom",
        type=mujoco.mjtGeom.mjGEOM_MESH,
        meshname=mesh.name,
        material=mat.name,
        contype=0,
        conaffinity=0,
        group=2,
    )


def board_placements(
    board: Checkerboard, rng: np.random.Generator, belt_top: float, n: int
) -> list[np.ndarray]:
    """``n`` poses (7,) of the board frame in the cell, as a person props a board up for a
    camera looking down at the belt: over the belt, 8-35 cm above it, tilted 20-45 degrees in
    varied directions, turned a little in its plane, printed face up."""
    poses = []
    face_up = Rotation.from_euler("x", 180.0, degrees=True)
    for _ in range(n):
        axis_angle = rng.uniform(0.0, 2.0 * np.pi)
        axis = np.array([np.cos(axis_angle), np.sin(axis_angle), 0.0])
        tilt = Rotation.from_rotvec(axis * np.radians(rng.uniform(20.0, 45.0)))
        spin = Rotation.from_euler("z", rng.uniform(-30.0, 30.0), degrees=True)
        rot = tilt * spin * face_up
        centre = np.array(
            [rng.uniform(-0.4, 0.4), rng.uniform(-0.12, 0.12), belt_top + rng.uniform(0.08, 0.35)]
        )
        pos = centre - rot.apply(board.center_m)
        poses.append(np.concatenate([pos, rot.as_quat(scalar_first=True)]))
    return poses
