"""Record teleoperated demonstrations: ``python tasks/record.py --out DIR --episodes N ...``.

The same options as ``r2s2r record`` (``--rig twin`` with the scripted operator, or
``--rig hardware --keyboard`` on the real cell). It also runs as ``isaaclab.sh -p
tasks/record.py`` (or under Isaac Lab's Python): the twin is MuJoCo and the real cell needs no
simulator, so Isaac Lab's launcher flags (``--headless``, ``--enable_cameras``, ...) are
accepted and ignored.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _launch import run_command  # noqa: E402


def main(argv: list[str] | None = None) -> None:
    run_command("tasks/record.py", ["record"], argv, "the twin is MuJoCo")


if __name__ == "__main__":
    main()
