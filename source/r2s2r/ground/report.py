"""The grounding report: Markdown with PNG plots, every figure grounded next to nominal.

Figures are drawn on matplotlib's Agg canvas directly, never through pyplot: the Studio
writes this report from a job thread, and pyplot there picks the running Qt application's
backend and makes its windows off the GUI thread (a Studio test hung on it).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import cv2
import numpy as np

from r2s2r.ground.grounding import Grounding
from r2s2r.ground.register import draw_overlay


def _figure(**kwargs: Any) -> Any:
    """A matplotlib ``Figure`` on its own Agg canvas (no pyplot, no backend state)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(**kwargs)
    FigureCanvasAgg(fig)
    return fig


def _save(fig: Any, path: Path) -> None:
    fig.tight_layout()
    fig.savefig(path, dpi=90)


def _plot_cameras(result: Grounding, path: Path) -> None:
    names = list(result.cameras)
    fig = _figure(figsize=(5 * len(names), 3.4))
    axes = fig.subplots(1, len(names))
    for ax, name in zip(np.atleast_1d(axes), names, strict=True):
        g = result.cameras[name]
        c = g.calibration
        views = list(c.views_used)
        x = np.arange(len(views))
        ax.bar(x - 0.2, [c.view_rms_px[v] for v in views], 0.4, label="intrinsics fit")
        ax.bar(x + 0.2, [c.view_loo_px[v] for v in views], 0.4, label="intrinsics leave-one-out")
        ax.set_title(
            f"{name}: through the CAD mount {g.cad_rms_px:.2f} px, "
            f"through the grounded chain {g.chain_rms_px:.2f} px",
            fontsize=9,
        )
        ax.set_xlabel("view")
        ax.set_ylabel("reprojection RMS (px)")
        ax.legend(fontsize=8)
    _save(fig, path)


def _plot_tcp(result: Grounding, path: Path) -> None:
    arm = result.sysid.arm
    fig = _figure(figsize=(9, 6))
    axes = fig.subplots(3, 1, sharex=True)
    t, meas = arm.t[0], arm.measured[0]
    for k, axis in enumerate("xyz"):
        ax = axes[k]
        ax.plot(t, 1e3 * meas[:, k], "k", lw=1.5, label="rig")
        ax.plot(t, 1e3 * arm.predicted_nominal[0][:, k], "C3", lw=1, label="nominal sim")
        ax.plot(t, 1e3 * arm.predicted[0][:, k], "C2--", lw=1, label="grounded sim")
        ax.set_ylabel(f"TCP {axis} (mm)")
    axes[0].set_title(
        f"held-out replay, {arm.sides[0]} arm: grounded {arm.tcp_rms_mm:.2f} mm, "
        f"nominal {arm.nominal_tcp_rms_mm:.2f} mm RMS"
    )
    axes[0].legend(fontsize=8, loc="upper right")
    axes[-1].set_xlabel("time (s)")
    _save(fig, path)


def _plot_fingertips(result: Grounding, path: Path) -> None:
    hand = result.sysid.hand
    fig = _figure(figsize=(9, 3.2))
    ax = fig.subplots()
    meas, pred = hand.measured_tips[0], hand.predicted_tips[0]
    for f in range(meas.shape[1]):
        ax.plot(1e3 * meas[:, f, 2], "k", lw=1.2, label="rig" if f == 0 else None)
        ax.plot(1e3 * pred[:, f, 2], "C2--", lw=1, label="grounded sim" if f == 0 else None)
    ax.set_title(
        f"validation episode, fingertip height in the palm frame: median RMS grounded "
        f"{hand.fingertip_rms_mm:.2f} mm, nominal {hand.nominal_fingertip_rms_mm:.2f} mm"
    )
    ax.set_xlabel("period (20 ms)")
    ax.set_ylabel("mm")
    ax.legend(fontsize=8)
    _save(fig, path)


def _write_rgb(path: Path, image: np.ndarray) -> None:
    cv2.imwrite(str(path), np.ascontiguousarray(image[:, :, ::-1]))


