"""The latent analysis' projections and plots: PCA (always) and UMAP (where the ``umap-learn``
package is installed; imported here only, when used), each fitted on the training frames with
the rollouts projected into it; the projection plot (training frames as one cloud per source,
rollouts as traces from a start marker to an end marker) and the real share over each
rollout. Figures are drawn with Matplotlib's Agg canvas, never through pyplot's global state.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from r2s2r.eval.latent import RolloutShare

# Colours of the training sources (real first) and of the rollouts' conditions.
_SOURCE_COLOURS = ("tab:blue", "tab:orange", "tab:green", "tab:purple", "tab:brown", "tab:pink")
_TRACE_COLOURS = ("black", "tab:red", "tab:olive", "tab:cyan", "tab:gray", "darkgoldenrod")


def pca(train: np.ndarray, query: np.ndarray) -> tuple[np.ndarray, np.ndarray, list[float]]:
    """The first two principal components of ``train`` (N, D): (train (N, 2), query (M, 2)
    projected with the same centre and axes, the two components' explained variance ratios)."""
    centre = train.mean(axis=0)
    x = np.asarray(train, dtype=np.float64) - centre
    _, sing, vt = np.linalg.svd(x, full_matrices=False)
    axes = vt[:2]
    if axes.shape[0] < 2:
        # One feature only: a zero second axis keeps the plot's layout.
        axes = np.vstack([axes, np.zeros((2 - axes.shape[0], x.shape[1]))])
    var = sing**2
    ratio = (var[:2] / var.sum()).tolist() if var.sum() > 0 else [0.0, 0.0]
    ratio += [0.0] * (2 - len(ratio))
    q = np.asarray(query, dtype=np.float64) - centre
    return x @ axes.T, q @ axes.T, [float(r) for r in ratio]


def umap_available() -> bool:
    """Whether the ``umap`` package (umap-learn) is installed."""
    return importlib.util.find_spec("umap") is not None


def umap(train: np.ndarray, query: np.ndarray, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """UMAP of ``train`` (N, D) to 2-D and ``query`` (M, D) through the same fitted map:
    (N, 2), (M, 2). Needs umap-learn (not a dependency of r2s2r)."""
    try:
        import umap as umap_learn
    except ImportError as err:
        raise ImportError(
            f"the UMAP projection needs umap-learn, which could not be imported ({err}): "
            "pip install umap-learn"
        ) from None
    reducer = umap_learn.UMAP(n_components=2, random_state=seed)
    train_2d = np.asarray(reducer.fit_transform(train))
    return train_2d, np.asarray(reducer.transform(query))


def _figure(width: float, height: float) -> Figure:
    """A figure on its own Agg canvas."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height))
    FigureCanvasAgg(fig)
    return fig


def _colours(conditions: Sequence[str | None]) -> dict[str | None, str]:
    """A trace colour per condition (None: rollouts without one)."""
    names = sorted(set(conditions), key=lambda c: (c is None, c or ""))
    return {c: _TRACE_COLOURS[n % len(_TRACE_COLOURS)] for n, c in enumerate(names)}


def plot_projection(
    path: Path,
    method: str,
    train_2d: np.ndarray,
    train_source: np.ndarray,
    labels: Sequence[str],
    traces: Sequence[np.ndarray],
    conditions: Sequence[str | None],
) -> Path:
    """``path``: training frames (N, 2) as one cloud per source (``train_source`` (N,) indexes
    ``labels``), each rollout's steps (T, 2) as a trace from a circle (start) to a cross (end),
    coloured by its condition."""
    fig = _figure(7.5, 6.0)
    ax = fig.add_subplot()
    for n, label in enumerate(labels):
        pts = train_2d[train_source == n]
        ax.scatter(
            pts[:, 0], pts[:, 1], s=6, alpha=0.35, color=_SOURCE_COLOURS[n % len(_SOURCE_COLOURS)],
            label=f"{label} ({len(pts)} frames)", linewidths=0,
        )  # fmt: skip
    colours = _colours(conditions)
    named: set[str | None] = set()
    for pts, condition in zip(traces, conditions, strict=True):
        colour = colours[condition]
        tag = None
        if condition not in named:
            named.add(condition)
            tag = f"rollouts: {condition}" if condition else "rollouts"
        ax.plot(pts[:, 0], pts[:, 1], color=colour, lw=1.0, alpha=0.8, label=tag)
        ax.scatter(pts[:1, 0], pts[:1, 1], marker="o", s=28, color=colour, zorder=3)
        ax.scatter(pts[-1:, 0], pts[-1:, 1], marker="X", s=40, color=colour, zorder=3)
    ax.set_title(f"{method} of the policy's observation embeddings (o start, x end)")
    ax.set_xlabel(f"{method} 1")
    ax.set_ylabel(f"{method} 2")
    ax.legend(fontsize=7, loc="best", markerscale=2)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return path


def plot_shares(path: Path, rows: Sequence[RolloutShare], pool_real: float) -> Path:
    """``path``: each rollout's real share of nearest training neighbours over its steps,
    with the training pool's real fraction (the share of neighbours drawn at random)."""
    fig = _figure(7.5, 4.0)
    ax = fig.add_subplot()
    colours = _colours([r.condition for r in rows])
    named: set[str | None] = set()
    for r in rows:
        tag = None
        if r.condition not in named:
            named.add(r.condition)
            tag = r.condition or "rollouts"
        ax.plot(r.times, r.real_share, color=colours[r.condition], lw=1.0, alpha=0.7, label=tag)
    ax.axhline(pool_real, color="gray", ls="--", lw=1.0, label="real fraction of the pool")
    ax.set_ylim(-0.03, 1.03)
    ax.set_xlabel("rollout time (s)")
    ax.set_ylabel("real share of nearest neighbours")
    ax.set_title(f"{len(rows)} rollouts: where their states sit among real and simulated frames")
    ax.legend(fontsize=7, loc="best")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return path
