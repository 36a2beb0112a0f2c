"""Opening a rig by kind: the digital twin, or the real cell from its hardware YAML."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from r2s2r.app.jobs import RequestError
from r2s2r.rig.interfaces import Rig
from r2s2r.spec import TaskSpec, WorldSpec

RigKind = Literal["twin", "hardware"]


def open_rig(
    kind: RigKind,
    seed: int = 0,
    config: Path | None = None,
    native_cameras: bool = False,
    cell: int | None = None,
) -> tuple[Rig, TaskSpec, WorldSpec]:
    """The rig, its task and its nominal world. ``native_cameras``: the twin's cameras
    deliver their own resolution (for calibration) instead of the observation size;
    ``cell``: the twin's hidden cell (``TwinRig``; None: the seed's)."""
    from r2s2r.spec.worlds import load_task, load_world

    if kind == "twin":
        from r2s2r.rig.twin import TwinRig

        twin = TwinRig(seed=seed, native_cameras=native_cameras, cell=cell)
        return twin, twin.task, twin.nominal
    if kind != "hardware":
        raise RequestError(f"rig: expected twin or hardware, got {kind!r}")
    if config is None:
        raise RequestError("--rig hardware needs --config PATH (the cell's hardware YAML)")
    from r2s2r.rig.hardware import HardwareRig

    return HardwareRig.from_config(config), load_task("pick_sort"), load_world("nominal")
