"""Optional heavy dependencies: imported where they are used, with an install hint if absent.

Each optional package is imported in exactly one module of r2s2r (MuJoCo Warp and Warp:
``r2s2r.sim.warp_physics``), which turns a missing package into ``missing_extra``'s error.
"""

from __future__ import annotations


def missing_extra(err: ImportError, extra: str) -> ImportError:
    """The error to raise when an optional package failed to import."""
    return ImportError(
        f"{err.name or 'an optional package'} is needed for this feature but could not be "
        f"imported ({err}). Install the '{extra}' extra: pip install 'r2s2r[{extra}]' (from "
        f"a checkout: pip install -e '.[{extra}]')."
    )
