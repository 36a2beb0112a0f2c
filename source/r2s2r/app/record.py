"""Recording teleoperated demonstrations from a rig into a dataset, as a service."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from r2s2r.app.jobs import Cancel, ProgressFn, RequestError, report
from r2s2r.app.live import RigSnapshot, snapshot
from r2s2r.app.rigs import refused, rig_kind
from r2s2r.data.record import FrameRecord, KeySource, QueuedKeys, Take
from r2s2r.rig.kinds import RigName, RigOptions, open_rig
from r2s2r.spec import Spec

log = logging.getLogger("r2s2r.app")
# What a caller drives and reads takes with (a GUI pushes keys into ``QueuedKeys``).
__all__ = ["FrameRecord", "KeySource", "QueuedKeys", "RecordRequest", "RecordResult", "record"]


class RecordRequest(Spec):
    """What to record, and from which rig."""

    out: Path
    rig: RigName = "twin"
    # Episodes to save (discarded takes do not count).
    episodes: int = 10
    # Twin and scripted-operator seed.
    seed: int = 0
    # The scripted operator's own seed (its per-take style), where it differs from ``seed``:
    # the same twin and instances with another operator's takes (default: ``seed``).
    operator_seed: int | None = None
    # The twin's hidden cell (``TwinRig``'s ``cell``; None: the seed's).
    cell: int | None = None
    # Pace the twin to the wall clock.
    realtime: bool = False
    # Takes run by themselves (the twin's scripted operator), or are driven from keys.
    scripted: bool = True
    # The cell's hardware YAML and the tracker calibration YAML (hardware rig only).
    config: Path | None = None
    calibration: Path | None = None
    # Twin camera views, px (0: record no views).
    image_size: int = 256
    lossless: bool = False
    # Take length limit in seconds (default: the task's episode length).
    max_seconds: float | None = None


@dataclass(frozen=True)
class RecordResult:
    out: Path
    takes: list[Take]

    @property
    def saved(self) -> list[Take]:
        return [t for t in self.takes if t.decision == "saved"]

    @property
    def successful(self) -> int:
        return sum(t.success for t in self.saved)

    @property
    def discarded(self) -> int:
        return len(self.takes) - len(self.saved)


class _CancelKeys:
    """Keys from ``inner`` (or none), with ``q`` (discard the take and stop) on cancel."""

    def __init__(self, inner: KeySource | None, cancel: Cancel) -> None:
        self.inner, self.cancel = inner, cancel

    def poll(self) -> str | None:
        if self.cancel.cancelled:
            return "q"
        return self.inner.poll() if self.inner is not None else None


class _Bar:
    """The recorder's progress hooks (``update``, ``set_postfix``) as progress reports."""

    def __init__(self, progress: ProgressFn | None, total: int) -> None:
        self.progress, self.total, self.saved = progress, total, 0

    def update(self, n: int) -> None:
        self.saved += n
        report(self.progress, "record", self.saved, self.total)

    def set_postfix(self, **fields: Any) -> None:
        text = ", ".join(f"{k}={v}" for k, v in fields.items())
        report(self.progress, "record", self.saved, self.total, text)


