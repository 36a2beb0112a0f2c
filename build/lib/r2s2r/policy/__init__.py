"""Policies: what maps an observation to a chunk of actions (``base.Policy``), learned or
scripted (``plan.PlanPolicy`` follows a generated plan).

The learned policy (``learned.LearnedPolicy``: a flow-matching model, ``model``; trained by
``train.Trainer`` on ``windows.Mixture``; served by ``serve``) needs the ``policy`` extra
(torch); this package's root imports none of it.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from r2s2r.policy.learned import LearnedPolicy


def load(run: str | Path, device: str = "auto") -> LearnedPolicy:
    """The runtime ``Policy`` of a training run folder (its newest checkpoint, EMA weights)."""
    from r2s2r.policy.learned import LearnedPolicy

    return LearnedPolicy.load(Path(run), device=device)
