"""Checkerboard corners in camera images, for calibration: image files read as grey, the board's
inner corners found (sub-pixel, in board order) per view, and the capture advice and error that
calibration shares.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import cv2
import numpy as np
from tqdm import tqdm

from r2s2r.geometry.board import Checkerboard

__all__ = [
    "CAPTURE_HINT",
    "MIN_VIEWS",
    "CalibrationError",
    "Detections",
    "detect",
    "detect_folder",
    "find_corners",
    "read_gray",
]

# Fewest usable views: leave-one-out then still fits on five.
MIN_VIEWS = 6
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg")
CAPTURE_HINT = (
    f"capture at least {MIN_VIEWS} (better 12-20) sharp views of the whole board, tilted "
    "20-45 degrees in different directions and spread over the image"
)
_SUBPIX_TERM = (cv2.TERM_CRITERIA_COUNT | cv2.TERM_CRITERIA_EPS, 100, 1e-5)


class CalibrationError(ValueError):
    """Calibration input that cannot give a trustworthy camera; the message says what to fix."""


@dataclass(frozen=True)
class Detections:
    """Board corners found in a set of images of one camera."""

    # (width, height) of every image.
    image_size: tuple[int, int]
    # View name -> corners (N, 1, 2) float64 in board order (row by row from the origin).
    corners: dict[str, np.ndarray]
    # View name -> why it has no corners.
    missing: dict[str, str] = field(default_factory=dict)


def _orient(corners: np.ndarray, gray: np.ndarray, board: Checkerboard) -> np.ndarray:
    """Put corners (N, 1, 2) in board order: the square diagonal to corner 0 must be black.

    Detectors may return the grid turned by half a turn; on a board of mixed parity that turn
    swaps the colour of that square, so a light one means the order must be reversed.
    """
    grid = corners.reshape(board.rows, board.cols, 2)
    c0, c1, cd = grid[0, 0], grid[0, 1], grid[1, 0]
    outer = c0 + 0.5 * (c0 - c1) + 0.5 * (c0 - cd)
    beside = c0 + 0.5 * (c1 - c0) + 0.5 * (c0 - cd)

    def level(p: np.ndarray) -> float:
        x = int(np.clip(round(p[0]), 1, gray.shape[1] - 2))
        y = int(np.clip(round(p[1]), 1, gray.shape[0] - 2))
        return float(gray[y - 1 : y + 2, x - 1 : x + 2].mean())

    return corners[::-1].copy() if level(outer) > level(beside) else corners


def find_corners(gray: np.ndarray, board: Checkerboard) -> np.ndarray | None:
    """Inner corners (N, 1, 2) float64 of ``board`` in a grey image (H, W) uint8, or None.

    ``cv2.findChessboardCorners`` plus ``cv2.cornerSubPix`` with a window sized to the corner
    spacing: on rendered boards (pinhole and fisheye) it is about twice as accurate as
    ``findChessboardCornersSB`` (0.05 vs 0.1 px RMS) and far faster; the SB detector is the
    fallback for views the classic one misses.
    """
    flags = cv2.CALIB_CB_ADAPTIVE_THRESH | cv2.CALIB_CB_NORMALIZE_IMAGE
    found, corners = cv2.findChessboardCorners(gray, board.pattern_size, flags=flags)
    if not found:
        found, corners = cv2.findChessboardCornersSB(
            gray, board.pattern_size, flags=cv2.CALIB_CB_EXHAUSTIVE
        )
        if not found:
            return None
    corners = corners.reshape(-1, 1, 2).astype(np.float32)
    grid = corners.reshape(board.rows, board.cols, 2)
    spacing = min(
        float(np.linalg.norm(np.diff(grid, axis=0), axis=2).min()),
        float(np.linalg.norm(np.diff(grid, axis=1), axis=2).min()),
    )
    # The window (2 win + 1 px) must stay clear of the neighbouring corners.
    win = max(2, int(0.35 * spacing))
    corners = cv2.cornerSubPix(gray, corners, (win, win), (-1, -1), _SUBPIX_TERM)
    return _orient(corners.astype(np.float64), gray, board)


def read_gray(path: Path) -> np.ndarray:
    """Read an image file as grey (H, W) uint8; a missing, unreadable or cut-off file raises."""
    try:
        data = path.read_bytes()
    except OSError as err:
        raise CalibrationError(f"{path}: cannot read the file ({err.strerror})") from None
    body = data.rstrip(b"\x00")
    if data.startswith(b"\x89PNG") and b"IEND" not in body[-12:]:
        raise CalibrationError(f"{path}: the PNG file is truncated; copy or capture it again")
    if data.startswith(b"\xff\xd8") and not body.endswith(b"\xff\xd9"):
        raise CalibrationError(f"{path}: the JPEG file is truncated; copy or capture it again")
    img = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_GRAYSCALE)
    if img is None:
        raise CalibrationError(f"{path}: not a readable image (expected PNG or JPEG)")
    return img


def detect(
    images: Iterable[tuple[str, np.ndarray]],
    board: Checkerboard,
    progress: bool = False,
    total: int | None = None,
) -> Detections:
    """Find the board in named images (grey (H, W) or RGB (H, W, 3) uint8), all one size.

    ``progress`` shows a progress bar (on stderr) over ``total`` images.
    """
    size: tuple[int, int] | None = None
    corners: dict[str, np.ndarray] = {}
    missing: dict[str, str] = {}
    bar = tqdm(images, desc="finding corners", unit="img", total=total, disable=not progress)
    for name, img in bar:
        if img.ndim == 2:
            gray = img
        else:
            code = cv2.COLOR_RGBA2GRAY if img.shape[2] == 4 else cv2.COLOR_RGB2GRAY
            gray = cv2.cvtColor(img, code)
        this = (gray.shape[1], gray.shape[0])
        if size is None:
            size = this
        elif this != size:
            raise CalibrationError(
                f"{name}: image is {this[0]}x{this[1]} but earlier ones are {size[0]}x{size[1]};"
                f" calibrate one camera at one resolution at a time"
            )
        found = find_corners(gray, board)
        if found is None:
            missing[name] = f"no {board.cols}x{board.rows} board found"
        else:
            corners[name] = found
    if size is None:
        raise CalibrationError(f"no images given; {CAPTURE_HINT}")
    return Detections(size, corners, missing)


def detect_folder(folder: Path, board: Checkerboard, progress: bool = False) -> Detections:
    """Find the board in every PNG/JPEG file of ``folder`` (views named by file name)."""
    folder = Path(folder)
    if not folder.is_dir():
        raise CalibrationError(f"{folder}: not a folder of images")
    files = sorted(p for p in folder.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES)
    if not files:
        raise CalibrationError(f"{folder}: no images ({', '.join(IMAGE_SUFFIXES)}); {CAPTURE_HINT}")
    return detect(((p.name, read_gray(p)) for p in files), board, progress, len(files))
