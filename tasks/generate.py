"""Generate simulated demonstrations: ``python tasks/generate.py --source DEMOS --out DIR
--world grounded --behavior adapted --episodes N ...``.

The same options as ``r2s2r generate``. It also runs as ``isaaclab.sh -p tasks/generate.py``
(or under Isaac Lab's Python): attempts run on MuJoCo physics and kept episodes are rendered
by MuJoCo (physics first, pixels later), so Isaac Lab's launcher flags (``--headless``,
``--enable_cameras``, ...) are accepted and ignored. For Isaac Sim RTX views, generate with
``--image-size 0`` or any size and re-render the kept episodes' states with
``tasks/render_isaac.py``.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _launch import run_command  # noqa: E402


def main(argv: list[str] | None = None) -> None:
    run_command(
        "tasks/generate.py",
        ["generate"],
        argv,
        "generation runs on MuJoCo; RTX views come from tasks/render_isaac.py",
    )


if __name__ == "__main__":
    main()
