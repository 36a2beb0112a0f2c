"""Feature statistics: per episode when it is saved, and over the dataset by aggregation.

Vector features (state, action) get count, mean, std, min, max and the q01/q10/q50/q90/q99
quantiles. Over the dataset, count, mean, std, min and max are exact (pooled); quantiles are
the count-weighted mean of the episodes' quantiles, as LeRobot aggregates them (exact for a
single episode, an approximation otherwise).

Images get per-channel 256-bin histograms, which add up exactly across episodes; their stats
are in [0, 1] and shaped (3, 1, 1), as LeRobot stores image stats.
"""

from __future__ import annotations

from collections.abc import Sequence

import cv2
import numpy as np

QUANTILES = {"q01": 0.01, "q10": 0.10, "q50": 0.50, "q90": 0.90, "q99": 0.99}
VECTOR_STATS = ("count", "mean", "std", "min", "max", *QUANTILES)

Stats = dict[str, np.ndarray]


def vector_stats(x: np.ndarray) -> Stats:
    """Stats of (N, D) samples; each entry (D,), ``count`` (1,)."""
    x = np.asarray(x, dtype=np.float64)
    out: Stats = {
        "count": np.array([len(x)], dtype=np.float64),
        "mean": x.mean(axis=0),
        "std": x.std(axis=0),
        "min": x.min(axis=0),
        "max": x.max(axis=0),
    }
    qs = np.quantile(x, list(QUANTILES.values()), axis=0)
    out.update({name: q for name, q in zip(QUANTILES, qs, strict=True)})
    return out


def aggregate_vector_stats(parts: Sequence[Stats]) -> Stats:
    """Dataset stats from episode stats (see the module docstring)."""
    n = np.array([p["count"][0] for p in parts])
    w = n / n.sum()
    mean = sum(wi * p["mean"] for wi, p in zip(w, parts, strict=True))
    second = sum(wi * (p["std"] ** 2 + p["mean"] ** 2) for wi, p in zip(w, parts, strict=True))
    out: Stats = {
        "count": np.array([n.sum()]),
        "mean": np.asarray(mean),
        "std": np.sqrt(np.maximum(np.asarray(second) - np.asarray(mean) ** 2, 0.0)),
        "min": np.min([p["min"] for p in parts], axis=0),
        "max": np.max([p["max"] for p in parts], axis=0),
    }
    for name in QUANTILES:
        out[name] = np.asarray(sum(wi * p[name] for wi, p in zip(w, parts, strict=True)))
    return out


def channel_histogram(image: np.ndarray) -> np.ndarray:
    """Per-channel value counts of an (H, W, 3) uint8 image; (3, 256) int64.

    OpenCV's histogram (exact: float32 counts are whole numbers up to 2**24 pixels, far more
    than a frame has) takes a twentieth of numpy's time, which mattered at three cameras
    per recorded frame."""
    image = np.ascontiguousarray(image)
    if image.shape[0] * image.shape[1] >= 2**24:
        raise ValueError(f"image of {image.shape[:2]} pixels: too large to count exactly")
    counts = [cv2.calcHist([image], [c], None, [256], [0, 256]) for c in range(3)]
    return np.concatenate(counts, axis=1).T.astype(np.int64)


def histogram_stats(hist: np.ndarray, frames: int) -> Stats:
    """Image stats of ``frames`` images from their (3, 256) channel histograms; values scaled
    to [0, 1] and shaped (3, 1, 1).

    Quantiles are the smallest value whose cumulative count reaches the fraction (numpy's
    ``inverted_cdf`` method).
    """
    hist = np.asarray(hist, dtype=np.float64)
    values = np.arange(256, dtype=np.float64) / 255.0
    count = hist.sum(axis=1)
    mean = hist @ values / count
    var = hist @ values**2 / count - mean**2
    present = hist > 0
    lo = values[np.argmax(present, axis=1)]
    hi = values[255 - np.argmax(present[:, ::-1], axis=1)]
    cdf = np.cumsum(hist, axis=1)
    out: Stats = {
        "count": np.array([float(frames)]),
        "mean": mean,
        "std": np.sqrt(np.maximum(var, 0.0)),
        "min": lo,
        "max": hi,
    }
    for name, q in QUANTILES.items():
        out[name] = values[np.argmax(cdf >= q * count[:, None], axis=1)]
    return {k: (v if k == "count" else v.reshape(3, 1, 1)) for k, v in out.items()}


def to_json(stats: dict[str, Stats]) -> dict[str, dict[str, list]]:
    """Stats as nested lists for ``meta/stats.json``."""
    return {feat: {k: v.tolist() for k, v in s.items()} for feat, s in stats.items()}
