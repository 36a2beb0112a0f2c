"""The rig a request names, through the rig registry (``r2s2r.rig.kinds``): its kind, and
the registry's refusals (an unknown kind, a missing hardware YAML, an SDK not installed) as
``RequestError``, the service layer's bad input."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from r2s2r.app.jobs import RequestError
from r2s2r.rig.kinds import RIGS, RigError, RigKind, RigOptions
from r2s2r.spec.registry import RegistryError


def rig_kinds() -> tuple[str, ...]:
    """The kinds of rig a request may name, in the registry's order."""
    return RIGS.names()


@contextmanager
def refused() -> Iterator[None]:
    """Raise a ``RigError`` (or an unknown kind) from inside as a ``RequestError``."""
    try:
        yield
    except (RigError, RegistryError) as err:
        raise RequestError(str(err)) from err


def rig_kind(name: str, options: RigOptions | None = None) -> RigKind:
    """The kind ``name`` (``RIGS``); with ``options``, refused where it cannot open with
    them, before anything opens."""
    with refused():
        kind = RIGS.get(name)
        if options is not None:
            kind.check(options)
    return kind
