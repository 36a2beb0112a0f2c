"""Statistics of the evaluation: Wilson intervals, Table 2's cells, the grounding effects and
their bootstrap intervals, the comparison of two policies (tests, power, SPRT)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import binomtest, norm

from r2s2r.eval.compare import (
    compare,
    newcombe_interval,
    sprt_pairs,
    trials_needed,
    two_proportion_z,
)
from r2s2r.eval.stats import (
    GROUPS,
    bootstrap_rates,
    grounding_effects,
    success_table,
    wilson_interval,
)
from r2s2r.eval.trials import (
    CONDITIONS,
    EvalInfo,
    PolicyInfo,
    TrialLog,
    TrialRecord,
    append_trial,
    read_trials,
    write_eval_info,
)

# The paper protocol's split of 50 trials.
SPLIT = {"nominal": 24, "red_light": 8, "fast_belt": 8, "novel_objects": 9, "all_shifts": 1}


def trial_list(split: dict[str, int] = SPLIT) -> list[str]:
    """The condition of each trial index."""
    return [c for c in CONDITIONS for _ in range(split.get(c, 0))]


def write_eval(
    directory: Path,
    name: str,
    successes: dict[str, int],
    split: dict[str, int] = SPLIT,
    world: str | None = None,
    behavior: str | None = None,
    real_only: bool = False,
    protocol_seed: int = 0,
) -> TrialLog:
    """Write a real evaluation directory whose policy succeeds in the first
    ``successes[c]`` trials of each condition c, and read it back."""
    policy = PolicyInfo(name, "learned", f"runs/{name}", real_only, world, behavior)
    write_eval_info(
        directory, EvalInfo("paper", protocol_seed, "twin", sum(split.values()), policy, {}, "t")
    )
    done = dict.fromkeys(CONDITIONS, 0)
    for i, c in enumerate(trial_list(split)):
        ok = done[c] < successes.get(c, 0)
        done[c] += 1
        record = TrialRecord(
            i, 100 + i, c, "cube", 0.1, "sorted" if ok else "timeout", ok, 9.5, 475, "outcome", 0
        )
        append_trial(directory / "trials.jsonl", record)
    return read_trials(directory)


def wilson_by_quadratic(k: int, n: int, z: float) -> tuple[float, float]:
    # The Wilson interval is where the score statistic equals z:
    # (k/n - p)^2 = z^2 p (1 - p) / n, a quadratic in p.
    ph = k / n
    a, b, c = 1 + z * z / n, -(2 * ph + z * z / n), ph * ph
    roots = np.sort(np.roots([a, b, c]).real)
    return float(roots[0]), float(roots[-1])


@pytest.mark.parametrize("k,n", [(0, 10), (5, 10), (10, 10), (16, 24), (17, 24), (1, 1), (43, 50)])
@pytest.mark.parametrize("confidence", [0.95, 0.9, 0.99])
def test_wilson_matches_independent_values(k: int, n: int, confidence: float) -> None:
    low, high = wilson_interval(k, n, confidence)
    z = norm.ppf(0.5 + confidence / 2)
    ql, qh = wilson_by_quadratic(k, n, z)
    ci = binomtest(k, n).proportion_ci(confidence_level=confidence, method="wilson")
    assert low == pytest.approx(ql, abs=1e-9) and high == pytest.approx(qh, abs=1e-9)
    assert low == pytest.approx(ci.low, abs=1e-12) and high == pytest.approx(ci.high, abs=1e-12)
    assert low <= k / n <= high


def test_wilson_textbook_value_and_bad_input() -> None:
    # 5 of 10 at 95%: [0.2366, 0.7634] (e.g. Newcombe 1998, Table I).
    low, high = wilson_interval(5, 10)
    assert (round(low, 4), round(high, 4)) == (0.2366, 0.7634)
    with pytest.raises(ValueError, match="trials > 0"):
        wilson_interval(0, 0)
    with pytest.raises(ValueError, match=r"\[0, 5\]"):
        wilson_interval(6, 5)
    with pytest.raises(ValueError, match="confidence"):
        wilson_interval(1, 5, 1.0)


def test_success_table_counts_groups(tmp_path: Path) -> None:
    log = write_eval(tmp_path / "a", "a", {"nominal": 20, "red_light": 3, "novel_objects": 9})
    table = success_table(log.records)
    assert list(table) == list(GROUPS)
    assert (table["nominal"].successes, table["nominal"].trials) == (20, 24)
    assert (table["fast_belt"].successes, table["fast_belt"].trials) == (0, 8)
    assert (table["shifted"].successes, table["shifted"].trials) == (12, 26)
    assert (table["overall"].successes, table["overall"].trials) == (32, 50)
    assert table["overall"].trial_indices == tuple(range(50))
    # red_light trials are indices 24..31; the first three succeeded.
    assert table["red_light"].success_indices == (24, 25, 26)
    assert table["shifted"].rate == pytest.approx(12 / 26)


def test_empty_group_has_no_rate(tmp_path: Path) -> None:
    log = write_eval(tmp_path / "a", "a", {"nominal": 2}, split={"nominal": 4, "fast_belt": 2})
    table = success_table(log.records)
    assert table["all_shifts"].trials == 0 and table["all_shifts"].rate is None
    assert table["all_shifts"].wilson_low is None


# Successes of a hand-built 2x2 design (+ real-only) in nominal / in each shifted condition.
DESIGN = {
    ("grounded", "adapted"): {"nominal": 22, "red_light": 7, "fast_belt": 7, "novel_objects": 8},
    ("grounded", "planned"): {"nominal": 18, "red_light": 6, "fast_belt": 5, "novel_objects": 6},
    ("nominal", "adapted"): {"nominal": 16, "red_light": 3, "fast_belt": 4, "novel_objects": 2},
    ("nominal", "planned"): {"nominal": 14, "red_light": 2, "fast_belt": 2, "novel_objects": 3},
}
REAL = {"nominal": 12, "red_light": 1, "fast_belt": 2, "novel_objects": 1}


def design_logs(root: Path, split: dict[str, int] = SPLIT, scale: int = 1) -> list[TrialLog]:
    scaled = {c: n * scale for c, n in split.items()}
    logs = [
        write_eval(
            root / f"{w}_{b}",
            f"{w}_{b}",
            {c: k * scale for c, k in counts.items()},
            scaled,
            world=w,
            behavior=b,
        )
        for (w, b), counts in DESIGN.items()
    ]
    real = {c: k * scale for c, k in REAL.items()}
    logs.append(write_eval(root / "real", "real", real, scaled, real_only=True))
    return logs


def test_grounding_effects_match_hand_computation(tmp_path: Path) -> None:
    logs = design_logs(tmp_path)
    effects, notes = grounding_effects(logs, resamples=2000, seed=3)
    assert notes == []
    got = {(e.kind, e.group, tuple(sorted(e.weights))): e for e in effects}

    def rate(counts: dict[str, int], group: str) -> float:
        conds = {"overall": CONDITIONS, "nominal": ("nominal",)}.get(
            group, tuple(c for c in CONDITIONS if c != "nominal")
        )
        return sum(counts.get(c, 0) for c in conds) / sum(SPLIT[c] for c in conds)

    for group in ("overall", "nominal", "shifted"):
        p = {key: rate(counts, group) for key, counts in DESIGN.items()}
        # Marginal effects: the mean over the grounded level minus the mean over the other.
        world = np.mean([p[("grounded", b)] for b in ("adapted", "planned")]) - np.mean(
            [p[("nominal", b)] for b in ("adapted", "planned")]
        )
        behavior = np.mean([p[(w, "adapted")] for w in ("grounded", "nominal")]) - np.mean(
            [p[(w, "planned")] for w in ("grounded", "nominal")]
        )
        inter = (p[("grounded", "adapted")] - p[("grounded", "planned")]) - (
            p[("nominal", "adapted")] - p[("nominal", "planned")]
        )
        by_kind = {k: e for (k, g, _), e in got.items() if g == group and k != "gain"}
        assert by_kind["world"].estimate == pytest.approx(world, abs=1e-12)
        assert by_kind["behavior"].estimate == pytest.approx(behavior, abs=1e-12)
        assert by_kind["interaction"].estimate == pytest.approx(inter, abs=1e-12)
        gains = [e for (k, g, _), e in got.items() if g == group and k == "gain"]
        assert len(gains) == 4
        for e in gains:
            (label,) = [lb for lb, w in e.weights.items() if w > 0]
            key = tuple(label.split("_"))
            assert e.estimate == pytest.approx(p[key] - rate(REAL, group), abs=1e-12)
        for e in by_kind.values():
            assert e.low <= e.estimate <= e.high


def test_bootstrap_matches_explicit_resampling(tmp_path: Path) -> None:
    # Our replicates draw each condition's count from Binomial(n, k/n); resampling trial
    # indices with replacement within each condition must give the same interval.
    logs = design_logs(tmp_path)
    effects, _ = grounding_effects(logs, groups=("overall",), resamples=20_000, seed=1)
    world = next(e for e in effects if e.kind == "world")
    rng = np.random.default_rng(12345)
    reps = np.zeros(20_000)
    for log in logs[:4]:
        w = world.weights[log.info.policy.name]
        total = np.zeros(20_000)
        for c in CONDITIONS:
            x = np.array([r.success for r in log.records if r.condition == c], dtype=float)
            idx = rng.integers(0, len(x), size=(20_000, len(x)))
            total += x[idx].sum(axis=1)
        reps += w * total / len(log.records)
    low, high = np.quantile(reps, [0.025, 0.975])
    assert world.low == pytest.approx(low, abs=0.015)
    assert world.high == pytest.approx(high, abs=0.015)


def test_bootstrap_is_seeded_and_narrows_with_more_trials(tmp_path: Path) -> None:
    small = design_logs(tmp_path / "small")
    large = design_logs(tmp_path / "large", scale=4)
    a, _ = grounding_effects(small, groups=("overall",), resamples=4000, seed=7)
    b, _ = grounding_effects(small, groups=("overall",), resamples=4000, seed=7)
    c, _ = grounding_effects(small, groups=("overall",), resamples=4000, seed=8)
    big, _ = grounding_effects(large, groups=("overall",), resamples=4000, seed=7)
    assert [(e.low, e.high) for e in a] == [(e.low, e.high) for e in b]
    assert [(e.low, e.high) for e in a] != [(e.low, e.high) for e in c]
    for e_small, e_big in zip(a, big, strict=True):
        assert e_small.estimate == pytest.approx(e_big.estimate)
        # Four times the trials: about sqrt(4) = 2 times narrower.
        ratio = (e_small.high - e_small.low) / (e_big.high - e_big.low)
        assert 1.6 < ratio < 2.5, (e_small.kind, ratio)
    rates = bootstrap_rates(small[0].records, "overall", 1000, np.random.default_rng(0))
    assert rates.shape == (1000,) and 0 <= rates.min() <= rates.max() <= 1


def test_incomplete_design_gives_notes(tmp_path: Path) -> None:
    logs = design_logs(tmp_path)
    effects, notes = grounding_effects(logs[1:4], resamples=200)
    assert effects == []
    assert any("missing: world=grounded/behavior=adapted" in n for n in notes)
    assert any("no real-only policy" in n for n in notes)
    # Two policies in one cell: no 2x2 effects, but each still gets its gain over real-only.
    extra = write_eval(
        tmp_path / "again",
        "again",
        DESIGN[("nominal", "planned")],
        world="nominal",
        behavior="planned",
    )
    effects, notes = grounding_effects([*logs, extra], groups=("overall",), resamples=200)
    assert {e.kind for e in effects} == {"gain"} and len(effects) == 5
    assert any(
        "more than one policy in the cell world=nominal, behavior=planned" in n for n in notes
    )


def test_power_analysis_textbook_value_and_simulated_power() -> None:
    # 60% vs 40%, two-sided alpha 0.05, 80% power: 97 per group (normal approximation
    # without continuity correction, as in Fleiss et al. and most sample-size tables).
    assert trials_needed(0.6, 0.4, 0.05, 0.8) == 97
    assert trials_needed(0.4, 0.6, 0.05, 0.8) == 97
    assert trials_needed(0.5, 0.5) is None
    # The z-test with 97 per group rejects in about 80% of simulated experiments.
    rng = np.random.default_rng(0)
    ka, kb = rng.binomial(97, 0.6, 20_000), rng.binomial(97, 0.4, 20_000)
    pooled = (ka + kb) / 194
    z = (ka - kb) / 97 / np.sqrt(pooled * (1 - pooled) * 2 / 97)
    assert np.mean(np.abs(z) > norm.ppf(0.975)) == pytest.approx(0.8, abs=0.02)


def test_two_proportion_tests_and_newcombe() -> None:
    # The pooled z-test by its definition.
    p = (30 + 20) / 100
    z = (0.6 - 0.4) / math.sqrt(p * (1 - p) * (2 / 50))
    assert two_proportion_z(30, 50, 20, 50) == pytest.approx(2 * norm.sf(z))
    # Newcombe's method 10 from scipy's Wilson intervals.
    a = binomtest(56, 70).proportion_ci(method="wilson")
    b = binomtest(48, 80).proportion_ci(method="wilson")
    d = 56 / 70 - 48 / 80
    low, high = newcombe_interval(56, 70, 48, 80)
    assert low == pytest.approx(d - math.hypot(56 / 70 - a.low, b.high - 48 / 80))
    assert high == pytest.approx(d + math.hypot(a.high - 56 / 70, 48 / 80 - b.low))
    assert low < d < high


def test_compare_verdicts(tmp_path: Path) -> None:
    a = write_eval(
        tmp_path / "a", "a", {"nominal": 14, "red_light": 4, "fast_belt": 4, "novel_objects": 4}
    )
    b = write_eval(
        tmp_path / "b", "b", {"nominal": 15, "red_light": 5, "fast_belt": 4, "novel_objects": 5}
    )
    c = compare(a, b)
    assert (c.successes_a, c.trials_a, c.successes_b, c.trials_b) == (26, 50, 29, 50)
    assert not c.settled and c.test == "z"
    assert c.needed_observed == trials_needed(26 / 50, 29 / 50)
    assert c.more_observed == c.needed_observed - 50
    assert "inside the sampling error" in c.verdict
    assert f"about {c.more_observed} more trials per policy" in c.verdict
    strong = write_eval(
        tmp_path / "s",
        "s",
        {"nominal": 24, "red_light": 8, "fast_belt": 8, "novel_objects": 9, "all_shifts": 1},
    )
    c2 = compare(strong, a)
    assert c2.settled and "s is better" in c2.verdict and c2.low > 0
    # Few trials with a rate near 0: Fisher's exact test decides.
    tiny_a = write_eval(tmp_path / "ta", "ta", {"nominal": 1}, split={"nominal": 6})
    tiny_b = write_eval(tmp_path / "tb", "tb", {"nominal": 0}, split={"nominal": 6})
    c3 = compare(tiny_a, tiny_b)
    assert c3.test == "fisher_exact" and c3.p_value == pytest.approx(1.0)
    same = compare(a, a)
    assert same.needed_observed is None and "no difference observed" in same.verdict


def test_sprt_decides_clear_cases_and_keeps_its_error_rate() -> None:
    # A always succeeds where B fails: decided for A within a few discordant pairs.
    s = sprt_pairs([(True, False)] * 50, odds_ratio=2.0, alpha=0.05, power=0.8)
    assert s.decision == "a_better" and s.pairs < 20 and s.pairs == s.discordant
    s = sprt_pairs([(False, True)] * 50, odds_ratio=2.0, alpha=0.05, power=0.8)
    assert s.decision == "b_better"
    s = sprt_pairs([(True, True), (False, False)] * 25, odds_ratio=2.0, alpha=0.05, power=0.8)
    assert s.decision == "continue" and s.discordant == 0
    # Under H0 (both 50%), the rate of a wrong "better" is about alpha / power at most.
    rng = np.random.default_rng(0)
    wrong = 0
    runs = 400
    for _ in range(runs):
        x = rng.random((600, 2)) < 0.5
        s = sprt_pairs([tuple(row) for row in x], odds_ratio=2.0, alpha=0.05, power=0.8)
        wrong += s.decision in ("a_better", "b_better")
    assert wrong / runs < 0.09
