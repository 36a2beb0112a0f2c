"""The kinds of rig by name (``RIGS``): how each one opens and what it can do.

Everything that opens a rig goes through ``open_rig(kind, options)``, and everything that
depends on the kind asks its entry (``RIGS.get(kind)``) what it can do, never its name:

- ``truth``: it holds a hidden truth: it judges its own episodes, tracks the object it
  presents (what the scripted operator, the planner and a dataset's environment state read)
  and draws its cell from a seed (``cell``, ``condition``); the twin;
- ``operator``: a person at the cell records its demos, sets each trial up and judges it by
  key, teleoperating through the rig's trackers; the real cell;
- ``simulated``: nothing physical moves: faults may be injected into it;
- ``realtime``: it runs on the wall clock whatever is asked (no lockstep);
- ``parallel``: many can be open at once (trials in worker processes or on Ray).

``check`` refuses options a kind cannot open with before anything opens (the real cell
without its hardware YAML, or in an installation without its drivers).

Each kind's rig is imported only when one opens: the real cell's drivers are not loaded to
run the twin.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, overload

from pydantic import AfterValidator, WithJsonSchema

from r2s2r.spec.registry import Registry

if TYPE_CHECKING:
    from r2s2r.rig.hardware import HardwareRig
    from r2s2r.rig.interfaces import Rig
    from r2s2r.rig.safety import SafetySupervisor
    from r2s2r.rig.twin import TwinRig
    from r2s2r.rig.twin.views import TwinViewsCfg
    from r2s2r.spec import TaskSpec, WorldSpec


class RigError(ValueError):
    """A rig that cannot open as asked: a missing hardware YAML, an SDK not installed."""


@dataclass(frozen=True)
class RigOptions:
    """What a rig opens with; each kind reads the options that apply to it."""

    # The twin's seed: its episodes and readings, and its hidden cell unless ``cell`` is set.
    seed: int = 0
    # The twin's hidden cell (its truth and flaws) apart from the seed (None: the seed's).
    cell: int | None = None
    # The twin's nominal world (its observation size is the size of the views delivered).
    world: str | Path | WorldSpec = "nominal"
    # The condition the twin's task and hidden world are shifted by.
    condition: str = "nominal"
    # Pace the twin to the wall clock (else it runs as fast as the machine allows).
    realtime: bool = False
    # The twin's cameras deliver their own resolution (for calibration captures).
    native_cameras: bool = False
    # The twin without its flaws (only the hidden world's parameters differ from nominal).
    ideal: bool = False
    # How the twin's views are made (None: ``TwinCfg``'s default).
    views: TwinViewsCfg | None = None
    # The real cell's hardware YAML (``HardwareSpec``).
    config: Path | None = None
    # How the real cell asks its operator (to put an object on the belt, to set the belt).
    prompt: Callable[[str], str] = input


@dataclass(frozen=True)
class RigKind:
    """One kind of rig: how it opens and what it can do (see the module)."""

    name: str
    # Opens the rig (after ``check``).
    open: Callable[[RigOptions], Rig]
    # Refuses options it cannot open with (``RigError``), before anything opens.
    check: Callable[[RigOptions], None]
    # A safety supervisor over the rig's arms and hands, as the kind runs one.
    supervise: Callable[[Rig], SafetySupervisor]
    # The task and the nominal world the rig's episodes run under.
    setting: Callable[[Rig], tuple[TaskSpec, WorldSpec]]
    # What its recorded episodes call their world ("twin"; "real" for the real cell).
    world: str
    truth: bool
    operator: bool
    simulated: bool
    realtime: bool
    parallel: bool


def _open_twin(options: RigOptions) -> TwinRig:
    from r2s2r.rig.twin import TwinRig

    # TwinRig's keywords are TwinCfg's fields: it builds and validates the config once.
    return TwinRig(
        seed=options.seed,
        world=options.world,
        realtime=options.realtime,
        native_cameras=options.native_cameras,
        condition=options.condition,
        ideal=options.ideal,
        views=options.views,
        cell=options.cell,
    )


def _supervise_twin(rig: Rig) -> SafetySupervisor:
    """The runtime ticks the twin's supervisor in its own loop: no thread."""
    from r2s2r.rig.safety import SafetySupervisor

    return SafetySupervisor(dict(rig.arms), dict(rig.hands), rig.now, rig.embodiment)


