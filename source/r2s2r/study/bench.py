"""A study's timing table: each stage's wall time and share, and for generation the kept
episodes per hour per core with and without rendering, against the raw cost of the same
physics (``mujoco.mj_step``) and rendering (``mujoco.Renderer``) measured in the same run.

Everything is read from the study's own records (``DIR/study.json`` and each simulated
dataset's ``generation/summary.json``) plus one raw renderer measurement at the study's
image size; nothing is re-run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from r2s2r.data import Dataset
from r2s2r.study.plan import LEDGER


def stage_times(root: Path) -> list[dict[str, Any]]:
    """Each finished stage's wall time (over every call that worked on it) and its share."""
    ledger = json.loads((Path(root) / LEDGER).read_text())
    rows = [
        {"stage": name, "seconds": float(e.get("seconds", 0.0)), "state": e.get("state")}
        for name, e in ledger["stages"].items()
    ]
    total = sum(r["seconds"] for r in rows) or 1.0
    for r in rows:
        r["share"] = r["seconds"] / total
    return rows


def generation_figures(root: Path, raw_frame_sets_per_s: float) -> list[dict[str, Any]]:
    """Per simulated dataset: kept episodes per core-hour with and without rendering, and
    the core time spent against the raw physics and render cost of the same work.

    Core time is the sum of the attempts' own times (``generation/attempts.jsonl``, across
    worker processes); the raw physics cost is the physics steps taken at raw ``mj_step``
    speed, the raw render cost the kept frames at ``raw_frame_sets_per_s`` (three views)."""
    rows = []
    for summary_path in sorted(Path(root).glob("sim/*/generation/summary.json")):
        s = json.loads(summary_path.read_text())
        folder = summary_path.parent.parent
        core_s = (
            s["attempts"] / s["attempts_per_s_per_core"] if s["attempts_per_s_per_core"] else 0.0
        )
        share = s["time_share"]
        render_s = share.get("render_and_save", 0.0) * core_s
        physics_s = share.get("physics", 0.0) * core_s
        raw_physics_s = (
            physics_s * s["physics_steps_per_s"] / s["raw_mj_steps_per_s"]
            if s.get("raw_mj_steps_per_s")
            else None
        )
        frames = len(Dataset(folder)) if s["kept"] else 0
        raw_render_s = frames / raw_frame_sets_per_s if raw_frame_sets_per_s else None
        raw = (raw_physics_s or 0.0) + (raw_render_s or 0.0)
        rows.append(
            {
                "dataset": folder.name,
                "kept": s["kept"],
                "attempts": s["attempts"],
                "success_rate": s["success_rate"],
                "wall_s": s["seconds"],
                "core_s": core_s,
                "kept_per_core_hour": 3600 * s["kept"] / core_s if core_s else None,
                "kept_per_core_hour_no_render": (
                    3600 * s["kept"] / (core_s - render_s) if core_s > render_s else None
                ),
                "time_share": share,
                "frames": frames,
                "raw_physics_s": raw_physics_s,
                "raw_render_s": raw_render_s,
                "over_raw": core_s / raw if raw else None,
            }
        )
    return rows


def study_bench(root: Path, image_size: int, render_seconds: float = 3.0) -> dict[str, Any]:
    """The table above as one JSON-ready dict."""
    from r2s2r.sim.bench import bench_render, machine

    render = bench_render(render_seconds, image_size=image_size)
    raw = float(render["raw_renders_per_s"])
    gen = generation_figures(root, raw)
    core = sum(g["core_s"] for g in gen)
    raw_total = sum((g["raw_physics_s"] or 0.0) + (g["raw_render_s"] or 0.0) for g in gen)
    return {
        "machine": machine(),
        "stages": stage_times(root),
        "generation": gen,
        "generation_core_s": core,
        "generation_raw_s": raw_total,
        "generation_over_raw": core / raw_total if raw_total else None,
        "raw_frame_sets_per_s": raw,
        "env_frame_sets_per_s": float(render["env_renders_per_s"]),
        "image_size": image_size,
    }
