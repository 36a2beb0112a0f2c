"""``python tools/studio.py``: r2s2r Studio without installing it (same as ``r2s2r-studio``)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from r2s2r_studio.main import main  # noqa: E402

if __name__ == "__main__":
    raise SystemExit(main())
