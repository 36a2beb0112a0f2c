"""``r2s2r bench all``: the suite's benches (``bench_suite.BENCHES``) run one after another,
each as its own ``r2s2r ... --json`` process, each record written to ``OUT/<name>.json`` as
soon as its bench ends (atomically), then the page (``bench_page``).

A bench that fails (a nonzero exit, no JSON, a timeout) writes its error into its record and
the run goes on; the result says which failed. Nothing here measures: the figures are the
benches' own, with their own same-run baselines.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from r2s2r.app.bench_suite import BENCHES, DATA_FIXTURE, Bench
from r2s2r.app.jobs import Cancel, ProgressFn, RequestError, report
from r2s2r.spec.registry import Registry

# How much of a failed command's output a record keeps.
ERROR_TAIL_CHARS = 2000


@dataclass(frozen=True)
class BenchRunRequest:
    """Which benches to run, where to write their records and the page."""

    out: Path
    # The suite's smallest sizes (benches without a quick variant are left out).
    quick: bool = False
    # Only these benches (default: the whole suite, in its order).
    only: tuple[str, ...] = ()
    # Said of every record, e.g. "beside a training job".
    note: str = ""
    # Seconds one bench may run before it is stopped and recorded as failed.
    timeout_s: float = 900.0
    # Where to write the page from every record in ``out`` (None: no page).
    page: Path | None = None

    def benches(self, suite: Registry[Bench] | None = None) -> list[Bench]:
        """The benches this request runs from ``suite`` (default ``BENCHES``), in its order;
        an unknown name raises with the nearest known ones."""
        suite = BENCHES if suite is None else suite
        for name in self.only:
            if name not in suite:
                raise RequestError(suite.unknown(name))
        chosen = [suite.get(n) for n in suite.names() if not self.only or n in self.only]
        return [b for b in chosen if not self.quick or b.quick is not None]


def fill(args: list[str], **places: str) -> list[str]:
    """``args`` with ``{data}`` and ``{work}`` replaced."""
    return [a.format(**places) for a in args]


def tail(text: str, limit: int = ERROR_TAIL_CHARS) -> str:
    """The end of a command's output, progress bars' redrawn lines (``\\r``) dropped."""
    lines = [line.rsplit("\r", 1)[-1] for line in text.splitlines()]
    return "\n".join(line for line in lines if line.strip())[-limit:]


def parse_figures(stdout: str) -> dict[str, Any] | None:
    """The JSON object a ``--json`` command printed (from its first ``{``), or None."""
    start = stdout.find("{")
    if start < 0:
        return None
    try:
        figures, _ = json.JSONDecoder().raw_decode(stdout[start:])
    except json.JSONDecodeError:
        return None
    return figures if isinstance(figures, dict) else None


def run_command(args: list[str], cwd: Path, timeout_s: float) -> tuple[int, str, str]:
    """Run ``r2s2r ARGS`` with this interpreter; (exit code, stdout, stderr), exit code 124
    after a timeout."""
    try:
        done = subprocess.run(
            [sys.executable, "-m", "r2s2r", *args],
            capture_output=True,
            text=True,
            cwd=cwd,
            timeout=timeout_s,
        )
    except subprocess.TimeoutExpired as err:
        out = err.stdout.decode() if isinstance(err.stdout, bytes) else (err.stdout or "")
        return 124, out, f"timed out after {timeout_s:.0f} s"
    return done.returncode, done.stdout, done.stderr


def provenance() -> dict[str, Any]:
    """Where and when a bench runs: the machine, its load, the commit and the date."""
    from r2s2r.sim.bench import machine, source_commit, source_dirty

    return {
        "machine": machine(),
        "load_average": os.getloadavg()[0],
        "commit": source_commit(),
        "source_dirty": source_dirty(),
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
    }


def run_bench(
    bench: Bench,
    request: BenchRunRequest,
    work: Path,
    data: Path | None,
    data_error: str | None,
) -> dict[str, Any]:
    """One bench's record (see the module)."""
    args = bench.args(request.quick)
    shown = "r2s2r " + shlex.join(fill(args, data="DATA", work="WORK"))
    record: dict[str, Any] = {
        "name": bench.name,
        "command": shown,
        "setup": "r2s2r " + DATA_FIXTURE.format(data="DATA") if bench.needs_data else None,
        "quick": request.quick,
        "note": request.note,
        **provenance(),
    }
    if bench.needs_data and data is None:
        error = f"the dataset it reads was not recorded: {data_error}"
        return {
            **record,
            "ok": False,
            "returncode": None,
            "seconds": 0.0,
            "error": error,
            "figures": None,
        }
    start = datetime.now(UTC)
    code, stdout, stderr = run_command(
        fill(args, data=str(data), work=str(work)), work, request.timeout_s
    )
    figures = parse_figures(stdout)
    failure: str | None = None
    if code != 0:
        failure = tail(stderr) or tail(stdout) or f"exit {code}"
    elif figures is None:
        failure = "no JSON object on stdout: " + (tail(stdout, 500) or "(empty)")
    return {
        **record,
        "ok": failure is None,
        "returncode": code,
        "seconds": (datetime.now(UTC) - start).total_seconds(),
        "error": failure,
        "figures": figures,
    }


def run_benches(
    request: BenchRunRequest,
    progress: ProgressFn | None = None,
    cancel: Cancel | None = None,
    suite: Registry[Bench] | None = None,
) -> dict[str, dict[str, Any]]:
    """Run the request's benches from ``suite`` (default ``BENCHES``; see the module);
    returns their records by name."""
    from r2s2r.data.layout import write_json

    benches = request.benches(suite)
    out = Path(request.out)
    out.mkdir(parents=True, exist_ok=True)
    records: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="r2s2r-bench-") as tmp:
        work = Path(tmp)
        data: Path | None = None
        data_error: str | None = None
        for i, bench in enumerate(benches):
            if cancel is not None:
                cancel.check("bench run")
            if bench.needs_data and data is None and data_error is None:
                report(progress, "bench", i, len(benches), "recording the dataset")
                data, data_error = record_fixture(work, request.timeout_s)
            report(progress, "bench", i, len(benches), bench.name)
            record = run_bench(bench, request, work, data, data_error)
            write_json(out / f"{bench.name}.json", record)
            records[bench.name] = record
        report(progress, "bench", len(benches), len(benches), "done")
    if request.page is not None:
        from r2s2r.app.bench_page import write_page

        write_page(out, request.page, suite)
    return records


def record_fixture(work: Path, timeout_s: float) -> tuple[Path | None, str | None]:
    """Record the dataset the training benches read into ``work``; (its folder, None) or
    (None, why it failed)."""
    data = work / "data"
    args = fill(shlex.split(DATA_FIXTURE), data=str(data))
    code, stdout, stderr = run_command(args, work, timeout_s)
    if code != 0:
        return None, tail(stderr) or tail(stdout) or f"exit {code}"
    return data, None
