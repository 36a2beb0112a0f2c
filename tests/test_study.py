"""The study's config, plan and bookkeeping: presets, fingerprints that change exactly
downstream of a changed setting, stage selection, the registry of what runs each kind of
stage, and the requests it refuses (the whole study runs in ``test_study_run.py``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from r2s2r.app.jobs import RequestError
from r2s2r.app.study import STAGES, StudyRequest, demo_seed, run_study
from r2s2r.rig.kinds import RIGS
from r2s2r.spec.base import SpecError
from r2s2r.spec.registry import RegistryError
from r2s2r.study.config import FOUR, REAL_ONLY, StudyCfg, load_study, preset_names
from r2s2r.study.plan import STAGE_KINDS, Ledger, Stage, fingerprints, plan, select
from r2s2r.study.stages import stage_registry

MICRO = Path(__file__).parent / "presets" / "study_micro.yaml"


def test_the_presets_load_and_name_the_reference_design() -> None:
    assert {"smoke", "paper"} <= set(preset_names())
    paper = load_study("paper")
    assert paper.real.episodes == 100 and paper.generation.episodes == 1500
    assert paper.training.preset == "500m" and paper.evaluation.trials is None
    assert set(paper.policies) == {REAL_ONLY, *FOUR}
    smoke = load_study("smoke")
    assert smoke.image_size == 64 and smoke.training.preset == "tiny"
    names = [s.name for s in plan(smoke)]
    assert names[:2] == ["record", "ground"] and names[-1] == "report"
    assert sum(n.startswith("train:") for n in names) == 5
    assert sum(n.startswith("generate:") for n in names) == 4
    assert load_study(MICRO).name == "micro"


def test_an_unknown_preset_names_the_nearest_ones(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match=r"unknown study preset 'smok'; did you mean 'smoke'"):
        load_study("smok")
    with pytest.raises(SpecError, match="not found"):
        load_study(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: bad\npolicies: {mine: {sims: [nominal-adaptd]}}\n")
    with pytest.raises(SpecError, match=r"mine\.sims: nominal-adaptd not in generation\.datasets"):
        load_study(bad)
    bad.write_text("name: bad\ngeneration: {datasets: [nominal-adaptd]}\n")
    with pytest.raises(SpecError, match="did you mean 'nominal-adapted'"):
        load_study(bad)


def changed(cfg: StudyCfg, section: str, **fields: object) -> set[str]:
    """The stages whose fingerprint changes when ``section``'s ``fields`` change."""
    data = cfg.model_dump()
    data[section] = {**data[section], **fields}
    before, after = fingerprints(plan(cfg)), fingerprints(plan(StudyCfg.from_dict(data)))
    return {name for name in before if before[name] != after[name]}


def test_a_changed_setting_changes_exactly_the_stages_downstream_of_it() -> None:
    cfg = load_study("smoke")
    evals = {f"{k}:{p}" for k in ("eval", "latent") for p in cfg.policies} | {"report"}
    assert changed(cfg, "evaluation", trials=6) == evals
    trains = {f"train:{p}" for p in cfg.policies}
    assert changed(cfg, "training", steps=7) == trains | evals
    # Data-parallel processes change the global batch, so what is trained.
    assert changed(cfg, "training", processes=2) == trains | evals
    # More simulated episodes: every dataset and every policy trained on one; the real-only
    # policy is untouched, but its latent analysis compares with the simulated datasets.
    gen = changed(cfg, "generation", episodes=5)
    assert {f"generate:{d}" for d in FOUR} <= gen and "train:real-only" not in gen
    assert "eval:real-only" not in gen and "latent:real-only" in gen
    assert "record" not in gen and "ground" not in gen
    # The real demos feed everything but the grounding (its own captures).
    assert changed(cfg, "real", episodes=4) == set(fingerprints(plan(cfg))) - {"ground"}
    # A shorter grounding capture: the grounded datasets and what uses them, nothing nominal.
    sysid = {**cfg.grounding.sysid.model_dump(), "arm_train_s": 10.0}
    grounding = changed(cfg, "grounding", sysid=sysid)
    assert {"ground", "generate:grounded-planned", "train:grounded-planned"} <= grounding
    assert not {"generate:nominal-planned", "train:nominal-planned", "record"} & grounding
    # Workers change how fast, not what: nothing.
    assert changed(cfg, "generation", workers=1) == set()
    assert changed(cfg, "evaluation", workers=3) == set()


