"""The r2s2r panel for Isaac Sim: ``state`` holds what it shows and does (Kit-free, tested
with pytest); ``extension`` draws it with omni.ui (imported only inside Kit)."""

from __future__ import annotations

import importlib.util


def _in_kit() -> bool:
    try:
        return importlib.util.find_spec("omni.ext") is not None
    except ModuleNotFoundError:  # No ``omni`` package at all.
        return False


# Kit imports ``r2s2r_panel`` to find the extension class; outside Kit only ``state`` loads.
if _in_kit():
    from r2s2r_panel.extension import R2s2rPanelExtension

    __all__ = ["R2s2rPanelExtension"]
