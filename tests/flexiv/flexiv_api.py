"""What a real flexivrdk module offers, read from the module itself.

flexivrdk is a pybind11 extension: its functions carry their signatures in the first lines of
their docstrings (``SwitchMode(self: flexivrdk.flexivrdk.Robot, arg0: ...Mode) -> None``, one
numbered line per overload), which ``inspect.signature`` cannot read. ``problems`` checks the
Flexiv driver's declared SDK names (``SDK_CALLS``, ``SDK_ATTRIBUTES``, ``NRT_CARTESIAN_ARGS``)
against them. Used by tests/flexiv/test_conformance.py, also in a subprocess on flexivrdk 2.1.0.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from r2s2r.rig.hardware.drivers import flexiv


@dataclass(frozen=True)
class Param:
    name: str
    has_default: bool


def split_top_level(text: str) -> list[str]:
    """``text`` split at the commas outside brackets and parentheses."""
    parts, depth, start = [], 0, 0
    for i, char in enumerate(text):
        if char in "[(":
            depth += 1
        elif char in "])":
            depth -= 1
        elif char == "," and depth == 0:
            parts.append(text[start:i].strip())
            start = i + 1
    tail = text[start:].strip()
    return [*parts, tail] if tail else parts


def overloads(func: Any, name: str) -> list[list[Param]]:
    """The parameters (without ``self``) of each overload of pybind11 function ``func``."""
    found = []
    pattern = re.compile(rf"^(?:\d+\. )?{re.escape(name)}\((.*)\) -> ")
    for line in (func.__doc__ or "").splitlines():
        match = pattern.match(line.strip())
        if match is None or match[1] == "*args, **kwargs":
            continue
        params = []
        for part in split_top_level(match[1]):
            param = part.split(":")[0].strip()
            if param != "self":
                params.append(Param(param, re.search(r"\s=\s", part) is not None))
        found.append(params)
    return found


def resolve(sdk: Any, name: str) -> tuple[Any, str]:
    """The function a declared call names (a class stands for its ``__init__``), and its name."""
    owner, _, member = name.partition(".")
    cls = getattr(sdk, owner)
    if not member:
        return cls.__init__, "__init__"
    return getattr(cls, member), member


def accepts(sdk: Any, name: str, positional: int, keywords: tuple[str, ...] = ()) -> bool:
    """Whether some overload of the declared call ``name`` binds ``positional`` arguments and
    the keyword arguments ``keywords``."""
    func, short = resolve(sdk, name)
    for params in overloads(func, short):
        required = sum(not p.has_default for p in params)
        rest = {p.name for p in params[positional:]}
        if required - len(keywords) <= positional <= len(params) and set(keywords) <= rest:
            return True
    return False


def problems(sdk: Any) -> list[str]:
    """Each declared name of the Flexiv driver that ``sdk`` lacks or calls differently."""
    found = []
    for name, positional in flexiv.SDK_CALLS.items():
        try:
            func, short = resolve(sdk, name)
        except AttributeError:
            found.append(f"{name}: missing")
            continue
        if not overloads(func, short):
            found.append(f"{name}: no signature in its docstring")
        elif not accepts(sdk, name, positional):
            found.append(f"{name}: takes no {positional} positional arguments")
    for name in flexiv.SDK_ATTRIBUTES:
        owner, _, member = name.partition(".")
        target = getattr(sdk, owner, None)
        if target is None or (member and not hasattr(target, member)):
            found.append(f"{name}: missing")
    cmd = getattr(sdk, "NrtCartesianCmd", None)
    if cmd is not None:
        names = [[p.name for p in params] for params in overloads(cmd.__init__, "__init__")]
        if list(flexiv.NRT_CARTESIAN_ARGS) not in names:
            found.append(f"NrtCartesianCmd: parameters {names}, not {flexiv.NRT_CARTESIAN_ARGS}")
    return found
