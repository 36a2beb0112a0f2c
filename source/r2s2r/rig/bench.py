"""``r2s2r rig bench``: the twin's real-time factor, the retargeting rate and accuracy, and
the recording real-time factor and dataset write throughput."""

from __future__ import annotations

import logging
import os
import time
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
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


def run_operator_episode(seed: int) -> tuple[str, bool]:
    """One scripted-operator episode on a twin of ``seed`` through teleop and the safety
    supervisor, without cameras; returns the object's status and whether it succeeded."""
    return _operator_episode(seed)[1:]


def _operator_episode(seed: int) -> tuple[str, str, bool]:
    """``run_operator_episode`` with the presented object's name first."""
    from r2s2r.rig.operator import ScriptedOperator, TwinEyes
    from r2s2r.rig.safety import SafetySupervisor
    from r2s2r.rig.teleop import TeleopSession, TrackerCalibration
    from r2s2r.spec.worlds import sorting_arm

    logging.getLogger("r2s2r.safety").setLevel(logging.ERROR)
    rig = TwinRig(seed=seed)
    cal = TrackerCalibration.twin()
    sup = SafetySupervisor(rig.arms, rig.hands, rig.now, rig.embodiment)
    teleop = TeleopSession(rig, sup, cal)
    operator = ScriptedOperator(seed, TwinEyes(rig), rig.task, rig.nominal, cal)
    name = rig.presenter.present()
    side = sorting_arm(rig.task, rig.nominal, name)
    teleop.begin(side)
    operator.begin(name, side)
    status, success = "pending", False
    for _ in range(int(rig.task.episode_s * rig.task.control_hz)):
        teleop.step(operator.read())
        sup.tick()
        rig.step()
        status, success, done = rig.episode_outcome()
        if done:
            break
    return name, status, success


def bench_operator(seeds: int, workers: int | None = None) -> dict[str, Any]:
    """The scripted operator's success rate on seeds 0 .. seeds - 1 (nominal conditions),
    overall and per object; the episodes run in ``workers`` processes (one per core)."""
    workers = workers or os.cpu_count() or 1
    with ProcessPoolExecutor(workers, mp_context=get_context("spawn")) as pool:
        outcomes = list(pool.map(_operator_episode, range(seeds)))
    by_object: dict[str, list[bool]] = {}
    for name, _, success in outcomes:
        by_object.setdefault(name, []).append(success)
    return {
        "operator_seeds": float(seeds),
        "operator_success_rate": sum(ok for *_, ok in outcomes) / seeds,
        "operator_success_by_object": {
            name: f"{sum(oks)}/{len(oks)}" for name, oks in sorted(by_object.items())
        },
    }


def run_bench(seconds: float = 3.0, operator_seeds: int = 0) -> dict[str, Any]:
    out: dict[str, Any] = {"machine": machine()}
    out.update(bench_twin(seconds, cameras=True))
    out.update(bench_twin(seconds / 2, cameras=False))
    out.update(bench_retarget())
    if operator_seeds:
        out.update(bench_operator(operator_seeds))
    return out
