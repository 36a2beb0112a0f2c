"""Checkerboard views captured one at a time, as a person does at a calibration session: the
board is propped up (``presenter.place_board``), every camera is read, the board's corners are
found, and each camera that sees the whole board keeps its view in the layout grounding reads
(``OUT/cameras/<camera>/pNN.png``; a wrist view also records the arm's TCP pose in
``tcp_poses.json``). ``good_views`` counts what a folder holds so far."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np

from r2s2r.rig.interfaces import Rig

# The board the twin's presenter holds (``r2s2r.ground.pipeline.DEFAULT_BOARD``).
DEFAULT_BOARD = "checkerboard:9x6:0.04"
# Periods the board is left to settle before the views are read.
SETTLE_PERIODS = 5


@dataclass(frozen=True)
class BoardView:
    """One capture: every camera's image, its corners (None where the board was not found
    whole), which views were kept, and the good views per camera in the folder since."""

    placement: int
    images: dict[str, np.ndarray]
    corners: dict[str, np.ndarray | None]
    saved: tuple[str, ...]
    counts: dict[str, int]


def capture_board_view(
    rig: Rig, out: str | Path, placement: int, board: str = DEFAULT_BOARD
) -> BoardView:
    """Prop the board up in placement ``placement`` and keep every camera's view that shows
    it whole (see the module). Runs on the thread that steps ``rig``."""
    from r2s2r.geometry.board import parse_board
    from r2s2r.ground.detect import find_corners

    spec = parse_board(board)
    folder = Path(out) / "cameras"
    rig.presenter.place_board(placement)
    rig.step(SETTLE_PERIODS)
    images: dict[str, np.ndarray] = {}
    corners: dict[str, np.ndarray | None] = {}
    saved: list[str] = []
    for name, camera in rig.cameras.items():
        image = np.ascontiguousarray(camera.read().image)
        found = find_corners(cv2.cvtColor(image, cv2.COLOR_RGB2GRAY), spec)
        images[name], corners[name] = image, found
        if found is None:
            continue
        sub = folder / name
        sub.mkdir(parents=True, exist_ok=True)
        view = f"p{placement:02d}" if name == "head" else f"p{placement:02d}_v00"
        cv2.imwrite(str(sub / f"{view}.png"), image[:, :, ::-1])
        side = name.removesuffix("_wrist")
        if side != name and side in rig.arms:
            _record_tcp(sub / "tcp_poses.json", view, rig.arms[side].state().tcp_pose)
        saved.append(name)
    return BoardView(placement, images, corners, tuple(saved), good_views(out, rig.cameras))


def _record_tcp(path: Path, view: str, tcp: np.ndarray) -> None:
    poses = json.loads(path.read_text()) if path.is_file() else {}
    poses[view] = [float(v) for v in tcp]
    path.write_text(json.dumps(poses, indent=1))


def good_views(
    out: str | Path, cameras: Iterable[str] = ("head", "left_wrist", "right_wrist")
) -> dict[str, int]:
    """Views kept per camera under ``OUT/cameras`` (``cameras``: the names to count)."""
    folder = Path(out) / "cameras"
    return {name: len(list((folder / name).glob("*.png"))) for name in cameras}


def draw_corners(
    image: np.ndarray, corners: np.ndarray | None, board: str = DEFAULT_BOARD
) -> np.ndarray:
    """``image`` (H, W, 3) RGB with the board's detected corners drawn (a copy)."""
    from r2s2r.geometry.board import parse_board

    out = np.ascontiguousarray(image).copy()
    if corners is None:
        return out
    cv2.drawChessboardCorners(
        out, parse_board(board).pattern_size, corners.astype(np.float32), True
    )
    return out
