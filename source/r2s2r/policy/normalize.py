"""Quantile normalization of state and (internal) action vectors, as pi0.5 does it, numpy only.

Statistics are fitted once per dataset mixture (``fit_stats``) and stored in the checkpoint
as flat arrays (``NormStats.to_arrays``: keys ``state.q01``, ``action.q99``, ...).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from r2s2r.policy.base import PolicyError

if TYPE_CHECKING:
    from r2s2r.policy.actions import ActionCodec
    from r2s2r.policy.windows import Mixture

# A dimension whose q01..q99 range is below this is treated as constant (see QuantileNorm).
MIN_RANGE = 1e-4


@dataclass(frozen=True)
class QuantileNorm:
    """Per-dimension quantiles q01 and q99 (D,) float64 mapping [q01, q99] to [-1, 1]:
    ``(x - q01) / (q99 - q01 + 1e-6) * 2 - 1``.

    A dimension whose range ``q99 - q01`` is below ``MIN_RANGE`` (near-constant: a joint
    that never moved, the arm that does not sort) carries nothing to learn: it normalizes to
    0 and comes back as its midpoint whatever the model says there (within ``MIN_RANGE / 2``
    of every value the data held). Scaled by its tiny range it would blow noise up; left
    unscaled (``x - q01``) it handed the model's error back in robot units (a 0.3 error
    moved the idle arm's target by 0.3 m)."""

    q01: np.ndarray
    q99: np.ndarray

    def __post_init__(self) -> None:
        q01, q99 = np.asarray(self.q01, np.float64), np.asarray(self.q99, np.float64)
        if q01.ndim != 1 or q01.shape != q99.shape:
            raise PolicyError(
                f"quantiles: expected q01 and q99 of one shape (D,), got {q01.shape}, {q99.shape}"
            )
        if not (np.isfinite(q01).all() and np.isfinite(q99).all()):
            raise PolicyError("quantiles: q01 and q99 must be finite")
        if (q99 < q01).any():
            bad = int(np.argmax(q99 < q01))
            raise PolicyError(f"quantiles: dimension {bad} has q99 {q99[bad]} < q01 {q01[bad]}")
        object.__setattr__(self, "q01", q01)
        object.__setattr__(self, "q99", q99)

    @property
    def dim(self) -> int:
        return int(self.q01.shape[0])

    @property
    def constant(self) -> np.ndarray:
        """(D,) bool: the near-constant dimensions (normalized to 0, see the class)."""
        return (self.q99 - self.q01) < MIN_RANGE

    @classmethod
    def fit(cls, x: np.ndarray) -> QuantileNorm:
        """The 1% and 99% quantiles of samples ``x`` (N, D)."""
        x = np.asarray(x, dtype=np.float64)
        if x.ndim != 2 or len(x) == 0:
            raise PolicyError(f"fit: expected samples (N, D) with N >= 1, got shape {x.shape}")
        q01, q99 = np.quantile(x, [0.01, 0.99], axis=0)
        return cls(q01, q99)

    def _check(self, x: np.ndarray) -> None:
        if x.shape[-1:] != (self.dim,):
            raise PolicyError(f"normalize: expected shape (..., {self.dim}), got {x.shape}")

    def normalize(self, x: np.ndarray) -> np.ndarray:
        """(..., D) -> (..., D) float32, [q01, q99] -> [-1, 1]."""
        x = np.asarray(x, dtype=np.float64)
        self._check(x)
        scaled = (x - self.q01) / (self.q99 - self.q01 + 1e-6) * 2.0 - 1.0
        return np.where(self.constant, 0.0, scaled).astype(np.float32)

    def unnormalize(self, y: np.ndarray) -> np.ndarray:
        """The inverse of ``normalize``: (..., D) -> (..., D) float64."""
        y = np.asarray(y, dtype=np.float64)
        self._check(y)
        scaled = (y + 1.0) / 2.0 * (self.q99 - self.q01 + 1e-6) + self.q01
        return np.where(self.constant, (self.q01 + self.q99) / 2.0, scaled)

    def to_arrays(self, prefix: str) -> dict[str, np.ndarray]:
        """``{prefix.q01, prefix.q99}`` float64 arrays (for safetensors)."""
        return {f"{prefix}.q01": self.q01.copy(), f"{prefix}.q99": self.q99.copy()}

    @classmethod
    def from_arrays(cls, d: dict[str, np.ndarray], prefix: str) -> QuantileNorm:
        """The inverse of ``to_arrays``; a missing key is a clear error."""
        missing = [k for k in (f"{prefix}.q01", f"{prefix}.q99") if k not in d]
        if missing:
            raise PolicyError(f"normalization stats: missing {missing} (have {sorted(d)})")
        return cls(np.asarray(d[f"{prefix}.q01"]), np.asarray(d[f"{prefix}.q99"]))


@dataclass(frozen=True)
class NormStats:
    """The state and the (internal, encoded) action normalizations of one policy."""

    state: QuantileNorm
    action: QuantileNorm

    def to_arrays(self) -> dict[str, np.ndarray]:
        return {**self.state.to_arrays("state"), **self.action.to_arrays("action")}

    @classmethod
    def from_arrays(cls, d: dict[str, np.ndarray]) -> NormStats:
        return cls(QuantileNorm.from_arrays(d, "state"), QuantileNorm.from_arrays(d, "action"))


def fit_stats(
    mixture: Mixture, codec: ActionCodec, max_windows: int = 20000, seed: int = 0
) -> NormStats:
    """Statistics of a mixture: the state over every sampled frame of every dataset in it; the
    actions over up to ``max_windows`` windows drawn without replacement (uniformly over all
    frames of all its datasets, from ``seed``), encoded by ``codec`` relative to each window's
    current state, pad entries excluded."""
    datasets = mixture.datasets
    states = np.concatenate([d.states() for d in datasets])
    sizes = np.array([len(d) for d in datasets])
    total = int(sizes.sum())
    rng = np.random.default_rng(seed)
    picks = np.arange(total) if total <= max_windows else rng.choice(total, max_windows, False)
    picks = np.sort(picks)
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    chunks = []
    for k, d in enumerate(datasets):
        mine = picks[(picks >= offsets[k]) & (picks < offsets[k + 1])] - offsets[k]
        for i in mine:
            w = d.low_window(int(i))
            encoded = codec.encode(w["actions"], w["state"][-1])
            chunks.append(encoded[~w["action_is_pad"]])
    return NormStats(QuantileNorm.fit(states), QuantileNorm.fit(np.concatenate(chunks)))
