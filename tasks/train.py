"""Train a policy: ``python tasks/train.py --preset tiny --real DIR --out RUN ...``.

The same options as ``r2s2r train``. It also runs as ``isaaclab.sh -p tasks/train.py`` (or
under Isaac Lab's Python): training needs no simulator, so Isaac Lab's launcher flags
(``--headless``, ``--enable_cameras``, ``--livestream N``, ``--kit_args "..."``, ...) are
accepted and ignored, with or without Isaac Lab installed (``tasks/_launch.py``).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _launch import run_command  # noqa: E402


def main(argv: list[str] | None = None) -> None:
    run_command("tasks/train.py", ["train"], argv, "no simulator needed")


if __name__ == "__main__":
    main()
