"""What runs each kind of stage: a registry keyed by ``STAGE_KINDS``, one runner per kind.

A runner makes one stage's outputs in its folder under the study directory and returns its
summary for the ledger (``DIR/study.json``). It is called with the run's context (the study's
config, its directory, the rig, the caller's progress and cancel: whatever the service that
runs the study passes), the stage (``r2s2r.study.plan.Stage``) and the ledger's decision for
it: ``fresh`` (its folder is new or was removed) or ``continue`` (it resumes through its own
service's resume).

The runners call the services above this layer (``r2s2r.app``), so they are written there
and registered in one place: ``stage_registry({"record": ..., "report": ...})`` builds the
registry, and refuses a table that leaves out a kind ``plan`` makes or names one it never
makes, when the module that writes the table is imported rather than part-way through a
study. Looking up a kind not in it names the kind and the known ones ("did you mean").
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from r2s2r.spec.registry import Registry, RegistryError
from r2s2r.study.plan import STAGE_KINDS, Decision, Stage, StageKind

Ctx = TypeVar("Ctx")

# (context, stage, decision) -> the stage's summary for the ledger (see the module).
StageRunner = Callable[[Ctx, Stage, Decision], dict[str, Any]]


def stage_registry(runners: Mapping[StageKind, StageRunner[Ctx]]) -> Registry[StageRunner[Ctx]]:
    """The registry of ``runners``: one for each of ``STAGE_KINDS``, registered in running
    order. A kind without a runner, or a runner for a kind ``plan`` never makes, raises
    ``RegistryError`` naming it."""
    missing = [k for k in STAGE_KINDS if k not in runners]
    extra = sorted(str(k) for k in runners if k not in STAGE_KINDS)
    if missing or extra:
        problems = [f"no runner for stage kind {k!r}" for k in missing]
        problems += [f"a runner for stage kind {k!r}, which no plan makes" for k in extra]
        raise RegistryError(
            f"study stage runners: {'; '.join(problems)} (the kinds: {', '.join(STAGE_KINDS)})"
        )
    registry: Registry[StageRunner[Ctx]] = Registry("stage kind")
    for kind in STAGE_KINDS:
        registry.register(kind, runners[kind])
    return registry


__all__ = ["STAGE_KINDS", "StageKind", "StageRunner", "stage_registry"]
