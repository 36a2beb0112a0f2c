"""``r2s2r record``: teleoperated episodes from a rig into a dataset."""

from __future__ import annotations

import logging
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer


class RigKind(StrEnum):
    twin = "twin"
    hardware = "hardware"


def record(
    out: Annotated[Path, typer.Option("--out", help="dataset folder (created or continued)")],
    rig: Annotated[RigKind, typer.Option("--rig", help="the twin or the real cell")] = RigKind.twin,
    episodes: Annotated[int, typer.Option("--episodes", min=1, help="episodes to save")] = 10,
    seed: Annotated[int, typer.Option("--seed", help="twin and operator seed")] = 0,
    realtime: Annotated[
        bool, typer.Option("--realtime", help="pace the twin to the wall clock")
    ] = False,
    scripted: Annotated[
        bool,
        typer.Option(
            "--scripted/--keyboard",
            help="takes run by themselves (scripted operator), or are started, saved and "
            "discarded from the keyboard",
        ),
    ] = True,
    config: Annotated[
        Path | None, typer.Option("--config", help="hardware rig YAML (with --rig hardware)")
    ] = None,
    calibration: Annotated[
        Path | None,
        typer.Option("--calibration", help="tracker calibration YAML (with --rig hardware)"),
    ] = None,
    image_size: Annotated[
        int, typer.Option("--image-size", help="twin camera views, px (0: record no views)")
    ] = 256,
    lossless: Annotated[bool, typer.Option("--lossless", help="store exact RGB video")] = False,
    max_seconds: Annotated[
        float | None, typer.Option("--max-seconds", help="take length limit (default: task's)")
    ] = None,
) -> None:
    """Record teleoperated episodes at 50 Hz: three camera views, proprio, commanded actions,
    timestamps, instruction and success label.

    Keys (with --keyboard): s start, e end+save, f end+save as failed, d discard, r redo,
    q quit. With --scripted the twin's scripted operator drives and takes end on the twin's
    verdict or at the time limit; d / r / q still work.
    """
    from tqdm import tqdm

    from r2s2r.data import CameraCfg, DatasetCfg, DatasetWriter, VideoCfg
    from r2s2r.data.record import KEYS_HELP, Recorder, StdinKeys

    logging.basicConfig(level=logging.INFO if not scripted else logging.WARNING)
    if rig is RigKind.hardware:
        built = _hardware(config, calibration, scripted)
    else:
        built = _twin(seed, realtime, image_size)
    rig_obj, tracker, teleop, task, world, meta = built
    cameras: tuple[CameraCfg, ...] = ()
    if image_size:
        first = {name: cam.read().image for name, cam in rig_obj.cameras.items()}
        cameras = tuple(CameraCfg(n, img.shape[0], img.shape[1]) for n, img in first.items())
    # The twin tracks the presented object, so its datasets carry the object's pose (the
    # environment state that demo adaptation needs); the real cell has no tracker yet.
    cfg = DatasetCfg(
        cameras=cameras,
        embodiment=rig_obj.embodiment,
        video=VideoCfg(lossless=lossless),
        env_state=rig is RigKind.twin,
    )
    keys = None
    try:
        keys = StdinKeys() if not scripted else None
        if keys is not None:
            typer.echo(f"keys: {KEYS_HELP}", err=True)
        with DatasetWriter(out, cfg) as writer:
            recorder = Recorder(
                rig_obj, tracker, teleop, writer, task, world, {**meta, "seed": seed}, max_seconds
            )
            with tqdm(total=episodes, desc="record", unit="ep") as bar:
                takes = recorder.run(episodes, keys, interactive=not scripted, progress=bar)
    finally:
        if keys is not None:
            keys.close()
        if rig is RigKind.hardware:
            rig_obj.close()
    saved = [t for t in takes if t.decision == "saved"]
    ok = sum(t.success for t in saved)
    typer.echo(
        f"{out}: saved {len(saved)} episodes ({ok} successful), "
        f"discarded {len(takes) - len(saved)} takes"
    )


def _twin(seed: int, realtime: bool, image_size: int) -> tuple[Any, ...]:
    from r2s2r.rig.interfaces import Arm, Hand
    from r2s2r.rig.operator import ScriptedOperator, TwinEyes
    from r2s2r.rig.safety import SafetySupervisor
    from r2s2r.rig.teleop import TeleopSession, TrackerCalibration
    from r2s2r.rig.twin import TwinRig
    from r2s2r.spec.worlds import load_world

    world = load_world("nominal")
    size = image_size or 64  # Without views the size is never rendered.
    world = world.replace(render=world.render.model_copy(update={"obs_size": (size, size)}))
    twin = TwinRig(seed=seed, world=world, realtime=realtime)
    calibration = TrackerCalibration.twin()
    arms: dict[str, Arm] = dict(twin.arms)
    hands: dict[str, Hand] = dict(twin.hands)
    sup = SafetySupervisor(arms, hands, twin.now, twin.embodiment)
    teleop = TeleopSession(twin, sup, calibration)
    operator = ScriptedOperator(seed, TwinEyes(twin), twin.task, twin.nominal, calibration)
    return twin, operator, teleop, twin.task, twin.nominal, {"world": "twin", "behavior": "teleop"}


def _hardware(config: Path | None, calibration: Path | None, scripted: bool) -> tuple[Any, ...]:
    if config is None or calibration is None:
        raise typer.BadParameter(
            "--rig hardware needs --config PATH (the cell's hardware YAML) and --calibration "
            "PATH (the tracker calibration YAML: T_cell_tracker, T_wrist_tcp)"
        )
    if scripted:
        raise typer.BadParameter(
            "--rig hardware records a person: use --keyboard (the scripted operator drives "
            "only the twin)"
        )
    try:
        from r2s2r.rig.hardware import HardwareRig
    except ImportError as err:
        typer.echo(
            "error: the hardware rig is not available in this installation "
            f"(r2s2r.rig.hardware.HardwareRig could not be imported: {err})",
            err=True,
        )
        raise typer.Exit(2) from err
    import yaml

    from r2s2r.rig.teleop import TeleopSession, TrackerCalibration
    from r2s2r.spec.worlds import load_task, load_world

    cal = TrackerCalibration.from_dict(yaml.safe_load(calibration.read_text()))
    rig = HardwareRig.from_config(config)
    missing = [s for s in ("left", "right") if s not in rig.trackers]
    if missing:
        rig.close()
        typer.echo(f"error: the hardware rig has no hand tracker for {missing}", err=True)
        raise typer.Exit(2)
    teleop = TeleopSession(rig, rig.supervise(), cal)
    task, world = load_task("pick_sort"), load_world("nominal")
    return rig, rig.trackers, teleop, task, world, {"world": "real", "behavior": "teleop"}
