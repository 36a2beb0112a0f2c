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

from r2s2r.rig.kinds import RigOptions, open_rig
from r2s2r.rig.teleop.retarget import TIPS, HandKinematics, Retargeter
from r2s2r.rig.twin.views import TwinViewsCfg
from r2s2r.sim.bench import machine
from r2s2r.sim.render import SceneRenderer
from r2s2r.spec.worlds import world_at

# The twin's camera paths, one way added at a time, each measured against the raw renderer
# in the same run: the reference, the one-render blur, cameras at 30 frames/s, the views in
# a worker process pipelined with the physics, the fisheye wrist cameras' wide views rendered
# at the views' density rather than the world's, the model's sites (markers no real camera
# sees) left out (the default before this step: ``PREVIOUS_DEFAULT``), the arms' and hands'
# primitives drawn as meshes, then two periods of latency, one worker process per camera, and
# the static geoms merged by colour with the stored objects left out (the default; ``_cell``).
# At the default 256 px views the matched shadow map is the world's own (512),
# so it is no separate step here. Options that are not the default follow: the wrist cameras
# at 15 frames/s, and one worker process for all three cameras.
FIRST_FAST = TwinViewsCfg(
    wide_oversample=None, sites=True, lean_geoms=False, lean_cell=False, workers=1, latency=1
)
PREVIOUS_DEFAULT = FIRST_FAST.replace(wide_oversample=TwinViewsCfg().wide_oversample, sites=False)
# The default before the steps for small views: the meshes and MuJoCo's own shapes
# tessellated for the delivered size, still frames left unblurred, the workers rasterizing in
# their own thread.
BEFORE_DETAIL = TwinViewsCfg(match_detail=False, still_px=0.0, raster_threads=None)
WRISTS_15FPS = (("left_wrist", 15.0), ("right_wrist", 15.0))
VIEW_PATHS: dict[str, TwinViewsCfg] = {
    "reference": TwinViewsCfg.reference(),
    "flow_blur": FIRST_FAST.replace(fps=None, worker=False, match_shadows=False),
    "flow_blur_30fps": FIRST_FAST.replace(worker=False),
    "flow_blur_30fps_worker": FIRST_FAST,
    "flow_blur_30fps_worker_views_wide": PREVIOUS_DEFAULT.replace(sites=True),
    "flow_blur_30fps_worker_views_wide_no_sites": PREVIOUS_DEFAULT,
    "flow_blur_30fps_worker_views_wide_no_sites_lean": PREVIOUS_DEFAULT.replace(lean_geoms=True),
    "flow_blur_30fps_worker_latency_2_views_wide_no_sites_lean": TwinViewsCfg(
        workers=1, lean_cell=False
    ),
    "flow_blur_30fps_workers_3_latency_2_views_wide_no_sites_lean": TwinViewsCfg(lean_cell=False),
    "flow_blur_30fps_workers_3_latency_2_views_wide_no_sites_lean_cell": BEFORE_DETAIL,
    # Shapes tessellated for the delivered size (no change at 256 px), still frames
    # unblurred, no rasterizer threads in the workers.
    "flow_blur_30fps_workers_3_latency_2_views_wide_no_sites_lean_cell_still": TwinViewsCfg(),
    "option_wrists_15fps": TwinViewsCfg(camera_fps=WRISTS_15FPS),
}


def bench_twin(
    seconds: float = 3.0,
    cameras: bool = True,
    views: TwinViewsCfg | None = None,
    size: int | None = None,
    realtime: bool = False,
) -> tuple[float, float]:
    """Simulated seconds per wall second, reading all three views every period if asked
    (``views`` and the delivered ``size`` as given, default the twin's), and the CPU time
    spent per control period (ms; this process's and the view worker's, all their threads),
    which other jobs on the machine change far less than the wall time."""
    options = RigOptions(world=world_at(size), views=views, realtime=realtime)
    with open_rig("twin", options) as rig:
        arm = rig.arms["left"]
        target = arm.state().tcp_pose.copy()
        if cameras:
            for cam in rig.cameras.values():
                cam.read()  # Starts the worker before the clock does.
        rig.present()
        worker = rig.reveal_internals().views.worker
        cpu0, worker0 = time.process_time(), worker.cpu_s if worker else 0.0
        start, sim0 = time.perf_counter(), rig.now()
        while time.perf_counter() - start < seconds:
            target[1] += 0.0005
            arm.send_tcp_target(target)
            rig.step()
            if cameras:
                for cam in rig.cameras.values():
                    cam.read()
        wall = time.perf_counter() - start
        cpu = time.process_time() - cpu0 + (worker.cpu_s - worker0 if worker else 0.0)
        periods = (rig.now() - sim0) * rig.task.control_hz
        return (rig.now() - sim0) / wall, 1e3 * cpu / periods