def test_stages_are_chosen_by_kind_or_name() -> None:
    stages = plan(load_study("smoke"))
    assert [s.name for s in select(stages, ["train:real-only", "report"])] == [
        "train:real-only",
        "report",
    ]
    assert len(select(stages, ["generate"])) == 4
    with pytest.raises(ValueError, match=r"unknown stage 'trian' \(known: record, ground"):
        select(stages, ["trian"])


def test_every_kind_of_stage_a_plan_makes_has_its_runner() -> None:
    made = {
        stage.kind
        for cfg in [load_study(name) for name in preset_names()] + [load_study(MICRO)]
        for rig in RIGS.names()
        for stage in plan(cfg, rig)
    }
    assert made == set(STAGE_KINDS)
    assert STAGES.names() == STAGE_KINDS
    with pytest.raises(RegistryError) as err:
        STAGES.get("evaluate")
    assert str(err.value) == (
        "unknown stage kind 'evaluate'; did you mean 'eval' or 'latent' or 'generate'? "
        "(known: eval, generate, ground, latent, record, report, train)"
    )


def test_a_table_of_stage_runners_must_name_every_kind_and_no_other() -> None:
    def runner(ctx: object, stage: object, decision: object) -> dict[str, object]:
        return {}

    table = {kind: runner for kind in STAGE_KINDS}
    assert stage_registry(table).names() == STAGE_KINDS
    del table["latent"]
    with pytest.raises(RegistryError, match=r"no runner for stage kind 'latent' \(the kinds: rec"):
        stage_registry(table)
    with pytest.raises(RegistryError, match=r"'latent'; a runner for stage kind 'evaluate', which"):
        stage_registry({**table, "evaluate": runner})


def test_a_stage_of_a_kind_without_a_runner_is_refused_before_it_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import r2s2r.app.study as study

    monkeypatch.setattr(study, "plan", lambda cfg, rig: [Stage("sweep", "sweep", "sweep")])
    with pytest.raises(
        RegistryError, match=r"unknown stage kind 'sweep' \(known: eval, generate, "
    ):
        run_study(StudyRequest(out=tmp_path, preset=str(MICRO)))
    assert Ledger(tmp_path).entry("sweep") == {}


def test_demo_seeds_are_distinct_and_fixed() -> None:
    seeds = [demo_seed(0, k) for k in range(100)]
    assert len(set(seeds)) == 100 and seeds == [demo_seed(0, k) for k in range(100)]
    assert demo_seed(1, 0) != demo_seed(0, 0)


def test_bad_requests_are_refused_before_anything_runs(tmp_path: Path) -> None:
    out = tmp_path / "study"
    with pytest.raises(RequestError, match="--rig hardware needs --config PATH"):
        run_study(StudyRequest(out=out, preset=str(MICRO), rig="hardware"))
    rig = tmp_path / "rig.yaml"
    rig.write_text("{}\n")
    with pytest.raises(RequestError, match="needs --calibration PATH"):
        run_study(StudyRequest(out=out, preset=str(MICRO), rig="hardware", config=rig))
    assert not out.exists()
    # A stage whose inputs were never made.
    with pytest.raises(RequestError, match=r"stage 'train:real-only' needs stage 'record'"):
        run_study(StudyRequest(out=out, preset=str(MICRO), stages=("train:real-only",)))
    with pytest.raises(RequestError, match="unknown stage 'evaluate'"):
        run_study(StudyRequest(out=out, preset=str(MICRO), stages=("evaluate",)))


