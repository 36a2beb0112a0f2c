"""``r2s2r rig bench``: the twin's real-time factor and the retargeting rate and accuracy."""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from r2s2r.rig.retarget import TIPS, HandKinematics, Retargeter
from r2s2r.rig.twin import TwinRig
from r2s2r.sim.bench import machine


def bench_twin(seconds: float = 3.0, cameras: bool = True) -> dict[str, float]:
    """Simulated seconds per wall second, reading all three views every period if asked."""
    rig = TwinRig(seed=0)
    arm = rig.arms["left"]
    target = arm.state().tcp_pose.copy()
    start, sim0 = time.perf_counter(), rig.now()
    while time.perf_counter() - start < seconds:
        target[1] += 0.0005
        arm.send_tcp_target(target)
        rig.step()
        if cameras:
            for cam in rig.cameras.values():
                cam.read()
    wall = time.perf_counter() - start
    return {"twin_realtime_factor" + ("" if cameras else "_no_cameras"): (rig.now() - sim0) / wall}


def bench_retarget(frames: int = 500, seed: int = 0) -> dict[str, float]:
    """Retargeting rate on one core and fingertip error on keypoints of known hand poses."""
    kin = HandKinematics()
    rng = np.random.default_rng(seed)
    keys = [rng.uniform(kin.lo, kin.hi) for _ in range(6)]
    per = max(2, frames // 5)
    traj = np.concatenate([np.linspace(a, b, per) for a, b in zip(keys, keys[1:], strict=False)])
    keypoints = [kin.forward(q) for q in traj]
    retargeter = Retargeter()
    start = time.perf_counter()
    solutions = [retargeter.solve(kp) for kp in keypoints]
    rate = len(keypoints) / (time.perf_counter() - start)
    errors = [
        np.linalg.norm(kin.forward(q)[list(TIPS)] - kp[list(TIPS)], axis=1).max()
        for q, kp in zip(solutions, keypoints, strict=True)
    ]
    return {
        "retarget_hz": rate,
        "retarget_tip_err_mm_median": 1e3 * float(np.median(errors)),
        "retarget_tip_err_mm_p95": 1e3 * float(np.percentile(errors, 95)),
    }


def run_bench(seconds: float = 3.0) -> dict[str, Any]:
    out: dict[str, Any] = {"machine": machine()}
    out.update(bench_twin(seconds, cameras=True))
    out.update(bench_twin(seconds / 2, cameras=False))
    out.update(bench_retarget())
    return out
