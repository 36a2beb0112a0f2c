"""``r2s2r-studio`` (or ``python tools/studio.py``): open the Studio window; ``--bench``
measures how fast the camera views update while the twin runs, and whether memory grows."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from pathlib import Path


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="r2s2r-studio", description=__doc__)
    p.add_argument("--settings", type=Path, help="settings file (INI) instead of the user's")
    p.add_argument(
        "--bench",
        type=float,
        metavar="SECONDS",
        help="connect to the twin, measure the views' frame rate and memory for SECONDS, exit",
    )
    p.add_argument("--seed", type=int, default=0, help="twin seed (with --bench)")
    p.add_argument("--image-size", type=int, default=256, help="twin views, px (with --bench)")
    p.add_argument("--json", action="store_true", help="print the bench figures as JSON")
    p.add_argument(
        "--screenshots", type=Path, metavar="DIR", help="save a screenshot of every tab, exit"
    )
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    os.environ.setdefault("MUJOCO_GL", "egl")
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    from PySide6.QtCore import QSettings
    from PySide6.QtWidgets import QApplication

    from r2s2r_studio.window import StudioWindow

    app = QApplication.instance() or QApplication(sys.argv[:1])
    app.setApplicationName("r2s2r Studio")
    settings = QSettings(str(args.settings), QSettings.Format.IniFormat) if args.settings else None
    window = StudioWindow(settings)
    window.show()
    if args.screenshots is not None:
        from r2s2r_studio.shots import take_screenshots

        for path in take_screenshots(window, args.screenshots, seed=args.seed):
            print(path)
        window.close()
        return 0
    if args.bench is not None:
        from r2s2r_studio.bench import bench_views

        figures = bench_views(window, args.bench, seed=args.seed, image_size=args.image_size)
        window.close()
        if args.json:
            print(json.dumps(figures, indent=1))
        else:
            for key, value in figures.items():
                print(f"{key}: {value}")
        return 0
    return int(app.exec())


if __name__ == "__main__":
    raise SystemExit(main())
