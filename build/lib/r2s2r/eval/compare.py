"""Is the difference between two policies settled? A fixed-sample test of two proportions
(Fisher's exact test when counts are small), Newcombe's interval for the difference, the
trials per policy a difference of a given size needs at a given power, and Wald's sequential
probability ratio test on the trials in the order they ran.

The fixed-sample test answers for the trials as they stand, looked at once. Looking again
after every few trials and stopping at the first p < alpha inflates its error rate; the SPRT
is the test that may be looked at after every trial.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

from scipy.stats import fisher_exact, norm

from r2s2r.eval.stats import cell, group_conditions, wilson_interval
from r2s2r.eval.trials import TrialLog, TrialRecord


def newcombe_interval(
    ka: int, na: int, kb: int, nb: int, confidence: float = 0.95
) -> tuple[float, float]:
    """Newcombe's hybrid score interval of pa - pb (his method 10), from the two Wilson
    intervals; well-behaved for small counts and rates near 0 or 1."""
    pa, pb = ka / na, kb / nb
    la, ua = wilson_interval(ka, na, confidence)
    lb, ub = wilson_interval(kb, nb, confidence)
    d = pa - pb
    return d - math.hypot(pa - la, ub - pb), d + math.hypot(ua - pa, pb - lb)


def two_proportion_z(ka: int, na: int, kb: int, nb: int) -> float:
    """The two-sided p-value of the pooled two-proportion z-test."""
    pooled = (ka + kb) / (na + nb)
    if pooled in (0.0, 1.0):
        return 1.0
    se = math.sqrt(pooled * (1.0 - pooled) * (1.0 / na + 1.0 / nb))
    return float(2.0 * norm.sf(abs(ka / na - kb / nb) / se))


def trials_needed(pa: float, pb: float, alpha: float = 0.05, power: float = 0.8) -> int | None:
    """Trials per policy for a two-sided two-proportion z-test at level ``alpha`` to detect
    rates pa vs pb with probability ``power`` (the normal approximation without continuity
    correction, e.g. Fleiss, Levin & Paik 2003, eq. 4.14); None when pa == pb."""
    if pa == pb:
        return None
    for name, v in (("alpha", alpha), ("power", power), ("pa", pa), ("pb", pb)):
        if not 0.0 <= v <= 1.0 or (name in ("alpha", "power") and v in (0.0, 1.0)):
            raise ValueError(f"{name} must be in (0, 1), got {v}")
    z_a, z_b = norm.ppf(1.0 - alpha / 2.0), norm.ppf(power)
    mean = (pa + pb) / 2.0
    spread = z_a * math.sqrt(2.0 * mean * (1.0 - mean))
    spread += z_b * math.sqrt(pa * (1.0 - pa) + pb * (1.0 - pb))
    return math.ceil((spread / (pa - pb)) ** 2)


def rates_around(centre: float, effect: float) -> tuple[float, float]:
    """Two rates ``effect`` apart, centred on ``centre`` as far as [0, 1] allows."""
    if not 0.0 < effect <= 1.0:
        raise ValueError(f"effect must be in (0, 1], got {effect}")
    high = min(1.0, max(effect, centre + effect / 2.0))
    return high, high - effect


@dataclass(frozen=True)
class Sprt:
    """Two one-sided Wald SPRTs on the discordant pairs of trials (one policy succeeded,
    the other failed): H0 "A wins a discordant pair with probability 1/2" against "A's odds
    of success are ``odds_ratio`` times B's" and against the mirror image, each at alpha/2."""

    # "a_better", "b_better", "no_difference" (of the tested size) or "continue".
    decision: str
    # Pairs examined until the decision (all of them when it is "continue").
    pairs: int
    discordant: int
    a_wins: int
    odds_ratio: float
    # The log-likelihood ratios of the two tests when they stopped, and the boundaries.
    llr_a_better: float
    llr_b_better: float
    upper: float
    lower: float
    # True when pairs share a trial index (the same protocol trial); else in logged order.
    paired: bool

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def sprt(
    a: Sequence[TrialRecord],
    b: Sequence[TrialRecord],
    odds_ratio: float,
    alpha: float,
    power: float,
) -> Sprt:
    """Run the two SPRTs over the trials in protocol order: pairs of the same trial index
    (the same protocol trial), or, when the logs share none, pairs in logged order."""
    by_a = {r.trial: r.success for r in a}
    by_b = {r.trial: r.success for r in b}
    shared = sorted(set(by_a) & set(by_b))
    if shared:
        return sprt_pairs([(by_a[t], by_b[t]) for t in shared], odds_ratio, alpha, power)
    unpaired = [(x.success, y.success) for x, y in zip(a, b, strict=False)]
    return sprt_pairs(unpaired, odds_ratio, alpha, power, paired=False)


