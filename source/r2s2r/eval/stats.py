"""Success rates and grounding effects from trial logs: Table 2's cells with Wilson score
intervals, and the effects of the 2x2 grounding design with percentile bootstrap intervals.

Every figure keeps the trial indices it counts, so that a number in the report can be traced
back to the lines of a ``trials.jsonl``.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
from scipy.stats import binomtest

from r2s2r.eval.trials import BEHAVIOR_LEVELS, CONDITIONS, WORLD_LEVELS, TrialLog, TrialRecord

# Table 2's columns: the conditions, then "shifted" (every non-nominal trial) and "overall".
GROUPS = (*CONDITIONS, "shifted", "overall")
GROUP_TITLES = {
    "nominal": "nominal",
    "red_light": "red light",
    "fast_belt": "fast belt",
    "novel_objects": "novel objects",
    "all_shifts": "all shifts",
    "shifted": "shifted total",
    "overall": "overall",
}
# The groups the grounding effects are computed for.
EFFECT_GROUPS = ("overall", "nominal", "shifted")
DEFAULT_RESAMPLES = 10_000


def group_conditions(group: str) -> tuple[str, ...]:
    """The conditions a Table 2 column counts."""
    if group == "overall":
        return CONDITIONS
    if group == "shifted":
        return tuple(c for c in CONDITIONS if c != "nominal")
    if group in CONDITIONS:
        return (group,)
    raise ValueError(f"unknown group {group!r}, expected one of {', '.join(GROUPS)}")


def wilson_interval(successes: int, trials: int, confidence: float = 0.95) -> tuple[float, float]:
    """The Wilson score interval of a binomial proportion (SciPy's; exactly 0 at no success
    and 1 at all successes)."""
    if trials <= 0:
        raise ValueError(f"a Wilson interval needs trials > 0, got {trials}")
    if not 0 <= successes <= trials:
        raise ValueError(f"successes must be in [0, {trials}], got {successes}")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    ci = binomtest(int(successes), int(trials)).proportion_ci(
        confidence_level=confidence, method="wilson"
    )
    return float(ci.low), float(ci.high)


@dataclass(frozen=True)
class Cell:
    """One cell of Table 2: a policy's successes in one group of conditions."""

    group: str
    successes: int
    trials: int
    # None when the group has no trials (e.g. a short run without an all_shifts trial).
    rate: float | None
    wilson_low: float | None
    wilson_high: float | None
    # The protocol's trial indices the cell counts, and the successful ones among them.
    trial_indices: tuple[int, ...]
    success_indices: tuple[int, ...]

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["trial_indices"] = list(self.trial_indices)
        data["success_indices"] = list(self.success_indices)
        return data


def cell(records: Sequence[TrialRecord], group: str, confidence: float = 0.95) -> Cell:
    """The Table 2 cell of ``records`` for ``group``."""
    members = set(group_conditions(group))
    chosen = sorted((r for r in records if r.condition in members), key=lambda r: r.trial)
    n = len(chosen)
    k = sum(r.success for r in chosen)
    low, high = wilson_interval(k, n, confidence) if n else (None, None)
    return Cell(
        group=group,
        successes=k,
        trials=n,
        rate=k / n if n else None,
        wilson_low=low,
        wilson_high=high,
        trial_indices=tuple(r.trial for r in chosen),
        success_indices=tuple(r.trial for r in chosen if r.success),
    )


def success_table(records: Sequence[TrialRecord], confidence: float = 0.95) -> dict[str, Cell]:
    """Table 2's row of one policy: group -> cell, for every group of GROUPS."""
    return {g: cell(records, g, confidence) for g in GROUPS}


def policy_labels(logs: Sequence[TrialLog]) -> list[str]:
    """One unique label per log: the policy's name, with its directory's name where two
    evaluations share a policy name."""
    names = [log.info.policy.name for log in logs]
    labels = [
        n if names.count(n) == 1 else f"{n} ({log.dir.name})"
        for n, log in zip(names, logs, strict=True)
    ]
    for i, label in enumerate(labels):
        if label in labels[:i]:
            labels[i] = f"{label} #{i}"
    return labels


def bootstrap_rates(
    records: Sequence[TrialRecord], group: str, resamples: int, rng: np.random.Generator
) -> np.ndarray:
    """Bootstrap replicates of a policy's success rate in ``group`` -> (resamples,).

    The trials are resampled with replacement within each condition (the protocol fixes how
    many trials each condition gets). Drawing n trials with replacement from n binary
    outcomes with k successes gives Binomial(n, k / n) successes, so each condition's count
    is drawn from that binomial directly: the same distribution as resampling the indices,
    without materialising a (resamples, n) index array.
    """
    total = np.zeros(resamples)
    n_group = 0
    for condition in group_conditions(group):
        outcomes = [r.success for r in records if r.condition == condition]
        n = len(outcomes)
        if n:
            total += rng.binomial(n, sum(outcomes) / n, size=resamples)
            n_group += n
    if n_group == 0:
        raise ValueError(f"no trials in group {group!r}")
    return total / n_group


@dataclass(frozen=True)
class Effect:
    """A linear contrast of policies' success rates in one group, with a percentile
    bootstrap interval (trials resampled within each policy and condition)."""

    # "world", "behavior", "interaction" or "gain".
    kind: str
    group: str
    # What the number is, in words (shown on the report).
    title: str
    estimate: float
    low: float
    high: float
    confidence: float
    resamples: int
    seed: int
    # The contrast: policy label -> weight of its rate.
    weights: dict[str, float] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Design:
    """The policies of the 2x2 grounding design, found from their eval.json."""

    # (world, behavior) -> label, the first co-trained policy of each cell.
    cells: dict[tuple[str, str], str]
    # (label, world, behavior) of every co-trained policy, in the order given.
    cotrained: tuple[tuple[str, str, str], ...]
    # The real-only baseline's label, if exactly one was given.
    real_only: str | None
    # Why an effect could not be computed.
    notes: tuple[str, ...]
    # True when every cell holds exactly one policy (the 2x2 effects are defined).
    complete: bool