def _twin_setting(rig: Rig) -> tuple[TaskSpec, WorldSpec]:
    """The twin's own task (shifted by its condition) and nominal world."""
    from r2s2r.rig.twin import TwinRig

    if not isinstance(rig, TwinRig):
        raise RigError(f"expected the twin, got {type(rig).__name__}")
    return rig.task, rig.nominal


def _check_twin(options: RigOptions) -> None:
    """The twin opens with any options."""


def _check_hardware(options: RigOptions) -> None:
    if options.config is None:
        raise RigError("--rig hardware needs --config PATH (the cell's hardware YAML)")
    try:
        import r2s2r.rig.hardware  # noqa: F401
    except ImportError as err:
        raise RigError(
            "the hardware rig is not available in this installation "
            f"(r2s2r.rig.hardware.HardwareRig could not be imported: {err})"
        ) from err


def _open_hardware(options: RigOptions) -> HardwareRig:
    from r2s2r.rig.hardware import HardwareRig

    assert options.config is not None  # ``open_rig`` checked the options.
    try:
        return HardwareRig.from_config(options.config, options.prompt)
    except ImportError as err:  # A driver's SDK (the extra to install is in the message).
        raise RigError(f"--rig hardware: {err}") from err


def _supervise_hardware(rig: Rig) -> SafetySupervisor:
    """The real cell's supervisor watches its cameras and ticks from a timer thread."""
    from r2s2r.rig.hardware import HardwareRig

    if not isinstance(rig, HardwareRig):
        raise RigError(f"expected the real cell, got {type(rig).__name__}")
    return rig.supervise()


def _hardware_setting(rig: Rig) -> tuple[TaskSpec, WorldSpec]:
    """The task the real cell is set up for and the nominal world."""
    from r2s2r.spec.worlds import load_task, load_world

    return load_task("pick_sort"), load_world("nominal")


RIGS: Registry[RigKind] = Registry("rig")
RIGS.register(
    "twin",
    RigKind(
        name="twin",
        open=_open_twin,
        check=_check_twin,
        supervise=_supervise_twin,
        setting=_twin_setting,
        world="twin",
        truth=True,
        operator=False,
        simulated=True,
        realtime=False,
        parallel=True,
    ),
)
RIGS.register(
    "hardware",
    RigKind(
        name="hardware",
        open=_open_hardware,
        check=_check_hardware,
        supervise=_supervise_hardware,
        setting=_hardware_setting,
        world="real",
        truth=False,
        operator=True,
        simulated=False,
        realtime=True,
        parallel=False,
    ),
)


@overload
def open_rig(kind: Literal["twin"], options: RigOptions | None = None) -> TwinRig: ...
@overload
def open_rig(kind: str, options: RigOptions | None = None) -> Rig: ...
def open_rig(kind: str, options: RigOptions | None = None) -> Any:
    """The rig of ``kind`` opened with ``options`` (default ``RigOptions()``); an unknown
    kind names the known ones, and a kind that cannot open as asked raises ``RigError``."""
    entry = RIGS.get(kind)
    options = options if options is not None else RigOptions()
    entry.check(options)
    return entry.open(options)


def _known(name: str) -> str:
    RIGS.get(name)  # ``RegistryError`` (a ``ValueError``): the known kinds and the nearest.
    return name


# A rig kind's name in a request or a config, checked against ``RIGS``.
RigName = Annotated[
    str, AfterValidator(_known), WithJsonSchema({"type": "string", "enum": list(RIGS.names())})
]

__all__ = ["RIGS", "RigError", "RigKind", "RigName", "RigOptions", "open_rig"]
