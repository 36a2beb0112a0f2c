"""Validated, immutable configuration types; YAML presets (packaged, or the user's
``config/``) load into them."""

from r2s2r.spec.base import Spec, SpecError
from r2s2r.spec.task import BinSpec, ObjectSpec, TaskSpec
from r2s2r.spec.world import CameraSpec, Pose, WorldSpec

__all__ = [
    "BinSpec",
    "CameraSpec",
    "ObjectSpec",
    "Pose",
    "Spec",
    "SpecError",
    "TaskSpec",
    "WorldSpec",
]
