"""Option choices several commands share."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

import typer


# ``--rig``: the kinds of ``r2s2r.rig.kinds.RIGS`` (tests/test_rig_kinds.py holds the two
# equal; the CLI's modules do not import the rig layer to parse options).
class RigKind(StrEnum):
    twin = "twin"
    hardware = "hardware"


class ExecutionKind(StrEnum):
    rtc = "rtc"
    blend = "blend"
    sync = "sync"


# The twin's hidden cell, apart from the seed (``TwinRig``'s ``cell``).
CellOpt = Annotated[
    int | None,
    typer.Option(
        "--cell",
        min=0,
        help="twin: the hidden cell (its true parameters and flaws), apart from --seed; "
        "default: the seed's own",
    ),
]


# A Ray cluster for tasks that scale out (r2s2r.scaleout); the same results as without.
RayOpt = Annotated[
    str | None,
    typer.Option(
        "--ray",
        envvar="RAY_ADDRESS",
        help="a Ray cluster running the tasks (address, auto, or local; default: local "
        "processes); the results are the same as without",
    ),
]