def sprt_pairs(
    pairs: Sequence[tuple[bool, bool]],
    odds_ratio: float,
    alpha: float,
    power: float,
    paired: bool = True,
) -> Sprt:
    """The two SPRTs over (A succeeded, B succeeded) pairs in order, each stopping at its
    first boundary crossing and never looked at again (Wald's rule, so the error rates hold:
    at most about alpha / 2 / power each way)."""
    if odds_ratio <= 1.0:
        raise ValueError(f"odds_ratio must be > 1, got {odds_ratio}")
    theta = odds_ratio / (1.0 + odds_ratio)
    up, down = math.log(2.0 * theta), math.log(2.0 * (1.0 - theta))
    beta = 1.0 - power
    upper = math.log((1.0 - beta) / (alpha / 2.0))
    lower = math.log(beta / (1.0 - alpha / 2.0))
    llr = [0.0, 0.0]
    state = ["continue", "continue"]
    discordant = wins = used = 0
    for used, (sa, sb) in enumerate(pairs, start=1):  # noqa: B007
        if sa == sb:
            continue
        discordant += 1
        wins += int(sa)
        for i, a_won in enumerate((sa, sb)):
            if state[i] == "continue":
                llr[i] += up if a_won else down
                if llr[i] >= upper:
                    state[i] = "reject"
                elif llr[i] <= lower:
                    state[i] = "accept"
        if "reject" in state or state == ["accept", "accept"]:
            break
    if state[0] == "reject":
        decision = "a_better"
    elif state[1] == "reject":
        decision = "b_better"
    elif state == ["accept", "accept"]:
        decision = "no_difference"
    else:
        decision = "continue"
    return Sprt(decision, used, discordant, wins, odds_ratio, llr[0], llr[1], upper, lower, paired)


@dataclass(frozen=True)
class Comparison:
    """Two policies' success in one group, compared."""

    a: str
    b: str
    group: str
    successes_a: int
    trials_a: int
    successes_b: int
    trials_b: int
    # rate_a - rate_b and its Newcombe interval at 1 - alpha.
    difference: float
    low: float
    high: float
    alpha: float
    # The test "settled" rests on: "fisher_exact" (an expected count under 5) or "z".
    test: str
    p_value: float
    p_fisher: float
    p_z: float
    settled: bool
    # The power analysis: trials per policy for the observed difference and for ``effect``.
    power: float
    effect: float
    needed_observed: int | None
    needed_effect: int
    more_observed: int | None
    more_effect: int
    sprt: Sprt
    verdict: str
    # The trials each side counts, and where they came from.
    trial_indices_a: tuple[int, ...] = ()
    trial_indices_b: tuple[int, ...] = ()
    trials_path_a: str = ""
    trials_path_b: str = ""

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["trial_indices_a"] = list(self.trial_indices_a)
        data["trial_indices_b"] = list(self.trial_indices_b)
        return data


def _in_group(log: TrialLog, group: str) -> list[TrialRecord]:
    members = group_conditions(group)
    return [r for r in log.records if r.condition in members]


def _pp(x: float) -> str:
    return f"{100.0 * x:+.0f} pp"


