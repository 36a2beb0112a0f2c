"""Train a policy: ``python tasks/train.py --preset tiny --real DIR --out RUN ...``.

The same options as ``r2s2r train``. It also runs as ``isaaclab.sh -p tasks/train.py`` (or
under Isaac Lab's Python): training needs no simulator, so Isaac Lab's launcher flags
(``--headless``, ``--enable_cameras``, ``--livestream N``, ``--kit_args "..."``, ...) are
accepted and ignored, with or without Isaac Lab installed.
"""

from __future__ import annotations

import sys
from pathlib import Path

# Isaac Lab's AppLauncher flags: those that take no value, and those that take one.
LAUNCHER_SWITCHES = {"--headless", "--enable_cameras", "--xr", "--verbose", "--info"}
LAUNCHER_VALUES = {
    "--livestream",
    "--kit_args",
    "--experience",
    "--rendering_mode",
    "--anim_recording_interval",
}


def strip_launcher_flags(argv: list[str]) -> tuple[list[str], list[str]]:
    """(our arguments, the Isaac Lab launcher flags removed from them)."""
    ours, ignored = [], []
    args = iter(argv)
    for arg in args:
        name = arg.split("=", 1)[0]
        if name in LAUNCHER_SWITCHES:
            ignored.append(arg)
        elif name in LAUNCHER_VALUES:
            ignored.append(arg)
            if "=" not in arg:
                ignored.append(next(args, ""))
        else:
            ours.append(arg)
    return ours, ignored


def main(argv: list[str] | None = None) -> None:
    try:
        import r2s2r  # noqa: F401
    except ImportError:  # Run from a checkout without installing.
        sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "source"))
    from r2s2r.cli import app

    ours, ignored = strip_launcher_flags(list(sys.argv[1:] if argv is None else argv))
    if ignored:
        print(f"tasks/train.py: ignoring Isaac Lab launcher flags {ignored} (no simulator needed)")
    app(["train", *ours], prog_name="tasks/train.py")


if __name__ == "__main__":
    main()
