"""World grounding as a service: capture through a rig, ground, write the grounded world."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from r2s2r.app.jobs import Cancel, ProgressFn, report
from r2s2r.app.rigs import refused, rig_kind
from r2s2r.ground.grounding import Grounding
from r2s2r.ground.sysid import SysIdCfg
from r2s2r.rig.kinds import RigName, RigOptions, open_rig
from r2s2r.spec import Spec, TaskSpec, WorldSpec

STAGES = ("capture", "ground", "write")


class GroundRequest(Spec):
    """Where to capture (or which capture to reuse) and through which rig."""

    out: Path
    rig: RigName = "twin"
    # Twin seed (also seeds the excitation and replay commands).
    seed: int = 0
    # The twin's hidden cell (``TwinRig``'s ``cell``; None: the seed's).
    cell: int | None = None
    # The cell's hardware YAML (hardware rig only).
    config: Path | None = None
    # Ground an existing capture in ``out`` and capture nothing.
    reuse: bool = False
    # How long the arm and hand excitations run (None: the reference's lengths).
    sysid: SysIdCfg | None = None


@dataclass(frozen=True)
class GroundResult:
    grounding: Grounding
    # The grounded WorldSpec, written last and atomically, and the report beside it.
    world_path: Path
    report_path: Path

    def summary(self) -> dict[str, Any]:
        return self.grounding.summary()


def capture(
    request: GroundRequest, progress: ProgressFn | None = None, cancel: Cancel | None = None
) -> tuple[TaskSpec, WorldSpec]:
    """Capture board views, RGB-D of the cell and the excitation recordings into ``out``;
    returns the rig's task and nominal world."""
    from r2s2r.ground.pipeline import capture_all

    kind = rig_kind(request.rig)
    options = RigOptions(
        seed=request.seed, cell=request.cell, native_cameras=True, config=request.config
    )
    with refused():
        rig = open_rig(request.rig, options)
    task, nominal = kind.setting(rig)
    try:
        report(progress, "capture", 0, 1)
        capture_all(
            rig,
            request.out,
            nominal,
            sysid=request.sysid,
            seed=request.seed,
            progress=progress is None,
            check=_check(cancel),
        )
        report(progress, "capture", 1, 1)
    finally:
        rig.close()
    return task, nominal


def ground(
    request: GroundRequest, progress: ProgressFn | None = None, cancel: Cancel | None = None
) -> GroundResult:
    """Capture (unless ``reuse``), calibrate, register and identify; write ``out/grounded.yaml``
    and ``out/report.md``. A cancelled run writes no ``grounded.yaml``."""
    from r2s2r.ground.pipeline import ground_all, write_grounding
    from r2s2r.spec.worlds import load_task, load_world

    if request.reuse:
        task, nominal = load_task("pick_sort"), load_world("nominal")
    else:
        task, nominal = capture(request, progress, cancel)
    report(progress, "ground", 0, 1)
    result = ground_all(request.out, nominal, task, progress=progress is None, check=_check(cancel))
    report(progress, "ground", 1, 1)
    if cancel is not None:
        cancel.check("grounding")
    path = write_grounding(result, request.out)
    report(progress, "write", 1, 1)
    return GroundResult(result, path, request.out / "report.md")


def _check(cancel: Cancel | None) -> Callable[[], None] | None:
    """The pipeline's check between stages: raises ``Cancelled`` once ``cancel`` is set."""
    if cancel is None:
        return None
    return lambda: cancel.check("grounding")
