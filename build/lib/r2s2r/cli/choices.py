"""Option choices several commands share."""

from __future__ import annotations

from enum import StrEnum


class RigKind(StrEnum):
    twin = "twin"
    hardware = "hardware"


class ExecutionKind(StrEnum):
    rtc = "rtc"
    blend = "blend"
    sync = "sync"
