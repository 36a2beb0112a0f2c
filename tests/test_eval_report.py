"""Trial logs and the evaluation report: reading and checking evaluation directories, the
HTML page and report.json written from real trial logs, and the report and compare CLI."""

from __future__ import annotations

import base64
import json
import logging
import re
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import binomtest
from typer.testing import CliRunner

from r2s2r.cli import app
from r2s2r.eval.report import write_report
from r2s2r.eval.trials import (
    CONDITIONS,
    EvalInfo,
    PolicyInfo,
    TrialLogError,
    TrialRecord,
    append_trial,
    check_comparable,
    read_trials,
    write_eval_info,
)

SPLIT = {"nominal": 24, "red_light": 8, "fast_belt": 8, "novel_objects": 9, "all_shifts": 1}
CONDITION_OF = [c for c in CONDITIONS for _ in range(SPLIT[c])]
runner = CliRunner()


def record(i: int, ok: bool, condition: str | None = None, video: str | None = None) -> TrialRecord:
    return TrialRecord(
        trial=i,
        seed=1000 + i,
        condition=condition or CONDITION_OF[i],
        object="cube" if i % 2 else "bottle",
        belt_speed=0.12,
        outcome="sorted" if ok else "dropped",
        success=ok,
        duration_s=8.0,
        steps=400,
        ended_by="outcome",
        safety_events=0,
        infer_ms_p50=41.0,
        video=video,
    )


def write_eval(
    directory: Path,
    name: str,
    p: float,
    seed: int,
    world: str | None = None,
    behavior: str | None = None,
    real_only: bool = False,
    protocol_seed: int = 0,
) -> Path:
    """A real evaluation directory of the 50-trial protocol whose policy succeeds with
    probability ``p`` per trial (drawn with ``seed``)."""
    policy = PolicyInfo(name, "learned", f"runs/{name}", real_only, world, behavior)
    info = EvalInfo("paper", protocol_seed, "twin", 50, policy, {"execution": "rtc"}, "0.1.0")
    write_eval_info(directory, info)
    rng = np.random.default_rng(seed)
    for i in range(50):
        append_trial(directory / "trials.jsonl", record(i, bool(rng.random() < p)))
    return directory


def design(root: Path) -> list[Path]:
    return [
        write_eval(root / "ga", "ga", 0.85, 1, "grounded", "adapted"),
        write_eval(root / "gp", "gp", 0.7, 2, "grounded", "planned"),
        write_eval(root / "na", "na", 0.6, 3, "nominal", "adapted"),
        write_eval(root / "np", "np", 0.55, 4, "nominal", "planned"),
        write_eval(root / "real", "real", 0.5, 5, real_only=True),
    ]


def counts_from_log(path: Path) -> dict[str, tuple[int, int, list[int]]]:
    """(successes, trials, trial indices) per group, read with json alone."""
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    groups = {c: (c,) for c in CONDITIONS}
    groups["shifted"] = tuple(c for c in CONDITIONS if c != "nominal")
    groups["overall"] = CONDITIONS
    out = {}
    for g, members in groups.items():
        chosen = sorted((r for r in rows if r["condition"] in members), key=lambda r: r["trial"])
        out[g] = (sum(r["success"] for r in chosen), len(chosen), [r["trial"] for r in chosen])
    return out


def test_report_numbers_are_the_logs_counts(tmp_path: Path) -> None:
    dirs = design(tmp_path / "evals")
    report = write_report(dirs, tmp_path / "out", resamples=2000)
    data = json.loads(report.json.read_text())
    assert data == json.loads(json.dumps(report.data))
    assert len(data["policies"]) == 5
    for entry, d in zip(data["policies"], dirs, strict=True):
        expected = counts_from_log(d / "trials.jsonl")
        assert set(entry["table"]) == set(expected)
        for group, (k, n, indices) in expected.items():
            cell = entry["table"][group]
            assert (cell["successes"], cell["trials"]) == (k, n)
            assert cell["trial_indices"] == indices
            assert cell["trials_path"] == str(d / "trials.jsonl")
            ci = binomtest(k, n).proportion_ci(method="wilson")
            assert cell["wilson_low"] == pytest.approx(ci.low)
            assert cell["wilson_high"] == pytest.approx(ci.high)
    # The effects: 3 of the 2x2 + 4 gains, in overall, nominal and shifted.
    kinds = [(e["kind"], e["group"]) for e in data["effects"]]
    assert len(kinds) == 21 and data["effect_notes"] == []
    overall = {
        c: counts_from_log(d / "trials.jsonl")["overall"]
        for c, d in zip(("ga", "gp", "na", "np", "real"), dirs, strict=True)
    }
    rate = {c: k / n for c, (k, n, _) in overall.items()}
    world = next(e for e in data["effects"] if e["kind"] == "world" and e["group"] == "overall")
    assert world["estimate"] == pytest.approx(
        (rate["ga"] + rate["gp"] - rate["na"] - rate["np"]) / 2
    )
    assert world["trials"]["ga"]["trial_indices"] == list(range(50))
    assert world["trials"]["ga"]["trials_path"] == str(dirs[0] / "trials.jsonl")
    # Every pair compared in overall and shifted.
    assert len(data["comparisons"]) == 2 * 10
    assert all(c["verdict"] for c in data["comparisons"])
    # The page: self-contained, with the table's figures and the embedded plots.
    page = report.html.read_text()
    assert "<link" not in page and "src='http" not in page and 'src="http' not in page
    pngs = re.findall(r"data:image/png;base64,([A-Za-z0-9+/=]+)", page)
    assert len(pngs) == 2 and all(base64.b64decode(p)[:8] == b"\x89PNG\r\n\x1a\n" for p in pngs)
    k, n, _ = overall["ga"]
    assert f"{k}/{n} ({100 * k / n:.0f}%)" in page
    assert "Grounding effects" in page and "Pairwise comparisons" in page
    assert report.text_table().splitlines()[1].startswith("ga")


