"""``r2s2r sim bench``: physics and rendering throughput of the env against raw MuJoCo, and
MuJoCo Warp's batched stepping and rendering."""

from __future__ import annotations

import math
import os
import platform
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import mujoco
import numpy as np

from r2s2r.sim.env import PickSortEnv
from r2s2r.sim.render import SceneRenderer
from r2s2r.spec.worlds import world_at


def machine() -> str:
    """A one-line description of this machine's CPU."""
    name = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    name = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return f"{name}, {os.cpu_count()} cores, {platform.system()}"


def source_commit() -> str:
    """The git commit of the source tree this package runs from ("unknown" outside a
    checkout): which code a figure measured."""
    try:
        done = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            cwd=Path(__file__).parent,
            timeout=10,
        )
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return done.stdout.strip() or "unknown"


def source_dirty() -> bool | None:
    """Whether the package's source folder has uncommitted changes (None outside a
    checkout): a figure measured then is not the commit's alone."""
    try:
        done = subprocess.run(
            ["git", "status", "--porcelain", "."],
            capture_output=True,
            text=True,
            cwd=Path(__file__).parents[1],
            timeout=10,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return bool(done.stdout.strip()) if done.returncode == 0 else None


def _rate(fn: Callable[[], object], seconds: float, per_call: int = 1) -> float:
    """Calls of ``fn`` per second (times ``per_call``), after one warm-up call."""
    fn()
    n, start = 0, time.perf_counter()
    while True:
        fn()
        n += 1
        elapsed = time.perf_counter() - start
        if elapsed >= seconds:
            return n * per_call / elapsed


def _hold_action(env: PickSortEnv, obs: dict[str, Any]) -> np.ndarray:
    """Hold both TCPs where they are with open hands."""
    tcp = obs["tcp_pose"]
    return env.contract.join_action(tcp, np.zeros((len(tcp), env.embodiment.hand_dof)))


def bench_physics(seconds: float = 3.0, repeats: int = 3) -> dict[str, float]:
    """Raw ``mj_step`` vs physics steps through ``env.step`` (images off) on the same work.

    Both start from the same reset state and run the same number of control periods (the raw
    loop also keeps the belt within its travel, as the env does), alternating so that
    machine noise hits both alike; the best of each is kept.
    """
    env = PickSortEnv(images=False)
    obs, _ = env.reset(seed=0)
    action = _hold_action(env, obs)
    model, nsub = env.model, env.cell.nsub
    belt_adr = env.cell.idx.belt_qadr
    half_period = env.world_spec.layout.belt.texture_period / 2
    env.step(action)  # Compiles the control kernels outside the timing.
    steps = max(10, int(seconds / repeats * 800))
    raw_data = mujoco.MjData(model)
    raw_rates, env_rates = [], []
    for _ in range(repeats):
        env.reset(seed=0)
        mujoco.mj_copyData(raw_data, model, env.physics.mjdata(0))
        start = time.perf_counter()
        for _ in range(steps):
            mujoco.mj_step(model, raw_data, nstep=nsub)
            q = raw_data.qpos[belt_adr]
            if abs(q) > half_period:
                raw_data.qpos[belt_adr] = q - math.copysign(2 * half_period, q)
        raw_rates.append(steps * nsub / (time.perf_counter() - start))
        env.reset(seed=0)
        start = time.perf_counter()
        for _ in range(steps):
            env.step(action)
        env_rates.append(steps / (time.perf_counter() - start))
    env.close()
    raw_best, env_best = max(raw_rates), max(env_rates)
    return {
        "raw_steps_per_s": raw_best,
        "env_control_steps_per_s": env_best,
        "env_physics_steps_per_s": env_best * nsub,
        "env_over_raw": env_best * nsub / raw_best,
        "substeps_per_control_step": float(nsub),
    }


def bench_render(seconds: float = 3.0, image_size: int | None = None) -> dict[str, float]:
    """Three-view renders through the env's renderer (``SceneRenderer``) vs raw
    ``mujoco.Renderer`` calls, at the world's observation size or ``image_size`` px."""
    world = None if image_size is None else world_at(image_size)
    env = PickSortEnv(images=True) if world is None else PickSortEnv(images=True, world=world)
    env.reset(seed=0)
    data = env.physics.mjdata(0)
    renderer = SceneRenderer(env.physics, env.world_spec)
    plans = renderer.plans
    raw_renderers = {
        p.render_size: mujoco.Renderer(env.model, p.render_size[1], p.render_size[0]) for p in plans
    }

    def raw() -> None:
        for p in plans:
            r = raw_renderers[p.render_size]
            r.update_scene(data, camera=p.cam_id)
            r.render()

    def ours() -> None:
        renderer.render()

    wide = {p.name: p.render_size for p in plans}
    imgs = {p.name: renderer.render_raw(data, p) for p in plans if p.remap is not None}

    def remap() -> None:
        for p in plans:
            if p.remap is not None:
                p.remap(imgs[p.name])

    # Alternate the two so that machine noise hits both alike; keep the best of each.
    raw_rate = env_rate = 0.0
    for _ in range(3):
        raw_rate = max(raw_rate, _rate(raw, seconds / 6))
        env_rate = max(env_rate, _rate(ours, seconds / 6))
    remap_rate = _rate(remap, seconds / 6)
    for r in raw_renderers.values():
        r.close()
    renderer.close()
    env.close()
    out: dict[str, Any] = {
        "raw_renders_per_s": raw_rate,
        "env_renders_per_s": env_rate,
        "render_over_raw": env_rate / raw_rate,
        "fisheye_remap_ms": 1e3 / remap_rate,
    }
    out.update({f"render_size_{k}": f"{w}x{h}" for k, (w, h) in wide.items()})
    return out


def bench_warp(batch_sizes: tuple[int, ...], steps: int = 20) -> dict[str, Any]:
    """MuJoCo Warp world-steps/s at several batch sizes on the device present."""
    from r2s2r.sim.cell import Cell
    from r2s2r.sim.scene import build_scene
    from r2s2r.sim.warp_physics import WarpPhysics
    from r2s2r.spec.worlds import load_task, load_world

    scene = build_scene(load_task("pick_sort"), load_world("nominal"), action_mode="tcp")
    rates: dict[str, float] = {}
    device = "?"
    for n in batch_sizes:
        physics = WarpPhysics(scene.model, n)
        device = physics.device
        cell = Cell(scene, physics)
        cell.reset(np.arange(n), [np.random.default_rng(i) for i in range(n)])
        ctrl = cell.ctrl.copy()
        physics.step(ctrl, 1)  # Compiles kernels / captures graphs outside the timing.
        physics.state()
        start = time.perf_counter()
        physics.step(ctrl, steps)
        physics.state()  # Forces the device to finish.
        rates[str(n)] = n * steps / (time.perf_counter() - start)
    return {"warp_device": device, "warp_world_steps_per_s": rates}


def bench_warp_render(
    batch_sizes: tuple[int, ...], seconds: float = 3.0, obs_size: tuple[int, int] | None = None
) -> dict[str, Any]:
    """Batched three-view renders of MuJoCo Warp worlds against MuJoCo's CPU rasterizer
    rendering the same worlds one by one (``mujoco`` renderer: each world's state copied to
    the host, then rendered), at each batch size (``obs_size`` (W, H) overrides the world's).
    A frame set is one world's three views."""
    from r2s2r.sim.cell import Cell
    from r2s2r.sim.physics import make_physics
    from r2s2r.sim.render import make_renderer
    from r2s2r.sim.scene import build_scene
    from r2s2r.spec.worlds import load_task, world_at

    world = world_at(obs_size)
    scene = build_scene(load_task("pick_sort"), world, action_mode="tcp")
    per_size = seconds / (2 * len(batch_sizes))
    batches: dict[str, float] = {}
    warp_sets: dict[str, float] = {}
    cpu_sets: dict[str, float] = {}
    device = "?"
    for n in batch_sizes:
        physics = make_physics("mujoco_warp", scene.model, n)
        device = str(getattr(physics, "device", "?"))
        Cell(scene, physics).reset(np.arange(n), [np.random.default_rng(i) for i in range(n)])
        warp = make_renderer("mujoco_warp", physics, world)
        cpu = make_renderer("mujoco", physics, world)
        # ``_rate`` renders once outside the timing (the Warp kernels compile then).
        rate = _rate(warp.render, per_size)
        batches[str(n)] = rate
        warp_sets[str(n)] = rate * n
        cpu_sets[str(n)] = _rate(cpu.render, per_size, per_call=n)
        warp.close()
        cpu.close()
    return {
        "warp_render_device": device,
        "warp_render_obs_size": "x".join(str(v) for v in world.render.obs_size),
        "warp_batched_renders_per_s": batches,
        "warp_render_frame_sets_per_s": warp_sets,
        "cpu_render_frame_sets_per_s": cpu_sets,
        "warp_render_over_cpu": {k: warp_sets[k] / cpu_sets[k] for k in warp_sets},
    }


def run_bench(
    seconds: float = 3.0,
    warp_sizes: tuple[int, ...] = (1, 8, 64),
    warp_obs_size: tuple[int, int] | None = None,
) -> dict[str, Any]:
    """Every figure of ``r2s2r sim bench``; the MuJoCo Warp ones only with ``warp_sizes``
    (their batched renders at ``warp_obs_size``, default the world's)."""
    out: dict[str, Any] = {"machine": machine(), "mujoco": mujoco.__version__}
    out.update(bench_physics(seconds))
    out.update(bench_render(seconds))
    if warp_sizes:
        try:
            out.update(bench_warp(warp_sizes))
            out.update(bench_warp_render(warp_sizes, seconds, warp_obs_size))
        except ImportError as err:
            out["warp_error"] = f"{err} (install the 'warp' extra: pip install -e '.[warp]')"
    return out
