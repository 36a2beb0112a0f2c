"""Evaluate a policy: ``python tasks/evaluate.py --policy RUN --protocol paper --out DIR ...``.

The same options as ``r2s2r eval``. It also runs as ``isaaclab.sh -p tasks/evaluate.py`` (or
under Isaac Lab's Python): the trials run on r2s2r's MuJoCo twin (or the real cell), not in
Isaac Sim, so Isaac Lab's launcher flags (``--headless``, ``--enable_cameras``,
``--livestream N``, ...) are accepted and ignored, with or without Isaac Lab installed.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _launch import run_command  # noqa: E402


def main(argv: list[str] | None = None) -> None:
    run_command("tasks/evaluate.py", ["eval"], argv, "the twin is MuJoCo")


if __name__ == "__main__":
    main()