def verdict(c: Comparison) -> str:
    """The comparison in one plain sentence or two."""
    conf = f"{100.0 * (1.0 - c.alpha):.0f}%"
    ci = f"{conf} interval {_pp(c.low)} to {_pp(c.high)}"
    test = "Fisher's exact test" if c.test == "fisher_exact" else "two-proportion z-test"
    rate_a, rate_b = c.successes_a / c.trials_a, c.successes_b / c.trials_b
    head = (
        f"{c.a} {c.successes_a}/{c.trials_a} ({100 * rate_a:.0f}%) vs {c.b} "
        f"{c.successes_b}/{c.trials_b} ({100 * rate_b:.0f}%) in {c.group}: "
    )
    effect = f"{100.0 * c.effect:.0f} pp"
    s = c.sprt
    decided = {
        "a_better": f"{c.a} is better",
        "b_better": f"{c.b} is better",
        "no_difference": f"no difference of {effect} or more",
    }
    trials = f"{s.pairs} {'paired ' if s.paired else ''}trials ({s.discordant} discordant)"
    seq = f" Sequential test (Wald SPRT for {effect}, {100 * c.power:.0f}% power): " + (
        f"no decision after {trials}; keep running trials."
        if s.decision == "continue"
        else f"{decided[s.decision]}, decided after {trials}."
    )
    if c.settled:
        better = c.a if c.difference > 0 else c.b
        return (
            head
            + (
                f"{better} is better; the difference ({_pp(c.difference)}, {ci}) is settled at "
                f"alpha = {c.alpha:g} ({test}, p = {c.p_value:.3g})."
            )
            + seq
        )
    if c.needed_observed is None:
        return (
            head
            + (
                f"no difference observed ({ci}); about {c.more_effect} more trials per policy "
                f"({c.needed_effect} each in all) would detect a {effect} difference at "
                f"{100 * c.power:.0f}% power."
            )
            + seq
        )
    return (
        head
        + (
            f"the difference ({_pp(c.difference)}, {ci}) is inside the sampling error "
            f"({test}, p = {c.p_value:.2g}); about {c.more_observed} more trials per policy "
            f"({c.needed_observed} each in all) would settle a difference of this size at "
            f"{100 * c.power:.0f}% power ({c.needed_effect} each for a {effect} difference)."
        )
        + seq
    )


def compare(
    a: TrialLog,
    b: TrialLog,
    group: str = "overall",
    alpha: float = 0.05,
    effect: float = 0.15,
    power: float = 0.8,
    labels: tuple[str, str] | None = None,
) -> Comparison:
    """Compare two evaluations' success in ``group``."""
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    if not 0.0 < power < 1.0:
        raise ValueError(f"power must be in (0, 1), got {power}")
    name_a, name_b = labels or (a.info.policy.name, b.info.policy.name)
    ca, cb = cell(a.records, group), cell(b.records, group)
    for log, c in ((a, ca), (b, cb)):
        if c.trials == 0:
            raise ValueError(f"{log.path}: no {group} trials to compare")
    ka, na, kb, nb = ca.successes, ca.trials, cb.successes, cb.trials
    low, high = newcombe_interval(ka, na, kb, nb, 1.0 - alpha)
    p_fisher = float(fisher_exact([[ka, na - ka], [kb, nb - kb]]).pvalue)
    p_z = two_proportion_z(ka, na, kb, nb)
    pooled = (ka + kb) / (na + nb)
    small = min(pooled, 1.0 - pooled) * min(na, nb) < 5.0
    p_value = p_fisher if small else p_z
    pa, pb = ka / na, kb / nb
    needed_observed = trials_needed(pa, pb, alpha, power)
    high_rate, low_rate = rates_around(pooled, effect)
    needed_effect = trials_needed(high_rate, low_rate, alpha, power)
    assert needed_effect is not None  # The two rates differ by effect > 0.
    done = min(na, nb)
    odds = (high_rate * (1.0 - low_rate)) / max(low_rate * (1.0 - high_rate), 1e-12)
    result = Comparison(
        a=name_a,
        b=name_b,
        group=group,
        successes_a=ka,
        trials_a=na,
        successes_b=kb,
        trials_b=nb,
        difference=pa - pb,
        low=low,
        high=high,
        alpha=alpha,
        test="fisher_exact" if small else "z",
        p_value=p_value,
        p_fisher=p_fisher,
        p_z=p_z,
        settled=p_value < alpha,
        power=power,
        effect=effect,
        needed_observed=needed_observed,
        needed_effect=needed_effect,
        more_observed=None if needed_observed is None else max(0, needed_observed - done),
        more_effect=max(0, needed_effect - done),
        sprt=sprt(_in_group(a, group), _in_group(b, group), min(odds, 1e6), alpha, power),
        verdict="",
        trial_indices_a=ca.trial_indices,
        trial_indices_b=cb.trial_indices,
        trials_path_a=str(a.path),
        trials_path_b=str(b.path),
    )
    return replace(result, verdict=verdict(result))