def _write_mp4(path: Path, frames: int) -> None:
    import av

    path.parent.mkdir(parents=True, exist_ok=True)
    with av.open(str(path), "w") as container:
        stream = container.add_stream("mpeg4", rate=10)
        stream.width = stream.height = 32
        stream.pix_fmt = "yuv420p"
        for i in range(frames):
            image = np.full((32, 32, 3), (7 * i) % 255, np.uint8)
            for packet in stream.encode(av.VideoFrame.from_ndarray(image, format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)


def test_report_embeds_latent_outputs_and_bounded_clips(tmp_path: Path) -> None:
    from matplotlib.figure import Figure

    d = tmp_path / "a"
    info = EvalInfo("paper", 0, "twin", 50, PolicyInfo("a", "learned", "r", True), {}, "0.1.0")
    write_eval_info(d, info)
    for i in range(4):
        video = f"rollouts/videos/observation.images.head/chunk-000/file-{i:03d}.mp4"
        _write_mp4(d / video, frames=5)
        append_trial(d / "trials.jsonl", record(i, i % 2 == 0, video=video))
    (d / "latent").mkdir()
    summary = {"real_share": {"mean": 0.625, "per_rollout": [0.5, 0.75]}, "frames": 1234}
    (d / "latent" / "latent.json").write_text(json.dumps(summary))
    fig = Figure(figsize=(2, 2))
    fig.add_subplot().plot([0, 1], [1, 0])
    fig.savefig(d / "latent" / "pca.png")
    png = (d / "latent" / "pca.png").read_bytes()
    report = write_report([d], tmp_path / "out", resamples=200, max_clips=2)
    page = report.html.read_text()
    assert base64.b64encode(png).decode() in page
    assert "real_share.mean" in page and "0.625" in page
    latent = report.data["latent"][0]
    assert latent["summary"]["real_share.mean"] == 0.625
    assert latent["summary"]["frames"] == 1234
    assert latent["plots"] == [str(d / "latent" / "pca.png")]
    clips = report.data["clips"]
    # At most two clips: a success and a failure first; the other two listed as left out.
    assert [(c["trial"], c["outcome"]) for c in clips["embedded"]] == [
        (0, "sorted"),
        (1, "dropped"),
    ]
    assert (
        len(clips["not_embedded"]) == 2 and "at most 2 clips" in clips["not_embedded"][0]["reason"]
    )
    videos = re.findall(r"data:video/mp4;base64,([A-Za-z0-9+/=]+)", page)
    assert [base64.b64decode(v) for v in videos] == [
        (d / c["path"]).read_bytes() for c in clips["embedded"]
    ]
    assert clips["embedded_bytes"] == sum(c["bytes"] for c in clips["embedded"])
    assert "2 clip(s) embedded" in page
    # A byte budget smaller than one clip embeds none.
    small = write_report([d], tmp_path / "out2", resamples=200, max_clips_mb=1e-4)
    assert small.data["clips"]["embedded"] == []
    assert "data:video/mp4" not in small.html.read_text()


def test_reading_rejects_bad_logs_with_line_numbers(tmp_path: Path) -> None:
    d = write_eval(tmp_path / "a", "a", 0.5, 0)
    log = read_trials(d)
    assert len(log.records) == 50 and log.line_numbers[:2] == (1, 2)
    assert log.records[3] == TrialRecord.from_json(log.records[3].to_json())
    path = d / "trials.jsonl"
    good = path.read_text().splitlines()
    cases = {
        "not valid JSON": "{trial: 3",
        "field 'condition' is 'dusk', expected one of nominal": json.dumps(
            {**record(2, True).to_json(), "condition": "dusk"}
        ),
        "field 'outcome' is 'spilled'": json.dumps(
            {**record(2, True).to_json(), "outcome": "spilled"}
        ),
        "field 'success' is true but outcome is 'dropped'": json.dumps(
            {**record(2, False).to_json(), "success": True}
        ),
        "field 'seed' is missing": json.dumps(
            {k: v for k, v in record(2, True).to_json().items() if k != "seed"}
        ),
        "field 'steps' is '400', expected int": json.dumps(
            {**record(2, True).to_json(), "steps": "400"}
        ),
        "unknown field(s) 'colour'": json.dumps({**record(2, True).to_json(), "colour": "red"}),
        "trial 0 is logged twice (first on line 1)": json.dumps(record(0, True).to_json()),
    }
    for message, line in cases.items():
        lines = list(good)
        lines[2] = line
        path.write_text("\n".join(lines) + "\n")
        with pytest.raises(TrialLogError, match=re.escape(message)) as err:
            read_trials(d)
        assert f"{path}:3:" in str(err.value)
    # A missing eval.json, or a bad one.
    with pytest.raises(TrialLogError, match="eval.json: missing"):
        read_trials(tmp_path / "nothing")
    (d / "eval.json").write_text(
        json.dumps({**json.loads((d / "eval.json").read_text()), "rig": "moon"})
    )
    with pytest.raises(
        TrialLogError, match="field 'rig' is 'moon', expected one of twin, hardware"
    ):
        read_trials(d)


def test_torn_last_line_is_skipped_and_cut_before_the_next_append(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    d = write_eval(tmp_path / "a", "a", 0.5, 0)
    path = d / "trials.jsonl"
    lines = path.read_text().splitlines()
    # The crash happened while trial 49 was being written.
    path.write_text("\n".join(lines[:49]) + "\n" + lines[49][:30])
    with caplog.at_level(logging.WARNING, logger="r2s2r.eval"):
        log = read_trials(d)
    assert len(log.records) == 49 and "torn last line" in caplog.text
    # Resuming appends trial 49 again; the torn piece is cut, the 49 lines before it kept.
    append_trial(path, TrialRecord.from_json(json.loads(lines[49])))
    assert path.read_text().splitlines() == lines
    assert len(read_trials(d).records) == 50
    # A torn line that is not the last one is corruption, not a crash.
    path.write_text("\n".join(lines[:10] + [lines[10][:30]] + lines[11:]) + "\n")
    with pytest.raises(TrialLogError, match=f"{re.escape(str(path))}:11: not valid JSON"):
        read_trials(d)


def test_logs_of_another_protocol_are_refused(tmp_path: Path) -> None:
    a = write_eval(tmp_path / "a", "a", 0.5, 0)
    b = write_eval(tmp_path / "b", "b", 0.5, 1, protocol_seed=7)
    with pytest.raises(TrialLogError, match="protocol_seed is 7 but .* has 0"):
        write_report([a, b], tmp_path / "out", resamples=200)
    assert not (tmp_path / "out" / "report.json").exists()
    # Same header, different trial list: trial 0 is red_light in c.
    c = tmp_path / "c"
    write_eval_info(c, read_trials(a).info)
    append_trial(c / "trials.jsonl", record(0, True, condition="red_light"))
    with pytest.raises(
        TrialLogError, match="trial 0 is red_light/seed 1000/bottle here but nominal"
    ):
        check_comparable([read_trials(a), read_trials(c)])
    with pytest.raises(TrialLogError, match="given twice"):
        check_comparable([read_trials(a), read_trials(a)])


def test_cli_report_and_compare(tmp_path: Path) -> None:
    dirs = design(tmp_path / "evals")
    out = tmp_path / "out"
    result = runner.invoke(
        app, ["report", *map(str, dirs), "--out", str(out), "--resamples", "500"]
    )
    assert result.exit_code == 0, result.output
    assert "overall" in result.output and str(out / "report.html") in result.output
    k, n, _ = counts_from_log(dirs[0] / "trials.jsonl")["overall"]
    assert f"{k}/{n}" in result.output.splitlines()[1]
    result = runner.invoke(
        app, ["report", *map(str, dirs), "--out", str(out), "--resamples", "500", "--json"]
    )
    assert result.exit_code == 0
    assert json.loads(result.output) == json.loads((out / "report.json").read_text())
    result = runner.invoke(
        app, ["compare", str(dirs[0]), str(dirs[4]), "--json", "--effect", "0.2"]
    )
    assert result.exit_code == 0, result.output
    c = json.loads(result.output)
    ka, na, _ = counts_from_log(dirs[0] / "trials.jsonl")["overall"]
    kb, nb, _ = counts_from_log(dirs[4] / "trials.jsonl")["overall"]
    assert (c["successes_a"], c["trials_a"], c["successes_b"], c["trials_b"]) == (ka, na, kb, nb)
    assert c["effect"] == 0.2 and c["verdict"].startswith("ga ")
    result = runner.invoke(app, ["compare", str(dirs[2]), str(dirs[3]), "--group", "shifted"])
    assert result.exit_code == 0 and "in shifted" in result.output
    result = runner.invoke(app, ["compare", str(dirs[2]), str(tmp_path / "missing")])
    assert result.exit_code != 0 and isinstance(result.exception, TrialLogError)
