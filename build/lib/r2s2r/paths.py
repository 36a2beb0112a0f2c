"""Where config comes from: the user's config folder over the presets shipped in the package.

A preset ``<kind>/<name>.yaml`` (``task/pick_sort.yaml``, ``world/nominal.yaml``, ...) is read
from the user's config folder when it is there, else from ``r2s2r/presets`` inside the
installed package. The user's folder is ``$R2S2R_CONFIG_DIR`` when that is set, else
``config/`` in the current working directory; grounding's ``world/grounded.yaml`` lives only
there.
"""

from __future__ import annotations

import os
from importlib.resources import files
from importlib.resources.abc import Traversable
from pathlib import Path

CONFIG_DIR_ENV = "R2S2R_CONFIG_DIR"


def user_config_dir() -> Path:
    """The user's config folder: ``$R2S2R_CONFIG_DIR`` if set, else ``./config``."""
    env = os.environ.get(CONFIG_DIR_ENV)
    return Path(env) if env else Path("config")


def presets_dir() -> Traversable:
    """The presets shipped with the package (``r2s2r/presets``, package data)."""
    return files("r2s2r") / "presets"


def find_config(kind: str, name: str) -> Path | Traversable | None:
    """``<kind>/<name>.yaml`` from the user's config folder, else from the packaged presets;
    None where neither has it."""
    user = user_config_dir() / kind / f"{name}.yaml"
    if user.is_file():
        return user
    packaged = presets_dir() / kind / f"{name}.yaml"
    return packaged if packaged.is_file() else None
