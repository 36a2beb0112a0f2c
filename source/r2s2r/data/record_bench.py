"""Recording on the twin, end to end: scripted operator, teleop, safety, three views and the
dataset writer (``r2s2r rig bench`` prints these figures with the rig's own)."""

from __future__ import annotations

import logging
import tempfile
import time
from pathlib import Path

import numpy as np

from r2s2r.rig.kinds import RigOptions, open_rig
from r2s2r.rig.twin.views import TwinViewsCfg
from r2s2r.spec.worlds import world_at


def bench_record(
    seconds: float = 3.0,
    take_s: float = 1.0,
    views: TwinViewsCfg | None = None,
    size: int | None = None,
) -> dict[str, float]:
    """Recording on the twin (scripted operator, teleop, three views, dataset writer): its
    real-time factor, and the writer's rates over the time the loop spends in it (frames/s,
    encoded and raw MB/s: the streams are coded on the writer's thread meanwhile, and
    ``save_episode`` waits for the rest); the twin's cameras as ``views`` says (default the
    twin's own)."""
    from r2s2r.data import CameraCfg, DatasetCfg, DatasetWriter
    from r2s2r.data.record import Recorder
    from r2s2r.rig.interfaces import Arm, Hand
    from r2s2r.rig.safety import SafetySupervisor
    from r2s2r.rig.teleop import TeleopSession, TrackerCalibration
    from r2s2r.rig.teleop.operator import ScriptedOperator, TwinEyes

    logging.getLogger("r2s2r.safety").setLevel(logging.ERROR)
    rig = open_rig("twin", RigOptions(views=views, world=world_at(size)))
    cal = TrackerCalibration.twin()
    arms: dict[str, Arm] = dict(rig.arms)
    hands: dict[str, Hand] = dict(rig.hands)
    teleop = TeleopSession(rig, SafetySupervisor(arms, hands, rig.now, rig.embodiment), cal)
    operator = ScriptedOperator(0, TwinEyes(rig), rig.task, rig.nominal, cal)
    shapes = {n: c.read().image.shape for n, c in rig.cameras.items()}
    cameras = tuple(CameraCfg(name=n, height=s[0], width=s[1]) for n, s in shapes.items())
    cfg = DatasetCfg(cameras=cameras, embodiment=rig.embodiment)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "ds"
        with DatasetWriter(root, cfg) as writer:
            rec = Recorder(rig, operator, teleop, writer, rig.task, rig.nominal, max_s=take_s)
            start = time.perf_counter()
            while True:
                rec.take()
                if time.perf_counter() - start >= seconds:
                    break
            wall = time.perf_counter() - start
            frames = writer.num_frames
        size = sum(p.stat().st_size for p in root.rglob("*") if p.is_file())
    rig.close()
    raw = frames * sum(int(np.prod(s)) for s in shapes.values())
    mb = 1024.0 * 1024.0
    return {
        "record_realtime_factor": frames / cfg.fps / wall,
        "record_frames_per_s": frames / wall,
        "dataset_write_frames_per_s": frames / rec.write_s,
        "dataset_write_mb_per_s": size / mb / rec.write_s,
        "dataset_write_raw_mb_per_s": raw / mb / rec.write_s,
    }