def bench_raw_render(seconds: float = 2.0, size: int | None = None) -> tuple[float, float]:
    """Wall and CPU milliseconds per frame set of the raw renderer: the twin's three views at
    the sizes it renders them (the wide views of the fisheyes), shadows on, no blur, remap or
    effects."""
    options = RigOptions(world=world_at(size), views=TwinViewsCfg.reference())
    with open_rig("twin", options) as rig:
        world, physics = rig.reveal_truth().world, rig.reveal_internals().physics
        renderer = SceneRenderer(physics, world)
        try:
            data = physics.mjdata(0)
            sets, start, cpu = 0, time.perf_counter(), time.process_time()
            while time.perf_counter() - start < seconds or sets < 3:
                for plan in renderer.plans:
                    renderer.render_raw(data, plan)
                sets += 1
            wall = time.perf_counter() - start
            return 1e3 * wall / sets, 1e3 * (time.process_time() - cpu) / sets
        finally:
            renderer.close()


def bench_views(seconds: float = 3.0) -> dict[str, float]:
    """Each camera path's real-time factor and its ratio to the raw renderer's (three raw
    views every 20 ms period and nothing else), the default path at smaller delivered sizes,
    and ``--realtime`` pacing with the views on (``bench_paced``)."""
    out: dict[str, float] = {}
    raw_ms, raw_cpu = bench_raw_render(seconds / 2)
    raw_rtf = 20.0 / raw_ms
    out["raw_render_ms_per_frame_set"] = raw_ms
    out["raw_render_cpu_ms_per_frame_set"] = raw_cpu
    out["raw_render_realtime_factor"] = raw_rtf
    for name, cfg in VIEW_PATHS.items():
        rtf, cpu_ms = bench_twin(seconds, views=cfg)
        out[f"views_{name}_realtime_factor"] = rtf
        out[f"views_{name}_vs_raw"] = rtf / raw_rtf
        out[f"views_{name}_cpu_ms_per_period"] = cpu_ms
        # CPU of the raw renderer drawing a frame set every period over the path's own.
        out[f"views_{name}_cpu_vs_raw"] = raw_cpu / cpu_ms
    for size in (128, 64):
        raw_ms, raw_cpu = bench_raw_render(seconds / 2, size)
        rtf, cpu_ms = bench_twin(seconds, size=size)
        out[f"twin_realtime_factor_{size}px"] = rtf
        out[f"twin_realtime_factor_{size}px_vs_raw"] = rtf * raw_ms / 20.0
        out[f"twin_cpu_ms_per_period_{size}px"] = cpu_ms
        out[f"twin_{size}px_cpu_vs_raw"] = raw_cpu / cpu_ms
        # The default before the meshed primitives and the per-camera workers, same run.
        rtf, cpu_ms = bench_twin(seconds, views=PREVIOUS_DEFAULT, size=size)
        out[f"twin_realtime_factor_{size}px_previous_default"] = rtf
        out[f"twin_cpu_ms_per_period_{size}px_previous_default"] = cpu_ms
        # Each step since: shapes tessellated for the size, then still frames unblurred,
        # then (the default) no rasterizer threads in the workers.
        for step, cfg in (
            ("full_detail", BEFORE_DETAIL),
            ("no_still", BEFORE_DETAIL.replace(match_detail=True)),
            ("mesa_threads", TwinViewsCfg(raster_threads=None)),
        ):
            rtf, cpu_ms = bench_twin(seconds, views=cfg, size=size)
            out[f"twin_realtime_factor_{size}px_{step}"] = rtf
            out[f"twin_cpu_ms_per_period_{size}px_{step}"] = cpu_ms
    out.update(bench_paced(seconds))
    return out


def bench_paced(seconds: float = 3.0) -> dict[str, float]:
    """The twin paced to the wall clock (``realtime=True``) with the three views read every
    period: control periods per wall second, and new head frames per wall second."""
    with open_rig("twin", RigOptions(realtime=True)) as rig:
        head = rig.cameras["head"]
        for cam in rig.cameras.values():
            cam.read()
        rig.present()
        stamps = set()
        start, sim0 = time.perf_counter(), rig.now()
        while time.perf_counter() - start < seconds:
            rig.step()
            for cam in rig.cameras.values():
                cam.read()
            stamps.add(head.read().stamp)
        wall = time.perf_counter() - start
        return {
            "realtime_paced_hz_with_views": (rig.now() - sim0) * rig.task.control_hz / wall,
            "realtime_paced_head_frames_per_s": len(stamps) / wall,
        }


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
    from r2s2r.rig.safety import SafetySupervisor
    from r2s2r.rig.teleop import TeleopSession, TrackerCalibration
    from r2s2r.rig.teleop.operator import ScriptedOperator, TwinEyes
    from r2s2r.spec.worlds import sorting_arm

    logging.getLogger("r2s2r.safety").setLevel(logging.ERROR)
    rig = open_rig("twin", RigOptions(seed=seed))
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
    out: dict[str, Any] = {"machine": machine(), "load_average": os.getloadavg()[0]}
    out["twin_realtime_factor"] = bench_twin(seconds)[0]
    out["twin_realtime_factor_no_cameras"], out["twin_cpu_ms_per_period_no_cameras"] = bench_twin(
        seconds / 2, cameras=False
    )
    out.update(bench_views(seconds))
    out.update(bench_retarget())
    if operator_seeds:
        out.update(bench_operator(operator_seeds))
    return out
