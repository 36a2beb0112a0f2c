"""The report's figures as PNG bytes: success rate per policy and condition with Wilson
intervals (the reference's Figure 2), and a forest plot of the grounding effects.

Figures are drawn on matplotlib's Agg canvas directly (no pyplot, no global backend state),
so the report can be written from any thread.
"""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np


def _png(fig: Any) -> bytes:
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(fig)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    return buf.getvalue()


def success_bars(
    labels: Sequence[str],
    groups: Sequence[str],
    titles: Mapping[str, str],
    tables: Sequence[Mapping[str, Mapping[str, Any]]],
) -> bytes:
    """Grouped bars: one group of bars per condition column, one bar per policy, the bar at
    the success rate and the error bar spanning its Wilson interval (cells without trials
    are left empty)."""
    from matplotlib.figure import Figure

    n_pol, n_grp = len(labels), len(groups)
    width = 0.8 / max(n_pol, 1)
    fig = Figure(figsize=(min(14.0, max(8.0, 1.2 * n_grp + 0.25 * n_pol * n_grp)), 4.2))
    ax = fig.add_subplot()
    x = np.arange(n_grp)
    for i, (label, table) in enumerate(zip(labels, tables, strict=True)):
        rate = np.array([np.nan if table[g]["rate"] is None else table[g]["rate"] for g in groups])
        low = np.array(
            [np.nan if table[g]["rate"] is None else table[g]["wilson_low"] for g in groups]
        )
        high = np.array(
            [np.nan if table[g]["rate"] is None else table[g]["wilson_high"] for g in groups]
        )
        err = np.vstack([rate - low, high - rate])
        pos = x - 0.4 + width * (i + 0.5)
        ax.bar(pos, 100.0 * np.nan_to_num(rate), width * 0.92, label=label, color=f"C{i % 10}")
        ax.errorbar(pos, 100.0 * rate, yerr=100.0 * err, fmt="none", ecolor="k", capsize=2, lw=1)
    ax.set_xticks(x, [titles.get(g, g) for g in groups])
    ax.set_ylabel("success (%)")
    ax.set_ylim(0, 105)
    ax.set_title("Success per policy and condition (error bars: Wilson 95% intervals)", fontsize=10)
    ax.legend(fontsize=8, ncol=min(n_pol, 3), loc="upper center", bbox_to_anchor=(0.5, -0.1))
    ax.grid(axis="y", alpha=0.3)
    return _png(fig)


def effect_forest(effects: Sequence[Mapping[str, Any]]) -> bytes:
    """One row per effect: the estimate as a dot, its bootstrap interval as a line, and the
    zero line (no effect) for reference."""
    from matplotlib.figure import Figure

    rows = list(effects)
    fig = Figure(figsize=(7.5, 0.9 + 0.32 * len(rows)))
    ax = fig.add_subplot()
    y = np.arange(len(rows))[::-1]
    est = 100.0 * np.array([e["estimate"] for e in rows])
    low = 100.0 * np.array([e["low"] for e in rows])
    high = 100.0 * np.array([e["high"] for e in rows])
    kinds = sorted({e["kind"] for e in rows})
    colors = [f"C{kinds.index(e['kind']) % 10}" for e in rows]
    ax.hlines(y, low, high, colors=colors, lw=2)
    ax.scatter(est, y, c=colors, zorder=3, s=18)
    ax.axvline(0.0, color="k", lw=0.8)
    names = [f"{e['short']} [{e['group']}]" for e in rows]
    ax.set_yticks(y, names, fontsize=8)
    ax.set_xlabel("effect on success (percentage points), bootstrap interval")
    ax.grid(axis="x", alpha=0.3)
    return _png(fig)
