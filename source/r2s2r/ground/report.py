"""The grounding report: Markdown with PNG plots, every figure grounded next to nominal.

It also holds the sim-versus-rig comparison the grounded world has to win: the head camera's
view of the cleared cell rendered in the nominal and in the grounded sim, each against the
rig's own frame of the same state (arms at home, belt stopped).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import cv2
import numpy as np

from r2s2r.spec import TaskSpec, WorldSpec

if TYPE_CHECKING:
    from r2s2r.ground.pipeline import Grounding


def render_home_view(task: TaskSpec, world: WorldSpec, camera: str = "head") -> np.ndarray:
    """``world``'s sim at the start of an episode (arms home, belt still), seen by ``camera``
    at its own resolution: what a rig's camera shows of the same state."""
    from r2s2r.sim.cell import Cell, set_action_mode
    from r2s2r.sim.physics import MujocoPhysics
    from r2s2r.sim.render import SceneRenderer
    from r2s2r.sim.scene import build_scene

    scene = build_scene(task, world)
    set_action_mode(scene.model, "tcp")
    physics = MujocoPhysics(scene.model)
    cell = Cell(scene, physics)
    cell.reset(np.array([0]), [np.random.default_rng(0)])
    renderer = SceneRenderer(scene.model, world, native=True)
    plan = next(p for p in renderer.plans if p.name == camera)
    data = physics.mjdata(0)
    image = renderer.render_raw(data, plan)
    if plan.remap is not None:
        image = plan.remap(image)
    renderer.close()
    return image


def image_difference(a: np.ndarray, b: np.ndarray) -> float:
    """Mean absolute difference (grey levels) of two views after each is normalised to zero
    mean and unit contrast and lightly blurred, so that exposure, white balance and sensor
    noise count less than where things are."""

    def norm(img: np.ndarray) -> np.ndarray:
        grey = cv2.GaussianBlur(
            cv2.cvtColor(img, cv2.COLOR_RGB2GRAY).astype(np.float32), (0, 0), 2.0
        )
        return np.asarray((grey - grey.mean()) / max(float(grey.std()), 1e-6))

    return float(np.mean(np.abs(norm(a) - norm(b))) * 64.0)


def compare_views(
    task: TaskSpec, nominal: WorldSpec, grounded: WorldSpec, rig_view: np.ndarray
) -> dict[str, object]:
    """The head view of each sim against the rig's frame: differences and the images."""
    views = {
        "nominal": render_home_view(task, nominal),
        "grounded": render_home_view(task, grounded),
    }
    return {
        "nominal_image_diff": image_difference(views["nominal"], rig_view),
        "grounded_image_diff": image_difference(views["grounded"], rig_view),
        "views": views,
    }


def _plot_cameras(result: Grounding, path: Path) -> None:
    import matplotlib.pyplot as plt

    names = list(result.cameras)
    fig, axes = plt.subplots(1, len(names), figsize=(5 * len(names), 3.4))
    for ax, name in zip(np.atleast_1d(axes), names, strict=True):
        g = result.cameras[name]
        c = g.calibration
        views = list(c.views_used)
        x = np.arange(len(views))
        ax.bar(x - 0.2, [c.view_rms_px[v] for v in views], 0.4, label="fit")
        ax.bar(x + 0.2, [c.view_loo_px[v] for v in views], 0.4, label="leave-one-out")
        ax.set_title(f"{name}: CAD mount {g.cad_rms_px:.2f} px, grounded {g.chain_rms_px:.2f} px")
        ax.set_xlabel("view")
        ax.set_ylabel("reprojection RMS (px)")
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def _plot_tcp(result: Grounding, path: Path) -> None:
    import matplotlib.pyplot as plt

    arm = result.sysid.arm
    fig, axes = plt.subplots(3, 1, figsize=(9, 6), sharex=True)
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
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def _plot_fingertips(result: Grounding, path: Path) -> None:
    import matplotlib.pyplot as plt

    hand = result.sysid.hand
    fig, ax = plt.subplots(figsize=(9, 3.2))
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
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def _write_rgb(path: Path, image: np.ndarray) -> None:
    cv2.imwrite(str(path), np.ascontiguousarray(image[:, :, ::-1]))


def write_report(result: Grounding, out: Path, compare: dict[str, object] | None = None) -> Path:
    """Write ``out/report.md`` and its PNGs."""
    from r2s2r.ground.register import draw_overlay

    out = Path(out)
    _plot_cameras(result, out / "reprojection.png")
    _plot_tcp(result, out / "tcp.png")
    _plot_fingertips(result, out / "fingertips.png")
    scene = result.scene
    _write_rgb(out / "registration.png", draw_overlay(scene.empty_rgb, scene.registration))
    s = result.summary()
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
    ]
    if compare is not None:
        lines.append(
            f"| head view vs rig (image difference) | {compare['grounded_image_diff']:.2f} | "
            f"{compare['nominal_image_diff']:.2f} |"
        )
        views = compare["views"]
        assert isinstance(views, dict)
        strip = np.hstack([views["nominal"], views["grounded"]])
        _write_rgb(out / "sim_views.png", cv2.resize(strip, None, fx=0.5, fy=0.5))
    lines += ["", "![TCP replay](tcp.png)", "", "![fingertips](fingertips.png)", ""]
    if compare is not None:
        lines += [
            "Head view of the nominal (left) and grounded (right) sims:",
            "",
            "![sim views](sim_views.png)",
            "",
        ]
    path = out / "report.md"
    path.write_text("\n".join(lines))
    return path