def test_a_folder_the_study_did_not_make_is_left_alone(tmp_path: Path) -> None:
    out = tmp_path / "study"
    (out / "real").mkdir(parents=True)
    (out / "real" / "mine.txt").write_text("mine")
    with pytest.raises(RequestError, match=r"real exists but .*study\.json does not list"):
        run_study(StudyRequest(out=out, preset=str(MICRO)))
    assert (out / "real" / "mine.txt").read_text() == "mine"
    (out / "study.json").write_text("{not json")
    with pytest.raises(ValueError, match=r"study\.json: not valid JSON"):
        Ledger(out)


def test_the_ledger_is_rewritten_whole(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path)
    ledger.set("record", fingerprint="ab", state="running")
    ledger.set("record", state="done", seconds=1.5)
    data = json.loads((tmp_path / "study.json").read_text())
    assert data["stages"]["record"] == {"fingerprint": "ab", "state": "done", "seconds": 1.5}
    assert not list(tmp_path.glob("*.tmp"))


def test_the_foundation_preset_pretrains_first_and_fine_tunes_from_it() -> None:
    cfg = load_study("foundation")
    stages = {s.name: s for s in plan(cfg)}
    assert cfg.evaluated == ["real-1000", "real-100-grounded"]
    assert "eval:pretrain" not in stages and "latent:pretrain" not in stages
    pre = stages["train:pretrain"]
    assert "record" not in pre.deps and len(pre.deps) == 4 and not pre.params["real"]
    grounded = stages["train:real-100-grounded"]
    assert "train:pretrain" in grounded.deps and grounded.params["real_episodes"] == 100
    assert grounded.params["init_from_study"] and grounded.params["init"] == "pretrain"
    # Pre-training longer changes both fine-tuned policies, through their starting point.
    data = cfg.model_dump()
    data["policies"]["pretrain"]["sims"] = ["nominal-adapted"]
    after = fingerprints(plan(StudyCfg.from_dict(data)))
    before = fingerprints(plan(cfg))
    assert after["train:real-1000"] != before["train:real-1000"]
    assert after["generate:grounded-adapted"] == before["generate:grounded-adapted"]


def test_policy_entries_are_checked() -> None:
    base = load_study("smoke").model_dump()

    def with_policies(**policies: object) -> None:
        StudyCfg.from_dict({**base, "policies": policies}, source="study")

    with pytest.raises(SpecError, match="trains on nothing"):
        with_policies(a={"real": False})
    with pytest.raises(SpecError, match=r"policies\.b\.init: policy 'c' must be listed before"):
        with_policies(b={"init": "c"}, c={})
    with pytest.raises(SpecError, match=r"real_episodes: 9 is more than the 3 demos"):
        with_policies(a={"real_episodes": 9})


# Slow (about 45 s: a recorded demo, then two training processes).
@pytest.mark.slow
def test_a_policy_trains_as_two_data_parallel_processes(tmp_path: Path) -> None:
    """training.processes: 2 runs the stage as two gloo processes under torchrun's launcher
    (one per GPU on a GPU machine): one model, trained on twice the samples per step."""
    from r2s2r.policy.checkpoint import load_checkpoint

    preset = tmp_path / "ddp.yaml"
    text = MICRO.read_text().replace("real: {episodes: 2}", "real: {episodes: 1, max_seconds: 6}")
    text = text.replace("steps: 20", "steps: 4").replace("save_every: 10", "save_every: 2")
    preset.write_text(text.replace("workers: 0", "workers: 0\n  processes: 2"))
    assert load_study(preset).training.processes == 2
    request = StudyRequest(out=tmp_path / "study", preset=str(preset),
                           stages=("record", "train:real-only"))  # fmt: skip
    result = run_study(request)
    assert [s.decision for s in result.stages] == ["fresh", "fresh"]
    saved = load_checkpoint(tmp_path / "study" / "runs" / "real-only", optimizer=False)
    assert saved.step == 4 and saved.trainer["samples"] == 2 * 4 * 4
    log = (tmp_path / "study" / "runs" / "real-only" / "train.log").read_text()
    assert "finished at step 4/4" in log