def find_design(logs: Sequence[TrialLog], labels: Sequence[str]) -> Design:
    """Place the co-trained policies in the 2x2 (world x behavior) and find the real-only
    one; an empty or doubly-filled cell is recorded as a note, not raised."""
    notes: list[str] = []
    cells: dict[tuple[str, str], str] = {}
    cotrained: list[tuple[str, str, str]] = []
    doubled = False
    real: list[str] = []
    for log, label in zip(logs, labels, strict=True):
        p = log.info.policy
        if p.real_only:
            real.append(label)
        if p.world is None or p.behavior is None:
            continue
        key = (p.world, p.behavior)
        cotrained.append((label, p.world, p.behavior))
        if key in cells:
            doubled = True
            notes.append(
                f"more than one policy in the cell world={key[0]}, behavior={key[1]} "
                f"({cells[key]}, {label}): the 2x2 effects are not computed"
            )
        cells.setdefault(key, label)
    missing = [
        f"world={w}/behavior={b}"
        for w in WORLD_LEVELS
        for b in BEHAVIOR_LEVELS
        if (w, b) not in cells
    ]
    if missing:
        notes.append(
            "the 2x2 grounding effects need one co-trained policy per cell; missing: "
            + ", ".join(missing)
        )
    if len(real) > 1:
        notes.append(f"more than one real-only policy ({', '.join(real)}): no gains computed")
    elif not real:
        notes.append("no real-only policy (policy.real_only): no gains computed")
    complete = len(cells) == 4 and not doubled
    baseline = real[0] if len(real) == 1 else None
    return Design(cells, tuple(cotrained), baseline, tuple(notes), complete)


def _effect_contrasts(design: Design) -> list[tuple[str, str, dict[str, float]]]:
    """(kind, title, weights) of every effect the design allows."""
    out: list[tuple[str, str, dict[str, float]]] = []
    if design.complete:
        c = design.cells
        ga, gp = c[("grounded", "adapted")], c[("grounded", "planned")]
        na, np_ = c[("nominal", "adapted")], c[("nominal", "planned")]
        out += [
            (
                "world",
                "world grounding (grounded - nominal world, averaged over behavior)",
                {ga: 0.5, gp: 0.5, na: -0.5, np_: -0.5},
            ),
            (
                "behavior",
                "behavior grounding (adapted - planned behavior, averaged over world)",
                {ga: 0.5, na: 0.5, gp: -0.5, np_: -0.5},
            ),
            (
                "interaction",
                "interaction (world effect with adapted minus with planned behavior)",
                {ga: 1.0, na: -1.0, gp: -1.0, np_: 1.0},
            ),
        ]
    if design.real_only is not None:
        for label, world, behavior in design.cotrained:
            out.append(
                (
                    "gain",
                    f"gain of {label} (world {world}, behavior {behavior}) over {design.real_only}",
                    {label: 1.0, design.real_only: -1.0},
                )
            )
    return out


def grounding_effects(
    logs: Sequence[TrialLog],
    labels: Sequence[str] | None = None,
    groups: Sequence[str] = EFFECT_GROUPS,
    confidence: float = 0.95,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = 0,
) -> tuple[list[Effect], list[str]]:
    """The marginal world and behavior effects, their interaction and each co-trained
    policy's gain over real-only, per group; and notes on what could not be computed.

    The replicates of each policy and group come from their own generator seeded with
    (seed, group, policy label), so a figure does not depend on which other policies were given.
    """
    if resamples < 100:
        raise ValueError(f"resamples must be >= 100, got {resamples}")
    labels = list(labels) if labels is not None else policy_labels(logs)
    design = find_design(logs, labels)
    notes = list(design.notes)
    by_label: Mapping[str, TrialLog] = dict(zip(labels, logs, strict=True))
    tail = (1.0 - confidence) / 2.0
    effects: list[Effect] = []
    for group in groups:
        group_index = GROUPS.index(group)
        draws: dict[str, np.ndarray] = {}
        rates: dict[str, float] = {}
        for kind, title, weights in _effect_contrasts(design):
            empty = [lb for lb in weights if cell(by_label[lb].records, group).trials == 0]
            if empty:
                notes.append(f"{kind} in {group}: no {group} trials for {', '.join(empty)}")
                continue
            for lb in weights:
                if lb not in draws:
                    records = by_label[lb].records
                    entropy = [seed, group_index, zlib.crc32(lb.encode())]
                    rng = np.random.default_rng(entropy)
                    draws[lb] = bootstrap_rates(records, group, resamples, rng)
                    rates[lb] = float(cell(records, group).rate or 0.0)
            estimate = sum(w * rates[lb] for lb, w in weights.items())
            replicate = sum(w * draws[lb] for lb, w in weights.items())
            low, high = np.quantile(replicate, [tail, 1.0 - tail])
            effects.append(
                Effect(
                    kind=kind,
                    group=group,
                    title=title,
                    estimate=float(estimate),
                    low=float(low),
                    high=float(high),
                    confidence=confidence,
                    resamples=resamples,
                    seed=seed,
                    weights=dict(weights),
                )
            )
    return effects, notes
