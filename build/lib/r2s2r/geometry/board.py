"""Calibration checkerboards: description, object points and texture.

The board frame (OpenCV convention) has its origin at the first inner corner, x along a row of
``cols`` inner corners, y along a column of ``rows`` inner corners, and z into the board, so a
camera looking at the printed face sees x to the right and y down when the board is upright.
Square ``(i, j)`` of the ``(cols + 1) x (rows + 1)`` printed squares spans
``x in [(i - 1) s, i s]``, ``y in [(j - 1) s, j s]`` and is black when ``i + j`` is even, so
the outer square diagonal to the origin corner is black.

Choose ``cols`` and ``rows`` of different parity (e.g. 9 x 6): such a board looks different
after a half turn, so the corner order, and hence the board pose, is unambiguous.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

__all__ = ["BOARD_FORM", "Checkerboard", "board_texture", "parse_board"]

# The textual form of a board, as the CLI takes it.
BOARD_FORM = "checkerboard:COLSxROWS:SQUARE_M"
_BOARD_RE = re.compile(r"^checkerboard:(\d+)x(\d+):([0-9]*\.?[0-9]+(?:[eE][-+]?\d+)?)$")


@dataclass(frozen=True)
class Checkerboard:
    """A checkerboard with ``cols`` x ``rows`` inner corners and squares of ``square_m`` metres."""

    cols: int
    rows: int
    square_m: float

    def __post_init__(self) -> None:
        """Reject boards the corner detectors cannot find."""
        if self.cols < 3 or self.rows < 3:
            raise ValueError(
                f"a checkerboard needs at least 3x3 inner corners, got {self.cols}x{self.rows}"
            )
        if not self.square_m > 0.0 or not np.isfinite(self.square_m):
            raise ValueError(
                f"square size must be a positive length in metres, got {self.square_m!r}"
            )

    @property
    def pattern_size(self) -> tuple[int, int]:
        """``(cols, rows)`` as OpenCV's corner detectors take it."""
        return self.cols, self.rows

    @property
    def num_corners(self) -> int:
        """Number of inner corners."""
        return self.cols * self.rows

    @property
    def is_symmetric(self) -> bool:
        """Whether a half turn maps the board onto itself (then its pose is ambiguous)."""
        return (self.cols + self.rows) % 2 == 0

    @property
    def size_m(self) -> tuple[float, float]:
        """Printed size ``(width, height)`` in metres, without margin."""
        return (self.cols + 1) * self.square_m, (self.rows + 1) * self.square_m

    @property
    def center_m(self) -> np.ndarray:
        """Centre of the corner grid in the board frame, shape (3,)."""
        return np.array(
            [(self.cols - 1) * self.square_m / 2, (self.rows - 1) * self.square_m / 2, 0.0]
        )

    def object_points(self) -> np.ndarray:
        """Inner corners in the board frame, row by row as the detectors order them.

        Shape (N, 1, 3) float64 with ``N = cols * rows``, the layout ``cv2.fisheye.calibrate``
        requires (and ``cv2.calibrateCamera`` accepts).
        """
        xs, ys = np.meshgrid(np.arange(self.cols), np.arange(self.rows))
        pts = np.stack([xs.ravel(), ys.ravel(), np.zeros(xs.size)], axis=1) * self.square_m
        return pts.reshape(-1, 1, 3).astype(np.float64)

    def intensity(self, x: np.ndarray, y: np.ndarray, margin_m: float) -> np.ndarray:
        """Board reflectance in [0, 1] at board-frame points; NaN off the board and its margin.

        ``x`` and ``y`` are metres in the board frame (any matching shapes); the white margin
        is ``margin_m`` wide around the printed squares.
        """
        s = self.square_m
        i = np.floor(np.asarray(x) / s) + 1.0
        j = np.floor(np.asarray(y) / s) + 1.0
        on_squares = (i >= 0) & (i <= self.cols) & (j >= 0) & (j <= self.rows)
        black = on_squares & ((i + j) % 2 == 0)
        w, h = self.size_m
        on_card = (
            (x >= -s - margin_m)
            & (x <= w - s + margin_m)
            & (y >= -s - margin_m)
            & (y <= h - s + margin_m)
        )
        return np.where(on_card, np.where(black, 0.0, 1.0), np.nan)

    def __str__(self) -> str:
        """The board in its textual form, ``checkerboard:COLSxROWS:SQUARE_M``."""
        return f"checkerboard:{self.cols}x{self.rows}:{self.square_m:g}"


def parse_board(text: str) -> Checkerboard:
    """Parse ``checkerboard:COLSxROWS:SQUARE_M`` (inner corners, square size in metres)."""
    match = _BOARD_RE.match(text.strip())
    if match is None:
        raise ValueError(
            f"board {text!r}: expected {BOARD_FORM} with inner-corner counts and the square "
            f"size in metres, e.g. checkerboard:9x6:0.025"
        )
    cols, rows, square = match.groups()
    try:
        return Checkerboard(int(cols), int(rows), float(square))
    except ValueError as err:
        raise ValueError(f"board {text!r}: {err}") from None


def board_texture(
    board: Checkerboard, px_per_square: int, margin_squares: float = 1.0
) -> np.ndarray:
    """The printable board image: squares plus a white margin, (H, W, 3) uint8 RGB.

    The image spans ``(cols + 1 + 2 m) x (rows + 1 + 2 m)`` squares with ``m = margin_squares``;
    its top-left pixel corner is board-frame point ``(-(1 + m) s, -(1 + m) s)``, so a texture
    mapped onto a plane of that size puts the board frame where :class:`Checkerboard` says.
    """
    if px_per_square < 1:
        raise ValueError(f"px_per_square must be at least 1, got {px_per_square}")
    if margin_squares < 0:
        raise ValueError(f"margin_squares must be non-negative, got {margin_squares}")
    margin_px = round(margin_squares * px_per_square)
    width = (board.cols + 1) * px_per_square + 2 * margin_px
    height = (board.rows + 1) * px_per_square + 2 * margin_px
    # Pixel centres in square units, relative to the board-frame origin.
    u = (np.arange(width) + 0.5 - margin_px) / px_per_square - 1.0
    v = (np.arange(height) + 0.5 - margin_px) / px_per_square - 1.0
    gray = board.intensity(
        u[None, :] * board.square_m,
        v[:, None] * board.square_m,
        margin_px / px_per_square * board.square_m,
    )
    img = np.where(np.isnan(gray), 1.0, gray) * 255.0
    return np.repeat(img.astype(np.uint8)[..., None], 3, axis=2)
