"""What the entry scripts share: running from a checkout, Isaac Lab's launcher flags, and
starting Kit only where a script needs it and Isaac Sim is installed.

The scripts run as ``python tasks/X.py`` and as ``isaaclab.sh -p tasks/X.py`` (or under Isaac
Lab's Python). Isaac Lab's launcher flags are the same for all of them: 2.x's ``AppLauncher``
flags (``--headless``, ``--enable_cameras``, ``--livestream N``, ``--kit_args "..."``, ...)
and 3.0's (``--viz kit``, ``--deterministic``, ...). A script that needs no simulator strips
them and runs the ``r2s2r`` command; ``tasks/render_isaac.py`` hands them to Kit
(``launch_kit``). ``--device`` is not among them: ``r2s2r train`` has its own.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.metadata
import importlib.util
import shlex
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

# Isaac Lab's launcher flags (2.x AppLauncher and 3.0 KitLauncher): those that take no value,
# and those that take one.
LAUNCHER_SWITCHES = frozenset(
    {
        "--headless",
        "--enable_cameras",
        "--xr",
        "--verbose",
        "--info",
        "--deterministic",
        "--anim_recording_enabled",
    }
)
LAUNCHER_VALUES = frozenset(
    {
        "--livestream",
        "--kit_args",
        "--experience",
        "--rendering_mode",
        "--anim_recording_interval",
        "--anim_recording_start_time",
        "--anim_recording_stop_time",
        "--visualizer",
        "--viz",
        "--max_visible_envs",
    }
)
ISAAC_SIM_HINT = (
    "Isaac Sim is not installed in this Python: run the script with Isaac Lab's launcher "
    "(isaaclab.sh -p tasks/render_isaac.py ...) or in a Python where `pip install isaacsim` "
    "(NVIDIA's index) and isaaclab are installed"
)


def use_checkout() -> None:
    """Make ``import r2s2r`` work from a checkout that was not pip-installed."""
    if importlib.util.find_spec("r2s2r") is None:
        sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "source"))


def strip_launcher_flags(argv: list[str]) -> tuple[list[str], list[str]]:
    """(our arguments, the Isaac Lab launcher flags removed from them)."""
    ours, launcher = [], []
    args = iter(argv)
    for arg in args:
        name = arg.split("=", 1)[0]
        if name in LAUNCHER_SWITCHES:
            launcher.append(arg)
        elif name in LAUNCHER_VALUES:
            launcher.append(arg)
            if "=" not in arg:
                launcher.append(next(args, ""))
        else:
            ours.append(arg)
    return ours, launcher


def launcher_args(flags: list[str]) -> dict[str, Any]:
    """The launcher flags as the dict Isaac Lab's launchers take (``headless``,
    ``enable_cameras``, ``livestream``, ``kit_args``, ...)."""
    parser = argparse.ArgumentParser(add_help=False)
    for name in sorted(LAUNCHER_SWITCHES):
        parser.add_argument(name, action="store_true")
    for name in sorted(LAUNCHER_VALUES - {"--viz"}):
        kind = int if name in {"--livestream", "--max_visible_envs"} else str
        parser.add_argument(name, type=kind, default=None)
    parser.add_argument("--viz", dest="visualizer", type=str, default=None)
    args, unknown = parser.parse_known_args(flags)
    if unknown:
        raise ValueError(f"not Isaac Lab launcher flags: {unknown}")
    return {k: v for k, v in vars(args).items() if v not in (None, False)}


def isaaclab_version() -> str | None:
    """The installed Isaac Lab's version (None: not installed)."""
    try:
        return importlib.metadata.version("isaaclab")
    except importlib.metadata.PackageNotFoundError:
        return None


def kit_installed() -> bool:
    """Whether Isaac Sim (Kit) can start in this Python."""
    return importlib.util.find_spec("isaacsim") is not None


def run_command(script: str, command: list[str], argv: list[str] | None, why: str) -> None:
    """Run ``r2s2r COMMAND ARGS`` with Isaac Lab's launcher flags stripped from ``argv``
    (default: this process's); ``why`` says why they are not needed."""
    use_checkout()
    from r2s2r.cli import main

    ours, ignored = strip_launcher_flags(list(sys.argv[1:] if argv is None else argv))
    if ignored:
        print(f"{script}: ignoring Isaac Lab launcher flags {ignored} ({why})")
    sys.argv = [script, *command, *ours]
    main()


@contextlib.contextmanager
def launch_kit(flags: list[str]) -> Iterator[Any]:
    """Start Kit headless with cameras on (unless ``flags`` say otherwise) and yield the
    ``SimulationApp``-like handle (``update()``); Kit is closed on exit.

    Isaac Lab 3.x: ``isaaclab.app.launch_simulation`` with ``require_kit`` (its documented
    way for a script that needs Kit for what no env config says); 2.x: ``AppLauncher``;
    Isaac Sim alone: ``isaacsim.SimulationApp``.
    """
    if not kit_installed():
        raise RuntimeError(ISAAC_SIM_HINT)
    args = {"headless": True, "enable_cameras": True, **launcher_args(flags)}
    version = isaaclab_version()
    if version is not None and int(version.split(".")[0]) >= 3:
        from isaaclab.app import launch_simulation

        with launch_simulation(None, {**args, "require_kit": True}):
            import omni.kit.app

            yield omni.kit.app.get_app()
        return
    if version is not None:
        from isaaclab.app import AppLauncher

        # 2.x fills the flags a dict leaves out with its own defaults.
        app = AppLauncher(args).app
    else:
        from isaacsim import SimulationApp

        extra = shlex.split(args.get("kit_args", ""))
        app = SimulationApp({"headless": args["headless"], "extra_args": extra})
    try:
        yield app
    finally:
        app.close()
