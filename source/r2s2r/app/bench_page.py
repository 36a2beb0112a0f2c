"""The benchmark page: ``benchmarks/*.json`` (the records ``r2s2r bench all`` writes) as one
Markdown page, a table of headline figures per bench with each one's same-run baseline and
ratio, and the machine, load, commit and date the bench ran on.

The page is a function of the records alone (no clock, no machine of its own), so the same
records always give the same page; a path a record lacks shows as "—".
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from r2s2r.app.bench_suite import BENCHES, LEFT_OUT, Bench, Headline
from r2s2r.spec.registry import Registry

MISSING = "—"
# The last lines of a failed bench's error the page shows (its record keeps more).
ERROR_LINES = 12


def value_at(record: Any, path: str | None) -> Any:
    """The value at ``path`` (``a.b.0.c``) in ``record``, or None where any step is
    missing."""
    if path is None:
        return None
    node = record
    for key in path.split("."):
        if isinstance(node, Mapping) and key in node:
            node = node[key]
        elif isinstance(node, list) and key.isdigit() and int(key) < len(node):
            node = node[int(key)]
        else:
            return None
    return node


def _number(value: Any) -> float | None:
    """``value`` as a finite float, None for anything else (bools included)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def show(value: Any, unit: str = "") -> str:
    """A figure as the page prints it: three significant digits, thousands separated."""
    if value is None:
        return MISSING
    if isinstance(value, bool):
        text = "yes" if value else "no"
    elif isinstance(value, int):
        text = f"{value:,}"
    elif isinstance(value, float):
        if not math.isfinite(value):
            return MISSING
        magnitude = abs(value)
        if magnitude >= 100:
            text = f"{value:,.0f}"
        elif magnitude >= 10:
            text = f"{value:.1f}"
        elif magnitude >= 0.01 or magnitude == 0:
            text = f"{value:.2f}" if magnitude >= 1 else f"{value:.3f}"
        else:
            text = f"{value:.2g}"
    elif isinstance(value, list):
        text = ", ".join(str(v) for v in value) or "none"
    else:
        text = str(value)
    text = text.replace("|", "\\|")
    return f"{text} {unit}" if unit else text


def ratio(figures: Any, headline: Headline) -> float | None:
    """The figure over its baseline: the bench's own ratio where the headline names one,
    else the two divided (None where either is missing or the baseline is zero)."""
    own = _number(value_at(figures, headline.ratio))
    if own is not None:
        return own
    figure = _number(value_at(figures, headline.path))
    base = _number(value_at(figures, headline.baseline))
    if figure is None or base is None or base == 0:
        return None
    return figure / base


def headline_row(figures: Any, headline: Headline) -> str:
    """One table row: the figure, its baseline and their ratio."""
    r = ratio(figures, headline)
    cells = [
        headline.label,
        show(value_at(figures, headline.path), headline.unit),
        headline.baseline_label or MISSING,
        show(value_at(figures, headline.baseline), headline.unit) if headline.baseline else MISSING,
        MISSING if r is None else f"{r:.2f}x",
    ]
    return "| " + " | ".join(cells) + " |"


def _provenance(record: Mapping[str, Any]) -> str:
    """Where and when a record was measured, one line."""
    load = _number(record.get("load_average"))
    commit = record.get("commit") or "unknown"
    if record.get("source_dirty"):
        commit = f"{commit} plus uncommitted changes"
    parts = [
        f"machine: {record.get('machine') or 'unknown'}",
        f"load average {load:.1f} at its start" if load is not None else None,
        f"commit `{commit}`",
        f"{record.get('date') or 'date unknown'}",
        f"took {record['seconds']:.0f} s" if _number(record.get("seconds")) is not None else None,
    ]
    line = "; ".join(p for p in parts if p)
    return f"{line}; {record['note']}" if record.get("note") else line


def bench_section(name: str, record: Mapping[str, Any] | None, bench: Bench | None) -> str:
    """A bench's heading, command, provenance, outcome and table."""
    lines = [f"## {name}", ""]
    if bench is not None:
        lines += [bench.what[:1].upper() + bench.what[1:] + ".", ""]
    if record is None:
        lines += ["Not run: no record.", ""]
        return "\n".join(lines)
    lines += [f"`{record.get('command', '?')}`", ""]
    if record.get("setup"):
        lines += [f"DATA: `{record['setup']}`", ""]
    lines += [_provenance(record) + ".", ""]
    if not record.get("ok", False):
        error = str(record.get("error") or "no error message").replace("`", "'")
        shown = error.strip().splitlines()[-ERROR_LINES:]
        code = record.get("returncode")
        lines += [f"**Failed** (exit {code}):", "", "```text", *shown, "```", ""]
    figures = record.get("figures")
    if bench is None:
        lines += ["No headline figures declared for this bench.", ""]
    elif figures is None:
        lines += ["No figures.", ""]
    else:
        lines += [
            "| figure | value | baseline (same run) | baseline value | figure / baseline |",
            "| --- | --- | --- | --- | --- |",
            *(headline_row(figures, h) for h in bench.headlines),
            "",
        ]
    return "\n".join(lines)


HEADER = """# Benchmark results

Generated by `r2s2r bench page` from the records in `benchmarks/` (one JSON file per bench),
which `make bench` (`r2s2r bench all --out benchmarks`) writes: do not edit this page by hand.
The records are committed with the page because they are what it is made from; each holds
the command line, every figure the bench printed, the machine, its load average, the
commit and the date. What each command measures and against what: [benchmarks](benchmarks.md).

Each baseline was measured in the same run on the same machine, so the ratio holds better
than the absolute figures when the machine is loaded; a load average above the machine's
cores means other work ran beside the bench, and a ratio between two configurations that use
threads differently (the training recipes of `train-speed`) can then move far from its value
on an idle machine. When you quote a figure, name its machine, load, commit and baseline
from here.
"""


def render_page(
    records: Mapping[str, Mapping[str, Any]], suite: Registry[Bench] | None = None
) -> str:
    """The page for ``records`` (bench name -> record): the benches of ``suite`` (default
    ``BENCHES``) in its order, then any other record, then the benches ``make bench`` leaves
    out."""
    known = BENCHES if suite is None else suite
    benches = {n: known.get(n) for n in known.names()}
    names = [*benches, *sorted(n for n in records if n not in benches)]
    sections = [bench_section(n, records.get(n), benches.get(n)) for n in names]
    left_out = [
        "## Not in `make bench`",
        "",
        *(f"- `{command}`: {why}." for command, why in LEFT_OUT.values()),
        "",
    ]
    return "\n".join([HEADER, *sections, *left_out]).rstrip() + "\n"


def read_records(folder: Path) -> dict[str, dict[str, Any]]:
    """Every ``*.json`` record in ``folder``, by file stem."""
    return {p.stem: json.loads(p.read_text()) for p in sorted(Path(folder).glob("*.json"))}


def write_page(folder: Path, page: Path, suite: Registry[Bench] | None = None) -> str:
    """Render the records in ``folder`` into ``page`` (atomically); returns the text."""
    from r2s2r.data.layout import write_atomic

    text = render_page(read_records(folder), suite)
    write_atomic(Path(page), lambda tmp: tmp.write_text(text))
    return text