def write_report(result: Grounding, out: Path) -> Path:
    """Write ``out/report.md`` and its PNGs."""
    out = Path(out)
    _plot_cameras(result, out / "reprojection.png")
    _plot_tcp(result, out / "tcp.png")
    _plot_fingertips(result, out / "fingertips.png")
    scene = result.scene
    _write_rgb(out / "registration.png", draw_overlay(scene.empty_rgb, scene.registration))
    s = result.summary()
    compare = result.compare
    lines = [
        "# World grounding report",
        "",
        f"Grounding took {result.seconds:.0f} s.",
        "",
        "## Cameras",
        "",
        "| camera | fx | fy | cx | cy | fit RMS (px) | LOO (px) | CAD-mounted (px) | views |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, c in s["cameras"].items():
        lines.append(
            f"| {name} | {c['fx']:.2f} | {c['fy']:.2f} | {c['cx']:.2f} | {c['cy']:.2f} | "
            f"{c['chain_rms_px']:.3f} | {c['loo_px']:.3f} | {c['cad_rms_px']:.3f} | "
            f"{c['views_used']} |"
        )
    lines += ["", "![reprojection errors](reprojection.png)", "", "## Scene", ""]
    belt = s["belt"]
    lines.append(
        f"Belt top centre {np.round(belt['pos'], 4).tolist()} m (nominal "
        f"{np.round(belt['nominal_pos'], 4).tolist()}), yaw {belt['yaw_deg']:.3f} deg, edge "
        f"residual {belt['residual_mm']:.2f} mm."
    )
    lines += ["", "| bin | position (m) | nominal (m) | residual (mm) |", "|---|---|---|---|"]
    for name, b in s["bins"].items():
        nominal_pos = result.nominal.layout.bins[name].pos
        lines.append(
            f"| {name} | {np.round(b['pos'], 4).tolist()} | {list(nominal_pos)} | "
            f"{b['residual_mm']:.2f} |"
        )
    lines += ["", "| object | IoU | accepted | residual (mm) |", "|---|---|---|---|"]
    for o in s["objects"]:
        lines.append(f"| {o['name']} | {o['iou']:.3f} | {o['accepted']} | {o['residual_mm']:.2f} |")
    lines += ["", "![registration overlay](registration.png)", "", "## Arm and hand models", ""]
    lines += [
        "| figure | grounded | nominal |",
        "|---|---|---|",
        f"| held-out TCP RMS (mm) | {s['tcp_rms_mm']:.3f} | {s['nominal_tcp_rms_mm']:.3f} |",
        f"| held-out TCP RMS (deg) | {s['tcp_rms_deg']:.3f} | {s['nominal_tcp_rms_deg']:.3f} |",
        f"| median fingertip RMS (mm) | {s['fingertip_rms_mm']:.3f} | "
        f"{s['nominal_fingertip_rms_mm']:.3f} |",
        f"| replay on the rig vs in the sim: TCP RMS (mm) | "
        f"{compare['grounded_replay_tcp_mm']:.3f} | {compare['nominal_replay_tcp_mm']:.3f} |",
        f"| replay: TCP RMS (deg) | {compare['grounded_replay_tcp_deg']:.3f} | "
        f"{compare['nominal_replay_tcp_deg']:.3f} |",
        f"| replay: head view difference | {compare['grounded_image_diff']:.2f} | "
        f"{compare['nominal_image_diff']:.2f} |",
    ]
    lines += ["", "![TCP replay](tcp.png)", "", "![fingertips](fingertips.png)", ""]
    views = compare["views"]
    if all(views.get(k) is not None for k in ("rig", "nominal", "grounded")):
        strip = np.hstack([views["rig"], views["nominal"], views["grounded"]])
        _write_rgb(out / "sim_views.png", cv2.resize(strip, None, fx=0.4, fy=0.4))
        lines += [
            "Head view on the rig (left) and in the nominal (middle) and grounded (right) sims:",
            "",
            "![sim views](sim_views.png)",
            "",
        ]
    path = out / "report.md"
    path.write_text("\n".join(lines))
    return path
