"""Where the project's config and outputs live."""

from __future__ import annotations

import os
from pathlib import Path

_REPO_ROOT = Path(__file__).resolve().parents[2]


def config_dir() -> Path:
    """The ``config/`` folder: ``$R2S2R_CONFIG_DIR`` if set, else the repository's."""
    env = os.environ.get("R2S2R_CONFIG_DIR")
    return Path(env) if env else _REPO_ROOT / "config"
