"""Evaluation protocols: the seeded trial list, its counts and order, and ``--trials N``."""

from __future__ import annotations

from pathlib import Path

import pytest

from r2s2r.eval.protocol import (
    PROTOCOLS,
    ProtocolError,
    ProtocolSpec,
    condition_counts,
    load_protocol,
    select_trials,
    trial_list,
)
from r2s2r.spec import SpecError

PAPER = {"nominal": 24, "red_light": 8, "fast_belt": 8, "novel_objects": 9, "all_shifts": 1}


def is_webster(counts: dict[str, int], given: dict[str, int]) -> bool:
    """Whether ``given`` is a Webster apportionment of ``counts``: one scale x (1 / divisor)
    puts every ``counts[c] * x`` within half a trial of ``given[c]`` (ties allowed)."""
    low = max((given.get(c, 0) - 0.5) / n for c, n in counts.items())
    high = min((given.get(c, 0) + 0.5) / n for c, n in counts.items())
    return low <= high + 1e-12


def test_the_paper_protocol_has_the_reference_counts() -> None:
    paper = load_protocol("paper")
    trials = trial_list(paper, 0)
    assert paper.total == 50 and len(trials) == 50
    assert condition_counts(trials) == PAPER
    assert [t.index for t in trials] == list(range(50))
    # Every trial has its own twin seed.
    assert len({t.seed for t in trials}) == 50
    smoke = trial_list(load_protocol("smoke"), 0)
    assert sorted(t.condition for t in smoke) == sorted(PAPER)
    assert set(PROTOCOLS.names()) >= {"paper", "smoke"}


def test_the_list_is_a_function_of_the_protocol_and_its_seed() -> None:
    paper = load_protocol("paper")
    assert trial_list(paper, 3) == trial_list(load_protocol("paper"), 3)
    assert trial_list(paper, 3) != trial_list(paper, 4)
    # The same counts under another name make another list.
    twin = ProtocolSpec(name="paper2", trials=dict(paper.trials))
    assert [t.seed for t in trial_list(twin, 3)] != [t.seed for t in trial_list(paper, 3)]
    # The seed also reorders the conditions (ties are broken by it).
    orders = {tuple(t.condition for t in trial_list(paper, s)) for s in range(6)}
    assert len(orders) > 1


@pytest.mark.parametrize("seed", [0, 1, 7])
def test_every_prefix_holds_the_conditions_in_proportion(seed: int) -> None:
    paper = load_protocol("paper")
    trials = trial_list(paper, seed)
    for n in range(1, 51):
        counts = condition_counts(trials[:n])
        for condition, total in PAPER.items():
            quota = n * total / 50
            assert abs(counts.get(condition, 0) - quota) < 1, (n, condition, counts)
        assert is_webster(PAPER, counts), (n, counts)
    # The check itself tells a skewed prefix from a proportional one.
    assert not is_webster(PAPER, {"nominal": 10}) and is_webster(PAPER, {"nominal": 1})
    # A run stopped after ten trials has met every condition but the single all-shifts one.
    assert set(condition_counts(trials[:10])) == set(PAPER) - {"all_shifts"}


def test_trials_n_runs_the_first_n_trials_and_refuses_a_bad_n() -> None:
    trials = trial_list(load_protocol("paper"), 0)
    assert select_trials(trials, None) == trials
    assert select_trials(trials, 7) == trials[:7]
    for bad in (0, 51, -1):
        with pytest.raises(
            ProtocolError, match="--trials: expected a number of trials from 1 to 50"
        ):
            select_trials(trials, bad)


def test_bad_protocols_and_seeds_are_refused_with_the_reason(tmp_path: Path) -> None:
    with pytest.raises(ProtocolError, match=r"unknown protocol 'papr'; did you mean 'paper'"):
        load_protocol("papr")
    with pytest.raises(SpecError, match="unknown condition 'red_lights'"):
        ProtocolSpec.from_dict({"name": "x", "trials": {"red_lights": 2}})
    with pytest.raises(SpecError, match="trials"):
        ProtocolSpec.from_dict({"name": "x", "trials": {"nominal": 0}})
    with pytest.raises(ProtocolError, match="protocol seed: expected an integer >= 0"):
        trial_list(load_protocol("smoke"), -1)
    path = tmp_path / "quick.yaml"
    path.write_text("name: quick\ntrials: {nominal: 2, fast_belt: 1}\n")
    quick = load_protocol(str(path))
    assert condition_counts(trial_list(quick, 0)) == {"nominal": 2, "fast_belt": 1}


def test_a_protocol_may_list_its_trial_seeds(tmp_path: Path) -> None:
    # E.g. the seeds a policy's demonstrations were recorded at: trial k runs at seeds[k],
    # and the conditions keep the order drawn for the protocol without them.
    path = tmp_path / "demos.yaml"
    path.write_text("name: quick\ntrials: {nominal: 2, fast_belt: 1}\nseeds: [7, 3, 7]\n")
    given = trial_list(load_protocol(path), 5)
    drawn = trial_list(ProtocolSpec(name="quick", trials={"nominal": 2, "fast_belt": 1}), 5)
    assert [t.seed for t in given] == [7, 3, 7]
    assert [t.condition for t in given] == [t.condition for t in drawn]
    with pytest.raises(SpecError, match="seeds: 2 given for 3 trials"):
        ProtocolSpec.from_dict({"name": "x", "trials": {"nominal": 3}, "seeds": [1, 2]})
    with pytest.raises(SpecError, match="seeds"):
        ProtocolSpec.from_dict({"name": "x", "trials": {"nominal": 1}, "seeds": [-1]})
