"""RGB-D captures of the cell for scene registration, as plain files, and their registration.

``capture_scene`` stops the belt and takes the head camera's colour and depth of the cleared
cell, then of a few objects brought to the middle of the belt and left to settle::

    DIR/scene/empty_rgb.png, empty_depth.png        the cleared cell
    DIR/scene/objNN_rgb.png, objNN_depth.png        one object on the belt each
    DIR/scene/meta.json                             depth scale, image size, object names

Depth is a 16-bit PNG in units of ``1 / DEPTH_SCALE`` metres (0 where unknown), the layout
RGB-D datasets use; a user can bring their own frames in the same form.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np
from tqdm import tqdm

from r2s2r.ground.pointcloud import CameraView
from r2s2r.ground.register import (
    DEFAULT_CFG,
    ObjectRegistration,
    RegistrationCfg,
    RegistrationError,
    RgbdCapture,
    SceneRegistration,
)
from r2s2r.ground.register_belt import register_belt
from r2s2r.ground.register_objects import register_bins, register_objects
from r2s2r.rig.interfaces import Rig
from r2s2r.spec import TaskSpec, WorldSpec
from r2s2r.spec.world import LayoutSpec

# Depth PNG units per metre (0.1 mm steps, up to 6.5 m).
DEPTH_SCALE = 10000.0
# Objects brought into view one at a time, and how long the belt runs to bring each one.
SCENE_OBJECTS = ("red_block", "green_can", "purple_box")
BRING_S = 7.0
SETTLE_S = 1.5


def save_rgbd(folder: Path, stem: str, rgb: np.ndarray, depth: np.ndarray) -> None:
    """Write one RGB-D frame as ``stem_rgb.png`` and a 16-bit ``stem_depth.png``."""
    cv2.imwrite(str(folder / f"{stem}_rgb.png"), np.ascontiguousarray(rgb[:, :, ::-1]))
    d = np.nan_to_num(np.asarray(depth, dtype=np.float64), nan=0.0, posinf=0.0, neginf=0.0)
    units = np.clip(np.round(d * DEPTH_SCALE), 0, 65535).astype(np.uint16)
    cv2.imwrite(str(folder / f"{stem}_depth.png"), units)


def load_rgbd(folder: Path, stem: str, view: CameraView) -> RgbdCapture:
    """Read a frame ``save_rgbd`` wrote (or a user's in the same form)."""
    rgb_path, depth_path = folder / f"{stem}_rgb.png", folder / f"{stem}_depth.png"
    for path in (rgb_path, depth_path):
        if not path.is_file():
            raise RegistrationError(
                f"{path}: missing; capture the scene with 'r2s2r ground capture'"
            )
    rgb = cv2.imread(str(rgb_path), cv2.IMREAD_COLOR)
    depth = cv2.imread(str(depth_path), cv2.IMREAD_UNCHANGED)
    if rgb is None:
        raise RegistrationError(f"{rgb_path}: not a readable PNG (truncated?); capture it again")
    if depth is None or depth.dtype != np.uint16 or depth.ndim != 2:
        raise RegistrationError(
            f"{depth_path}: expected a single-channel 16-bit PNG of depth in 1/{DEPTH_SCALE:g} m "
            "units; capture it again"
        )
    metres = depth.astype(np.float32) / DEPTH_SCALE
    metres[depth == 0] = np.nan
    return RgbdCapture(rgb[:, :, ::-1].copy(), metres, view)


def capture_scene(
    rig: Rig, out: Path, objects: tuple[str, ...] = SCENE_OBJECTS, progress: bool = True
) -> Path:
    """Capture the cleared cell and ``objects`` on the belt with the head camera of ``rig``."""
    folder = Path(out) / "scene"
    folder.mkdir(parents=True, exist_ok=True)
    cam = rig.depth_camera()
    periods = int(round(1.0 / 0.02))
    bar = tqdm(
        total=1 + len(objects), desc="capturing the scene", unit="frame", disable=not progress
    )
    # The cleared cell: the belt stopped, the object the episode starts with at its far end.
    rig.presenter.remove_board()
    rig.presenter.present(objects[0] if objects else None)
    rig.conveyor.set_speed(0.0)
    rig.step(periods // 2)
    save_rgbd(folder, "empty", cam.read().image, cam.read_depth().image)
    bar.update()
    for i, name in enumerate(objects):
        rig.presenter.present(name)
        rig.conveyor.set_speed(0.1)
        rig.step(int(BRING_S * periods))
        rig.conveyor.set_speed(0.0)
        rig.step(int(SETTLE_S * periods))
        save_rgbd(folder, f"obj{i:02d}", cam.read().image, cam.read_depth().image)
        bar.update()
    bar.close()
    intr = cam.intrinsics()
    meta = {
        "depth_scale": DEPTH_SCALE,
        "image_size": [intr.width, intr.height],
        "objects": list(objects),
    }
    (folder / "meta.json").write_text(json.dumps(meta, indent=1))
    return folder


@dataclass(frozen=True)
class SceneGrounding:
    """The cell registered from the empty frame, and the objects of every populated frame."""

    registration: SceneRegistration
    # Per populated frame: the registered objects (name, pose, residual, IoU, accepted).
    frames: dict[str, SceneRegistration]
    empty_rgb: np.ndarray


def ground_scene(capture: Path, task: TaskSpec, world: WorldSpec) -> SceneGrounding:
    """Register belt, bins and objects from ``capture/scene`` seen by ``world``'s head camera
    (the calibrated one)."""
    folder = Path(capture)
    if (folder / "scene").is_dir():
        folder = folder / "scene"
    view = CameraView.from_spec(world.cameras["head"])
    empty = load_rgbd(folder, "empty", view)
    registration = register_scene(empty, task, world.layout)
    frames = {}
    for path in sorted(folder.glob("obj*_rgb.png")):
        stem = path.name[: -len("_rgb.png")]
        frame = load_rgbd(folder, stem, view)
        objects = register_objects(frame, registration.belt, task.all_objects)
        frames[stem] = SceneRegistration(view, registration.belt, registration.bins, objects)
    return SceneGrounding(registration, frames, empty.rgb)


def register_scene(
    empty: RgbdCapture,
    task: TaskSpec,
    layout: LayoutSpec,
    populated: RgbdCapture | None = None,
    cfg: RegistrationCfg = DEFAULT_CFG,
) -> SceneRegistration:
    """Register the belt and bins from a capture of the cleared cell (``layout`` is the drawn
    one, the starting guess) and, from ``populated`` when given, the objects on the belt."""
    belt = register_belt(empty, layout.belt, cfg)
    bins = register_bins(empty, task.bins, layout.bins, belt, cfg)
    objects: tuple[ObjectRegistration, ...] = ()
    if populated is not None:
        objects = register_objects(populated, belt, task.all_objects, cfg)
    return SceneRegistration(empty.view, belt, bins, objects)
