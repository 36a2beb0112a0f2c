"""Explicit registries of named things (worlds, tasks, conditions, behaviors, planners, ...).

A registry is a plain mapping filled by explicit ``register`` calls: registering a name twice
raises, and an unknown name fails with the nearest registered names ("did you mean").
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

T = TypeVar("T")


class RegistryError(KeyError, ValueError):
    """A name registered twice, or looked up but never registered (a bad value, too, so that
    callers reporting bad input catch it with the rest)."""

    def __str__(self) -> str:
        # KeyError quotes its argument; the message reads better as plain text.
        return str(self.args[0]) if self.args else ""


class Registry(Generic[T]):
    """Names -> entries of one kind (``kind`` names it in messages, e.g. "behavior")."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._entries: dict[str, T] = {}

    def register(self, name: str, entry: T) -> T:
        """Add ``entry`` under ``name``; a name already taken raises."""
        if not name or not isinstance(name, str):
            raise RegistryError(f"{self.kind} names must be non-empty strings, got {name!r}")
        if name in self._entries:
            raise RegistryError(f"{self.kind} {name!r} is already registered")
        self._entries[name] = entry
        return entry

    def add(self, name: str) -> Callable[[T], T]:
        """Decorator form of ``register``."""

        def wrap(entry: T) -> T:
            return self.register(name, entry)

        return wrap

    def get(self, name: str) -> T:
        """The entry named ``name``; an unknown name lists the nearest known ones."""
        try:
            return self._entries[name]
        except KeyError:
            raise RegistryError(self.unknown(name)) from None

    def unknown(self, name: object) -> str:
        """The message for a name that is not registered."""
        known = sorted(self._entries)
        close = difflib.get_close_matches(str(name), known, n=3, cutoff=0.5)
        hint = f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
        return f"unknown {self.kind} {name!r}{hint} (known: {', '.join(known) or 'none'})"

    def names(self) -> tuple[str, ...]:
        """Registered names, in registration order."""
        return tuple(self._entries)

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)