def record(
    request: RecordRequest,
    keys: KeySource | None = None,
    progress: ProgressFn | None = None,
    cancel: Cancel | None = None,
    on_frame: Callable[[FrameRecord, RigSnapshot], None] | None = None,
    estop: Any = None,
) -> RecordResult:
    """Record ``request.episodes`` episodes (``keys`` drive the takes unless scripted);
    cancelling discards the take in progress and keeps every saved episode. ``on_frame``
    gets every recorded frame with the rig's devices read at it (live views and plots);
    ``estop`` (an ``EmergencyStop``) stops the arms from any thread."""
    from r2s2r.data import CameraCfg, DatasetCfg, DatasetWriter, VideoCfg
    from r2s2r.data.record import Recorder

    check_request(request)
    if not request.scripted and keys is None:
        raise RequestError("recording with --keyboard needs a key source")
    kind = rig_kind(request.rig)
    rig, tracker, teleop, task, world, meta = (
        _person(request) if kind.operator else _scripted(request)
    )
    try:
        cameras: tuple[CameraCfg, ...] = ()
        if request.image_size:
            first = {name: cam.read().image for name, cam in rig.cameras.items()}
            cameras = tuple(
                CameraCfg(name=n, height=i.shape[0], width=i.shape[1]) for n, i in first.items()
            )
        # The twin tracks the presented object, so its datasets carry the object's pose (the
        # environment state that demo adaptation needs); the real cell has no tracker yet.
        cfg = DatasetCfg(
            cameras=cameras,
            embodiment=rig.embodiment,
            video=VideoCfg(lossless=request.lossless),
            env_state=kind.truth,
        )
        source = _CancelKeys(keys, cancel) if cancel is not None else keys
        if estop is not None:
            estop.attach(teleop.sup)
        hook = None
        if on_frame is not None:
            sup = teleop.sup

            def hook(frame: FrameRecord) -> None:
                on_frame(frame, snapshot(rig, sup, frame.images or None))

        with DatasetWriter(request.out, cfg) as writer:
            recorder = Recorder(
                rig,
                tracker,
                teleop,
                writer,
                task,
                world,
                {**meta, "seed": request.seed},
                request.max_seconds,
                on_frame=hook,
            )
            bar = _Bar(progress, request.episodes)
            takes = recorder.run(
                request.episodes, source, interactive=not request.scripted, progress=bar
            )
    finally:
        rig.close()
    return RecordResult(request.out, takes)


def _scripted(request: RecordRequest) -> tuple[Any, ...]:
    """The twin, its supervisor and its scripted operator as the tracker."""
    from r2s2r.rig.teleop import TeleopSession, TrackerCalibration
    from r2s2r.rig.teleop.operator import ScriptedOperator, TwinEyes
    from r2s2r.rig.twin import TwinRig
    from r2s2r.spec.worlds import world_at

    kind = rig_kind(request.rig)
    world = world_at(request.image_size or 64)  # Without views the size is never rendered.
    options = RigOptions(
        seed=request.seed, world=world, realtime=request.realtime, cell=request.cell
    )
    with refused():
        twin = open_rig(request.rig, options)
    assert isinstance(twin, TwinRig)  # The scripted operator sees the twin's object.
    calibration = TrackerCalibration.twin()
    teleop = TeleopSession(twin, kind.supervise(twin), calibration)
    op_seed = request.seed if request.operator_seed is None else request.operator_seed
    task, nominal = kind.setting(twin)
    operator = ScriptedOperator(op_seed, TwinEyes(twin), task, nominal, calibration)
    meta = {"world": kind.world, "behavior": "teleop"}
    return twin, operator, teleop, task, nominal, meta


def check_request(request: RecordRequest) -> None:
    """Refuse a request that cannot run, before anything is opened."""
    if not rig_kind(request.rig).operator:
        return  # The scripted operator records.
    if request.config is None or request.calibration is None:
        raise RequestError(
            f"--rig {request.rig} needs --config PATH (the cell's hardware YAML) and "
            "--calibration PATH (the tracker calibration YAML: T_cell_tracker, T_wrist_tcp)"
        )
    if request.scripted:
        raise RequestError(
            f"--rig {request.rig} records a person: use --keyboard (the scripted operator "
            "drives only the twin)"
        )


def _person(request: RecordRequest) -> tuple[Any, ...]:
    """The real cell, its supervisor and the gloves a person records through."""
    assert request.config is not None and request.calibration is not None
    options = RigOptions(config=request.config)
    kind = rig_kind(request.rig, options)  # Refused before the calibration is read.
    import yaml

    from r2s2r.rig.teleop import TeleopSession, TrackerCalibration

    cal = TrackerCalibration.from_dict(yaml.safe_load(request.calibration.read_text()))
    with refused():
        rig = open_rig(request.rig, options)
    missing = [s for s in ("left", "right") if s not in rig.trackers]
    if missing:
        rig.close()
        raise RequestError(f"the {request.rig} rig has no hand tracker for {missing}")
    teleop = TeleopSession(rig, kind.supervise(rig), cal)
    task, world = kind.setting(rig)
    return rig, rig.trackers, teleop, task, world, {"world": kind.world, "behavior": "teleop"}
