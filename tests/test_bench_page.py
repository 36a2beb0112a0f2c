"""``r2s2r bench all`` and ``r2s2r bench page``: the suite's commands are the CLI's, the page
shows each headline with its same-run baseline ("—" where a record lacks it), a failed bench
is recorded and the run goes on, and the committed page is what the committed records make."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from r2s2r.app import bench_run
from r2s2r.app.bench_page import read_records, render_page, show, value_at
from r2s2r.app.bench_run import BenchRunRequest, run_benches
from r2s2r.app.bench_suite import BENCHES, LEFT_OUT, Bench, Headline
from r2s2r.cli import app
from r2s2r.spec.registry import Registry

ROOT = Path(__file__).resolve().parents[1]
runner = CliRunner()

SUITE: Registry[Bench] = Registry("bench")
SUITE.register(
    "speed",
    Bench(
        name="speed",
        command="x --json",
        quick=None,
        what="how fast",
        headlines=(
            Headline("steps", "rate", "steps/s", baseline="raw", baseline_label="raw steps"),
            Headline(
                "renders",
                "renders.8",
                "sets/s",
                baseline="cpu.8",
                baseline_label="the CPU",
                ratio="over.8",
            ),
            Headline("missing", "not.there", "ms", baseline="nor.this", baseline_label="none"),
        ),
    ),
)
SUITE.register(
    "broken",
    Bench(
        name="broken",
        command="y --json",
        quick=None,
        what="fails",
        headlines=(Headline("figure", "figure", "ms"),),
    ),
)


def record(figures: dict | None, ok: bool = True, error: str | None = None) -> dict:
    return {
        "command": "r2s2r x --json",
        "machine": "AMD EPYC, 2 cores, Linux",
        "load_average": 3.25,
        "commit": "abc1234",
        "source_dirty": False,
        "date": "2026-12-07T13:00:00+00:00",
        "seconds": 12.0,
        "note": "beside a training job",
        "ok": ok,
        "returncode": 0 if ok else 1,
        "error": error,
        "figures": figures,
    }


def rows(page: str, section: str) -> list[str]:
    """The table rows of one section of the page."""
    body = page.split(f"## {section}", 1)[1].split("\n## ", 1)[0]
    return [line for line in body.splitlines() if line.startswith("| ") and "---" not in line]


def test_the_page_shows_each_headline_with_its_baseline_and_ratio() -> None:
    figures = {"rate": 900.0, "raw": 1000.0, "renders": {"8": 40.0}, "cpu": {"8": 20.0}}
    figures["over"] = {"8": 2.5}  # the bench's own ratio wins over the division (2.0)
    page = render_page({"speed": record(figures)}, SUITE)
    assert rows(page, "speed")[1:] == [
        "| steps | 900 steps/s | raw steps | 1,000 steps/s | 0.90x |",
        "| renders | 40.0 sets/s | the CPU | 20.0 sets/s | 2.50x |",
        "| missing | — | none | — | — |",
    ]
    assert (
        "machine: AMD EPYC, 2 cores, Linux; load average 3.2 at its start; commit `abc1234`; "
        "2026-12-07T13:00:00+00:00; took 12 s; beside a training job." in page
    )
    assert "## broken\n\nFails.\n\nNot run: no record." in page
    for command, _ in LEFT_OUT.values():
        assert f"`{command}`" in page


def test_a_failed_bench_shows_its_error_and_what_figures_it_printed() -> None:
    failed = record({"figure": 3.0}, ok=False, error="Traceback ...\nValueError: no `cell`")
    page = render_page({"broken": failed, "speed": record(None, ok=False, error="boom")}, SUITE)
    broken = page.split("## broken", 1)[1]
    assert "**Failed** (exit 1):\n\n```text\nTraceback ...\nValueError: no 'cell'\n```" in broken
    assert rows(page, "broken")[1:] == ["| figure | 3.00 ms | — | — | — |"]
    speed = page.split("## speed", 1)[1].split("\n## ", 1)[0]
    assert "boom" in speed and "No figures." in speed and not rows(page, "speed")


def test_a_record_outside_the_suite_is_listed_without_headlines() -> None:
    page = render_page({"extra": record({"a": 1})}, SUITE)
    assert "## extra\n" in page and "No headline figures declared" in page


@pytest.mark.parametrize(
    ("value", "unit", "shown"),
    [
        (12241.8, "steps/s", "12,242 steps/s"),
        (0.9210, "", "0.921"),
        (0.0012, "ms", "0.0012 ms"),
        (3, "", "3"),
        (float("nan"), "ms", "—"),
        ([], "", "none"),
        (["belt", "bins"], "", "belt, bins"),
        ("cpu (2 threads)", "", "cpu (2 threads)"),
        ("a|b", "", "a\\|b"),
    ],
)
def test_figures_are_shown_with_three_digits_or_as_text(value, unit, shown) -> None:
    assert show(value, unit) == shown


def test_paths_reach_keys_and_list_indexes_and_miss_softly() -> None:
    data = {"recipes": [{"rate": 1.0}, {"rate": 2.0}], "warp": {"8": 3.0}}
    assert value_at(data, "recipes.1.rate") == 2.0
    assert value_at(data, "warp.8") == 3.0
    assert value_at(data, "recipes.2.rate") is None
    assert value_at(data, "warp.8.x") is None
    assert value_at(data, None) is None


def _command_of(args: list[str]) -> tuple[Any, list[str], list[str]]:
    """The command ``args`` name (typer's click), the words naming it, and the rest."""
    command = typer.main.get_command(app)
    words: list[str] = []
    while isinstance(command, typer.core.TyperGroup):
        name = args[len(words)]
        assert name in command.commands, f"no command {name!r} in r2s2r {' '.join(words)}"
        command = command.commands[name]
        words.append(name)
    return command, words, args[len(words) :]


def test_the_command_check_catches_a_wrong_option() -> None:
    command, words, rest = _command_of(["sim", "bench", "--json", "--bogus", "1"])
    assert words == ["sim", "bench"]
    with pytest.raises(Exception, match="No such option: --bogus"):
        command.make_context("sim bench", rest)


@pytest.mark.parametrize("name", BENCHES.names())
@pytest.mark.parametrize("quick", [False, True])
def test_every_bench_in_the_suite_is_a_command_taking_its_options(
    name: str, quick: bool, tmp_path: Path
) -> None:
    bench = BENCHES.get(name)
    if quick and bench.quick is None:
        pytest.skip("no quick variant")
    args = bench_run.fill(bench.args(quick), data=str(tmp_path), work=str(tmp_path))
    assert "--json" in args
    command, words, rest = _command_of(args)
    assert runner.invoke(app, [*words, "--help"]).exit_code == 0
    # Parsing the options checks each name and value without running the bench.
    command.make_context(" ".join(words), rest)


@pytest.mark.parametrize("name", sorted(LEFT_OUT))
def test_the_benches_left_out_are_commands_too(name: str) -> None:
    args = shlex.split(LEFT_OUT[name][0])
    if args[0] == "make":
        target = args[1]
        assert f"\n{target}:" in (ROOT / "Makefile").read_text()
        return
    _, words, _ = _command_of(args[1:])
    assert runner.invoke(app, [*words, "--help"]).exit_code == 0


def _odd_and_even() -> Registry[Bench]:
    """Two ``dataset bench`` runs: an odd image size (exit 2 with its message), then an even
    one."""
    suite: Registry[Bench] = Registry("bench")
    command = "dataset bench --json --frames 4 --size {} --repeats 1"
    for name, size in (("odd", 63), ("even", 64)):
        headline = Headline("writer", "writer_frames_per_s", "frames/s")
        suite.register(name, Bench(name, command.format(size), None, name, (headline,)))
    return suite


def test_a_failed_bench_is_recorded_and_the_run_goes_on(tmp_path: Path) -> None:
    """Each record is on disk, the failed one with its error, and the page is made from
    both."""
    suite = _odd_and_even()
    request = BenchRunRequest(out=tmp_path / "rec", note="test", page=tmp_path / "page.md")
    records = run_benches(request, suite=suite)
    assert [records["odd"]["ok"], records["even"]["ok"]] == [False, True]
    assert records["odd"]["returncode"] == 2 and "size even" in records["odd"]["error"]
    assert read_records(tmp_path / "rec") == records
    page = (tmp_path / "page.md").read_text()
    assert "**Failed** (exit 2)" in page.split("## odd", 1)[1].split("## even", 1)[0]
    assert rows(page, "even")[1][:11] == "| writer | "


def test_a_failed_bench_fails_bench_all_after_the_rest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(bench_run, "BENCHES", _odd_and_even())
    result = runner.invoke(app, ["bench", "all", "--out", str(tmp_path)])
    assert result.exit_code == 1
    assert "FAILED: error: dataset bench" in result.output and "failed: odd" in result.output
    assert json.loads((tmp_path / "even.json").read_text())["ok"]


def test_bench_all_runs_a_bench_into_a_folder_and_writes_the_page(tmp_path: Path) -> None:
    out, page = tmp_path / "benchmarks", tmp_path / "results.md"
    args = ["bench", "all", "--out", str(out), "--quick", "--only", "dataset"]
    result = runner.invoke(app, [*args, "--page", str(page), "--note", "in a test"])
    assert result.exit_code == 0, result.output
    saved = json.loads((out / "dataset.json").read_text())
    assert saved["ok"] and saved["command"].startswith("r2s2r dataset bench --json --frames")
    assert saved["figures"]["writer_frames_per_s"] > 0 and saved["note"] == "in a test"
    assert {"machine", "commit", "date", "load_average"} <= set(saved)
    writer = rows(page.read_text(), "dataset")[1]
    assert writer.startswith("| writer | ") and " plain PyAV, same frames " in writer
    assert writer.endswith("x |") and "—" not in writer


def test_bench_all_names_an_unknown_bench() -> None:
    result = runner.invoke(app, ["bench", "all", "--only", "datset"])
    assert result.exit_code == 2 and "did you mean 'dataset'" in result.output


def test_the_committed_page_is_what_the_committed_records_make() -> None:
    """Regenerate with ``r2s2r bench page`` after changing the records or the headlines."""
    committed = (ROOT / "docs/reference/benchmark-results.md").read_text()
    assert render_page(read_records(ROOT / "benchmarks")) == committed
