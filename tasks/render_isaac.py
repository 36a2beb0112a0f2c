"""Render a dataset's recorded states with Isaac Sim's RTX renderer into a new dataset:
``isaaclab.sh -p tasks/render_isaac.py DATASET --out DIR --usd CELL.usd [--world grounded]``.

The reference study's split: physics in MuJoCo (Warp) (``r2s2r generate`` keeps the successful
episodes with their states), images from Isaac Sim. Each frame's arm and hand joints and object
pose pose the cell's MuJoCo model (``r2s2r.app.render.StateReplay``); its body and camera poses
are written into the cell's USD stage (``r2s2r.app.render_usd.UsdPoser``; the USD comes from
the Isaac Lab extension's exporter) and each camera is rendered as an ideal pinhole through an
``omni.replicator`` render product and its ``rgb`` annotator; the fisheye cameras' wide views
are then remapped through their distortion model, as the MuJoCo renderer's are. Kit starts
headless with cameras on (Isaac Lab's launcher flags pass through: ``--livestream 2``,
``--kit_args "..."``, ...).

``--renderer mujoco`` runs the same job with MuJoCo's renderer and no Kit
(= ``r2s2r dataset render``). Without Isaac Sim, ``--renderer isaac`` stops with the install
hint. Nothing below the Kit calls has run on this project's machines (no Isaac Sim there).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _launch import ISAAC_SIM_HINT, kit_installed, launch_kit, strip_launcher_flags, use_checkout  # noqa: E402

use_checkout()


class IsaacFrameRenderer:
    """Isaac Sim's RTX renderer behind ``r2s2r.app.render.FrameRenderer``."""

    def __init__(self, replay: Any, usd: Path, app: Any, rt_subframes: int, prims: Any) -> None:
        import omni.replicator.core as rep
        import omni.timeline
        import omni.usd

        from r2s2r.app.render_usd import UsdPoser

        context = omni.usd.get_context()
        if not context.open_stage(str(usd)):
            raise RuntimeError(f"{usd}: Isaac Sim could not open the stage")
        # (message, files loaded, files to load): wait until every layer and payload is in.
        while context.get_stage_loading_status()[2] > 0:
            app.update()
        # Physics stays still: the poses come from MuJoCo.
        omni.timeline.get_timeline_interface().stop()
        rep.orchestrator.set_capture_on_play(False)
        self._rep, self._app = rep, app
        self.poser = UsdPoser(context.get_stage(), replay, prims)
        self.rt_subframes = rt_subframes
        self._products: dict[str, tuple[Any, Any]] = {}
        for view in replay.views:
            path = self.poser.cameras[view.name].GetPath().pathString
            product = rep.create.render_product(path, resolution=view.size)
            # One annotator per render product (an annotator reads its first product only).
            rgb = rep.AnnotatorRegistry.get_annotator("rgb", device="cpu")
            rgb.attach([product])
            self._products[view.name] = (product, rgb)

    def render(self, frame: Any) -> dict[str, Any]:
        import numpy as np

        self.poser.pose(frame)
        # Renders every product; extra RTX subframes settle path-traced lighting.
        self._rep.orchestrator.step(rt_subframes=self.rt_subframes, pause_timeline=True)
        out = {}
        for name, (_, rgb) in self._products.items():
            data = np.asarray(rgb.get_data())
            out[name] = np.ascontiguousarray(data[..., :3], dtype=np.uint8)
        return out

    def close(self) -> None:
        for product, rgb in self._products.values():
            rgb.detach([product.path])
            product.destroy()
        self._products.clear()


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="tasks/render_isaac.py", description=__doc__.split("\n")[0])
    p.add_argument("source", type=Path, help="dataset whose recorded states are rendered")
    p.add_argument("--out", type=Path, required=True, help="dataset to write (or continue)")
    p.add_argument("--usd", type=Path, help="the cell's USD (needed by --renderer isaac)")
    p.add_argument("--world", default="nominal", help="world whose cameras render (name or YAML)")
    p.add_argument("--image-size", type=int, default=256, help="views, px")
    p.add_argument("--episodes", default=None, help="source episodes, e.g. 0,3,5 (default: all)")
    p.add_argument("--lossless", action="store_true", help="store exact RGB video")
    p.add_argument("--renderer", choices=("isaac", "mujoco"), default="isaac")
    p.add_argument("--rt-subframes", type=int, default=4, help="RTX subframes per frame")
    p.add_argument(
        "--prims", type=Path, help="YAML map of MuJoCo body name -> prim path (default: by name)"
    )
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    from r2s2r.cli import headless_gl_default

    headless_gl_default()  # Before MuJoCo is imported (--renderer mujoco renders with it).
    import yaml
    from tqdm import tqdm

    from r2s2r.app.jobs import Progress, RequestError
    from r2s2r.app.render import MujocoFrameRenderer, RenderRequest, render_dataset

    ours, flags = strip_launcher_flags(list(sys.argv[1:] if argv is None else argv))
    args = parse(ours)
    try:
        episodes = tuple(int(e) for e in args.episodes.split(",")) if args.episodes else None
        request = RenderRequest(
            source=args.source,
            out=args.out,
            world=args.world,
            image_size=args.image_size,
            episodes=episodes,
            lossless=args.lossless,
        )
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    bar = tqdm(desc="render", unit="frame")

    def show(p: Progress) -> None:
        bar.total = p.total
        bar.update(p.done - bar.n)

    try:
        if args.renderer == "mujoco":
            if flags:
                print(f"tasks/render_isaac.py: ignoring Isaac Lab launcher flags {flags} (MuJoCo)")
            result = render_dataset(request, MujocoFrameRenderer, show)
        else:
            if args.usd is None or not args.usd.is_file():
                raise RequestError(f"--renderer isaac needs --usd CELL.usd (got {args.usd})")
            if not kit_installed():
                raise RequestError(ISAAC_SIM_HINT)
            prims = yaml.safe_load(args.prims.read_text()) if args.prims else None
            with launch_kit(flags) as app:
                result = render_dataset(
                    request,
                    lambda replay: IsaacFrameRenderer(
                        replay, args.usd, app, args.rt_subframes, prims
                    ),
                    show,
                )
    except (RequestError, ValueError, FileNotFoundError) as err:
        bar.close()
        print(f"error: {err}", file=sys.stderr)
        return 2
    bar.close()
    print(f"{result.out}: {result.episodes} episodes, {result.frames} frames")
    return 0


if __name__ == "__main__":
    sys.exit(main())
