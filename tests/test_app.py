"""The services behind the CLI and the GUIs: typed requests, progress reports, cancellation
from another thread, typed results, and resuming what a cancelled job left."""

from __future__ import annotations

import json
import logging
import threading
from pathlib import Path

import numpy as np
import pytest

from r2s2r.app.generate import GenerateResult, generate
from r2s2r.app.ground import GroundRequest, ground
from r2s2r.app.jobs import Cancel, Cancelled, Progress, RequestError
from r2s2r.app.record import RecordRequest, check_request, record
from r2s2r.app.rigs import rig_kind
from r2s2r.behavior.generate import GenerateCfg
from r2s2r.data import Dataset
from r2s2r.data.config import ACTION_KEY
from r2s2r.rig.kinds import RigOptions


@pytest.fixture(scope="module")
def demos(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two scripted-operator demonstrations recorded on the twin through the service."""
    logging.getLogger("r2s2r.safety").setLevel(logging.ERROR)
    out = tmp_path_factory.mktemp("app") / "demos"
    reports: list[Progress] = []
    result = record(RecordRequest(out=out, episodes=2, seed=1, image_size=0), None, reports.append)
    assert len(result.saved) == 2 and result.successful == 2 and result.discarded == 0
    saved = [p.done for p in reports if p.stage == "record"]
    assert saved[-1] == 2 and saved == sorted(saved) and {p.total for p in reports} == {2}
    assert Dataset(out).num_episodes == 2
    return out


def test_recording_cancelled_from_another_thread_keeps_what_was_saved(tmp_path: Path) -> None:
    cancel = Cancel()
    reached = threading.Event()
    out = tmp_path / "cancelled"
    request = RecordRequest(out=out, episodes=6, seed=1, image_size=0)
    box: dict[str, object] = {}

    def progress(p: Progress) -> None:
        if p.done >= 1:
            reached.set()

    def job() -> None:
        box["result"] = record(request, None, progress, cancel)

    worker = threading.Thread(target=job)
    worker.start()
    assert reached.wait(120), "no episode was saved"
    cancel.cancel()
    worker.join(120)
    assert not worker.is_alive()
    result = box["result"]
    saved = len(result.saved)  # type: ignore[attr-defined]
    assert 1 <= saved < 6
    # The take in progress when the job was cancelled is discarded, never half-written.
    assert result.takes[-1].decision == "quit"  # type: ignore[attr-defined]
    assert Dataset(out).num_episodes == saved


def test_takes_of_one_instance_by_other_operators_append_to_one_dataset(tmp_path: Path) -> None:
    # The same twin seed presents the same instance; the operator's seed changes only how
    # the take is performed. Each call appends its take to the dataset already there.
    out = tmp_path / "one_instance"
    takes = [
        record(
            RecordRequest(out=out, seed=2, operator_seed=o, episodes=1, image_size=0, max_seconds=1)
        )
        for o in (None, 7)
    ]
    assert [t.takes[0].object_name for t in takes] == [takes[0].takes[0].object_name] * 2
    with Dataset(out) as ds:
        assert ds.num_episodes == 2
        first, other = ds.episode_arrays(0), ds.episode_arrays(1)
    # The object rides the belt alike in both takes (the arm never reaches it in 1 s) ...
    env = "observation.environment_state"
    np.testing.assert_allclose(first[env], other[env], atol=1e-9)
    # ... while the operators' hands (tremor, sensor noise) command other targets.
    assert np.abs(first[ACTION_KEY] - other[ACTION_KEY]).max() > 1e-4


def test_a_cancelled_generation_resumes_to_the_uninterrupted_job(
    demos: Path, tmp_path: Path
) -> None:
    def cfg(out: Path) -> GenerateCfg:
        return GenerateCfg(source=demos, out=out, episodes=2, image_size=0, seed=7)

    whole = generate(cfg(tmp_path / "whole"))
    assert isinstance(whole, GenerateResult) and whole.kept == 2
    assert whole.success_rate == pytest.approx(2 / whole.attempts)

    cancel = Cancel()
    reports: list[Progress] = []

    def progress(p: Progress) -> None:
        reports.append(p)
        cancel.cancel()  # After the first attempt: the job stops at its next check.

    with pytest.raises(Cancelled, match="generation cancelled"):
        generate(cfg(tmp_path / "resumed"), progress, cancel)
    log = tmp_path / "resumed" / "generation" / "attempts.jsonl"
    assert len(log.read_text().splitlines()) == 1 and len(reports) == 1
    assert not (tmp_path / "resumed" / "generation" / "summary.json").exists()
    resumed = generate(cfg(tmp_path / "resumed"))
    assert (resumed.kept, resumed.attempts, resumed.failures) == (
        whole.kept,
        whole.attempts,
        whole.failures,
    )

    def attempts(out: Path) -> list[dict[str, object]]:
        lines = (out / "generation" / "attempts.jsonl").read_text().splitlines()
        return [{k: v for k, v in json.loads(x).items() if k != "seconds"} for x in lines]

    assert attempts(tmp_path / "resumed") == attempts(tmp_path / "whole")


def test_grounding_cancelled_before_it_starts_writes_no_world(tmp_path: Path) -> None:
    cancel = Cancel()
    cancel.cancel()
    with pytest.raises(Cancelled, match="grounding cancelled"):
        ground(GroundRequest(out=tmp_path / "g", seed=0), cancel=cancel)
    assert not (tmp_path / "g" / "grounded.yaml").exists()
    assert not (tmp_path / "g" / "capture.json").exists()


def test_requests_that_cannot_run_are_refused_before_anything_opens(tmp_path: Path) -> None:
    with pytest.raises(RequestError, match="--rig hardware needs --config"):
        rig_kind("hardware", RigOptions())
    with pytest.raises(RequestError, match="--calibration"):
        check_request(RecordRequest(out=tmp_path, rig="hardware", scripted=False))
    with pytest.raises(RequestError, match="use --keyboard"):
        check_request(
            RecordRequest(out=tmp_path, rig="hardware", config=tmp_path, calibration=tmp_path)
        )
    with pytest.raises(ValueError, match="rig"):
        RecordRequest(out=tmp_path, rig="lab")
