"""``r2s2r sim demo``: a scripted episode rendered to a video of the three views."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from r2s2r.sim.env import PickSortEnv
from r2s2r.sim.scripted import ScriptedPicker
from r2s2r.sim.video import write_video
from r2s2r.spec.world import CAMERA_NAMES


def run_demo(
    out: Path,
    world: str = "nominal",
    condition: str = "nominal",
    seed: int = 0,
    seconds: float = 12.0,
    fps: int = 25,
) -> dict[str, Any]:
    """Run the scripted picker for one episode and write ``out/demo.mp4``."""
    env = PickSortEnv(world=world, condition=condition, images=False)
    obs, info = env.reset(seed=seed)
    picker = ScriptedPicker(env)
    picker.reset(obs, info)
    renderer = env.renderer()
    every = max(1, round(env.task_spec.control_hz / fps))
    steps = min(env.cell.max_steps, int(seconds * env.task_spec.control_hz))
    frames = []
    start = time.perf_counter()
    for i in tqdm(range(steps), desc="demo", unit="step"):
        obs, _, terminated, truncated, info = env.step(picker.act(obs, info))
        if i % every == 0:
            views = renderer.render()
            frames.append(np.concatenate([views[c][0] for c in CAMERA_NAMES], axis=1))
        if terminated or truncated:
            break
    video = out / "demo.mp4"
    count = write_video(video, frames, fps=fps)
    env.close()
    return {
        "video": str(video),
        "frames": count,
        "sim_seconds": info["time"],
        "wall_seconds": time.perf_counter() - start,
        "instruction": obs["instruction"],
        "status": ", ".join(info["object_status"]),
    }


def picker_success(
    episodes: int, world: str = "nominal", condition: str = "nominal", seed: int = 0
) -> list[str]:
    """Run the scripted picker on seeds ``seed .. seed + episodes - 1`` without cameras;
    returns each episode's outcome."""
    env = PickSortEnv(world=world, condition=condition, images=False)
    picker = ScriptedPicker(env)
    outcomes = []
    for s in tqdm(range(seed, seed + episodes), desc="episodes", unit="ep"):
        obs, info = env.reset(seed=s)
        picker.reset(obs, info)
        while True:
            obs, _, terminated, truncated, info = env.step(picker.act(obs, info))
            if terminated or truncated:
                break
        outcomes.append(info["object_status"][0])
    return outcomes
