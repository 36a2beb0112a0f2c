"""Evaluate a policy: ``python tasks/evaluate.py --policy RUN --protocol paper --out DIR ...``.

The same options as ``r2s2r eval``. It also runs as ``isaaclab.sh -p tasks/evaluate.py`` (or
under Isaac Lab's Python): the trials run on r2s2r's MuJoCo twin (or the real cell), not in
Isaac Sim, so Isaac Lab's launcher flags (``--headless``, ``--enable_cameras``,
``--livestream N``, ...) are accepted and ignored, with or without Isaac Lab installed.
"""

from __future__ import annotations

import sys
from pathlib import Path

# The launcher flags are the ones tasks/train.py ignores (this script's folder is on the path).
sys.path.insert(0, str(Path(__file__).resolve().parent))
from train import strip_launcher_flags  # noqa: E402


def main(argv: list[str] | None = None) -> None:
    try:
        import r2s2r  # noqa: F401
    except ImportError:  # Run from a checkout without installing.
        sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "source"))
    from r2s2r.cli import main as cli_main

    ours, ignored = strip_launcher_flags(list(sys.argv[1:] if argv is None else argv))
    if ignored:
        print(
            f"tasks/evaluate.py: ignoring Isaac Lab launcher flags {ignored} (the twin is MuJoCo)"
        )
    sys.argv = ["tasks/evaluate.py", "eval", *ours]
    cli_main()


if __name__ == "__main__":
    main()
