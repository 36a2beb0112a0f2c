"""World grounding end to end: capture through a rig, then calibrate, register and identify,
and write ``grounded.yaml`` with a report.

``capture_all`` writes plain files under ``DIR`` (``cameras/``, ``scene/``, ``sysid/``,
``replay/``);
``ground_all`` reads them (a user's own captures in the same layout work too), and writes
``DIR/grounded.yaml`` only once every step has succeeded, atomically, so a failed run never
leaves a partial world behind.
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import cv2

from r2s2r.geometry.board import Checkerboard, parse_board
from r2s2r.ground.board_capture import capture_cameras
from r2s2r.ground.cameras import ground_cameras, grounded_cameras
from r2s2r.ground.grounding import Grounding
from r2s2r.ground.replay import Replay, capture_replay, compare_replay
from r2s2r.ground.report import write_report
from r2s2r.ground.scene import capture_scene, ground_scene
from r2s2r.ground.sysid import SysIdCfg, SysIdRecordings, identify, record_sysid
from r2s2r.rig.interfaces import Rig
from r2s2r.rig.safety import SafetySupervisor
from r2s2r.spec import TaskSpec, WorldSpec

log = logging.getLogger("r2s2r.ground")

# The board the twin's presenter holds (and the default for a real cell's captures).
DEFAULT_BOARD = "checkerboard:9x6:0.04"


def capture_all(
    rig: Rig,
    out: Path,
    nominal: WorldSpec,
    board: Checkerboard | None = None,
    sysid: SysIdCfg | None = None,
    seed: int = 0,
    progress: bool = True,
    check: Callable[[], None] | None = None,
) -> Path:
    """Capture everything grounding needs through ``rig`` into ``out``: board views of every
    camera (wrist views with TCP poses), RGB-D of the cell, and the arm and hand excitation
    recordings. ``nominal`` is the CAD world (to aim the wrist cameras). Every arm and hand
    command goes through one safety supervisor. ``check`` is called between the stages and
    stops the capture by raising (``capture.json``, written last, is then missing)."""
    check = check or _go_on
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    board = board or parse_board(DEFAULT_BOARD)
    supervisor = SafetySupervisor(rig.arms, rig.hands, rig.now, rig.embodiment)
    start = time.perf_counter()
    rig.conveyor.set_speed(0.0)
    check()
    capture_cameras(rig, supervisor, out, board, nominal, seed=seed, progress=progress)
    check()
    capture_scene(rig, out, progress=progress)
    check()
    rig.present()
    rig.conveyor.set_speed(0.0)

    def step() -> None:
        rig.step()

    recordings = record_sysid(supervisor, step, sysid or SysIdCfg(), progress=progress)
    (out / "sysid").mkdir(exist_ok=True)
    recordings.save(out / "sysid")
    check()
    capture_replay(rig, supervisor, out, seed=seed + 7)
    meta = {
        "board": str(board),
        "seconds": time.perf_counter() - start,
        "safety_events": [f"{e.device}: {e.kind}: {e.detail}" for e in supervisor.events],
    }
    (out / "capture.json").write_text(json.dumps(meta, indent=1))
    return out


def ground_all(
    capture: Path,
    nominal: WorldSpec,
    task: TaskSpec,
    progress: bool = True,
    check: Callable[[], None] | None = None,
) -> Grounding:
    """Calibrate the cameras, register the scene with the calibrated head camera and identify
    the arm and hand models, from a ``capture_all`` folder (``check`` as in ``capture_all``)."""
    check = check or _go_on
    capture = Path(capture)
    start = time.perf_counter()
    # Read the recordings first: a missing or damaged file stops the run before the slow steps.
    recordings = SysIdRecordings.load(capture / "sysid")
    replay = Replay.load(capture)
    log.info("calibrating cameras")
    with opencv_threads(1):
        cams = ground_cameras(capture, nominal, progress=progress)
    world = grounded_cameras(nominal, cams)
    check()
    log.info("registering the scene")
    scene = ground_scene(capture, task, world)
    world = scene.registration.update_world(world)
    check()
    log.info("identifying the arm and hand models")
    report = identify(recordings, nominal, progress=progress)
    world = report.world(world).replace(name="grounded")
    check()
    log.info("replaying the rig's commands in the nominal and grounded sims")
    compare = compare_replay(task, {"nominal": nominal, "grounded": world}, replay)
    return Grounding(world, nominal, cams, scene, report, compare, time.perf_counter() - start)


@contextlib.contextmanager
def opencv_threads(n: int) -> Iterator[None]:
    """Run OpenCV's parallel loops on ``n`` threads, then restore the count. On more than one
    thread the camera calibrations are not reproducible to the bit: the same capture, grounded
    twice, gave focal lengths that differ in the ninth digit (and so a grounded world, and the
    datasets generated in it, that differ); on one thread it grounds to the same world every
    time, at no measurable cost in time."""
    before = cv2.getNumThreads()
    cv2.setNumThreads(n)
    try:
        yield
    finally:
        cv2.setNumThreads(before)


def _go_on() -> None:
    """The check of a run nobody stops."""


def write_grounding(result: Grounding, out: Path) -> Path:
    """Write ``out/report.md`` with its plots, ``out/grounding.json``, and last (atomically)
    ``out/grounded.yaml``."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    write_report(result, out)
    (out / "grounding.json").write_text(json.dumps(result.summary(), indent=1, default=float))
    result.world.save(out / "grounded.yaml")
    return out / "grounded.yaml"
