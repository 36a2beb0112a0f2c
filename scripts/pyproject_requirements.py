"""Print requirements from pyproject.toml, one a line, for pip install -r.

Arguments name core dependencies (``numpy``: the dependency with its specifier, as pinned
there) or extras (``[flexiv]``: all of that extra's requirements). A venv that needs part of
the core (the Flexiv conformance venv, ``make flexiv-venv``) installs it with the project's
own pins. An unknown name fails.
"""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"


def requirement_name(requirement: str) -> str:
    """The distribution name a requirement string starts with, normalised (PEP 503)."""
    match = re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", requirement)
    if match is None:
        raise ValueError(f"not a requirement: {requirement!r}")
    return re.sub(r"[-_.]+", "-", match[0]).lower()


def select(names: list[str]) -> list[str]:
    project = tomllib.loads(PYPROJECT.read_text())["project"]
    core = {requirement_name(r): r for r in project["dependencies"]}
    extras = project["optional-dependencies"]
    lines = []
    for name in names:
        if name.startswith("[") and name.endswith("]"):
            if name[1:-1] not in extras:
                raise SystemExit(f"pyproject.toml has no extra {name}; it has {sorted(extras)}")
            lines.extend(extras[name[1:-1]])
        elif requirement_name(name) in core:
            lines.append(core[requirement_name(name)])
        else:
            raise SystemExit(f"{name!r} is not a core dependency in pyproject.toml")
    return lines


if __name__ == "__main__":
    print("\n".join(select(sys.argv[1:])))
