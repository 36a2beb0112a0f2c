"""Evaluation protocols: how many trials of each condition a policy meets, and the fixed,
seeded list of those trials that every policy meets alike.

A protocol (``ProtocolSpec``) names its trials per condition (``r2s2r.spec.conditions``);
``PROTOCOLS`` holds the named ones: ``paper`` (the reference study's 50 trials: 24 nominal,
8 red light, 8 fast belt, 9 novel objects, 1 with all shifts) and ``smoke`` (one trial of each
condition, for quick checks). ``trial_list(protocol, seed)`` is the list: trial ``k`` has its
index, its twin seed (the twin draws its hidden cell, the object and the belt speed from it)
and its condition.

The order of the list is the order trials run in, and it is what ``--trials N`` cuts: the
conditions are interleaved so that every prefix of the list holds them in the protocol's
proportions. Position ``k`` goes to the condition with the largest ``count / (2 a + 1)``,
``a`` being the trials it already holds (Sainte-Laguë / Webster's divisor method, applied
seat by seat); ties are broken by an order of the conditions drawn afresh for each position
from the protocol seed. Hence the first N trials of the list are Webster's apportionment of
N trials among the conditions (the counts scaled by one divisor and rounded; for ``paper``
every condition is within one trial of N x its share at every N), a run stopped early is
never all nominal, and ``--trials N`` runs exactly the first N: a short run is a prefix of
the full one, so it can be extended later.
"""

from __future__ import annotations

import zlib
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from pydantic import Field, field_validator

from r2s2r.spec import Spec
from r2s2r.spec.base import PosInt
from r2s2r.spec.conditions import CONDITIONS
from r2s2r.spec.registry import Registry

# Trial seeds are drawn without repetition from [0, SEED_SPACE).
SEED_SPACE = 1_000_000


class ProtocolError(ValueError):
    """A protocol, protocol seed or trial count that cannot make a trial list."""


class ProtocolSpec(Spec):
    """A named evaluation protocol: trials per condition."""

    name: str = Field(min_length=1)
    # Trials per condition, in the order the report lists them (names in
    # ``r2s2r.spec.conditions``).
    trials: dict[str, PosInt] = Field(min_length=1)
    description: str = ""

    @field_validator("trials")
    @classmethod
    def _known_conditions(cls, trials: dict[str, int]) -> dict[str, int]:
        for name in trials:
            if name not in CONDITIONS:
                raise ValueError(CONDITIONS.unknown(name))
        return trials

    @property
    def total(self) -> int:
        """Trials in the whole list."""
        return sum(self.trials.values())


PROTOCOLS: Registry[ProtocolSpec] = Registry("protocol")
PROTOCOLS.register(
    "paper",
    ProtocolSpec(
        name="paper",
        trials={"nominal": 24, "red_light": 8, "fast_belt": 8, "novel_objects": 9, "all_shifts": 1},
        description="the reference study's 50 trials: 24 nominal and 26 under shifts the "
        "real demonstrations do not cover",
    ),
)
PROTOCOLS.register(
    "smoke",
    ProtocolSpec(
        name="smoke",
        trials={c: 1 for c in ("nominal", "red_light", "fast_belt", "novel_objects", "all_shifts")},
        description="one trial of each condition: a quick check that a policy runs",
    ),
)


def load_protocol(name: str | Path) -> ProtocolSpec:
    """The protocol ``name`` (a name in ``PROTOCOLS``), or one read from a YAML file."""
    if isinstance(name, Path) or str(name).endswith((".yaml", ".yml")):
        return ProtocolSpec.load(Path(name))
    try:
        return PROTOCOLS.get(str(name))
    except KeyError as err:
        raise ProtocolError(f"--protocol: {err} (or the path of a protocol YAML)") from None


@dataclass(frozen=True)
class Trial:
    """One trial of a protocol's list."""

    index: int  # Its place in the list (the same trial for every policy).
    seed: int  # The twin's seed (cell, object and belt speed are drawn from it).
    condition: str


def _generator(protocol: ProtocolSpec, seed: int) -> np.random.Generator:
    # The protocol's name enters the seed, so two protocols' lists differ at the same seed.
    return np.random.default_rng([seed, zlib.crc32(protocol.name.encode())])


def trial_list(protocol: ProtocolSpec, seed: int = 0) -> tuple[Trial, ...]:
    """The protocol's trials for protocol seed ``seed``, in running order (see the module
    docstring for the rule); the same for every policy."""
    if isinstance(seed, bool) or not isinstance(seed, int | np.integer) or seed < 0:
        raise ProtocolError(f"protocol seed: expected an integer >= 0, got {seed!r}")
    rng = _generator(protocol, int(seed))
    names = list(protocol.trials)
    counts = np.array([protocol.trials[n] for n in names], dtype=float)
    taken = np.zeros(len(names), dtype=int)
    seeds = rng.choice(SEED_SPACE, size=protocol.total, replace=False)
    trials = []
    for k in range(protocol.total):
        priority = np.where(taken < counts, counts / (2 * taken + 1), -1.0)
        # Among the conditions of the highest priority, the first in a drawn order.
        order = rng.permutation(len(names))
        best = priority.max()
        pick = next(int(i) for i in order if priority[i] == best)
        taken[pick] += 1
        trials.append(Trial(k, int(seeds[k]), names[pick]))
    return tuple(trials)


def select_trials(trials: tuple[Trial, ...], n: int | None) -> tuple[Trial, ...]:
    """The trials ``--trials n`` runs: the first ``n`` of the list (all with None)."""
    if n is None:
        return trials
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= len(trials):
        raise ProtocolError(
            f"--trials: expected a number of trials from 1 to {len(trials)} (the protocol's "
            f"list), got {n!r}"
        )
    return trials[:n]


def condition_counts(trials: tuple[Trial, ...]) -> dict[str, int]:
    """Trials per condition, in the order the conditions first appear."""
    return dict(Counter(t.condition for t in trials))
