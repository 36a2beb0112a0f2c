"""TaskSpec: what the pick-and-sort task is (objects, bins, belt, schedule, success)."""

from __future__ import annotations

from typing import Annotated, Literal

import numpy as np
from pydantic import Field, model_validator

from r2s2r.spec.base import NonNeg, Pos, Spec, Unit

Shape = Literal["box", "cylinder", "sphere", "capsule", "ellipsoid"]
# Number of size parameters MuJoCo takes for each primitive (half-sizes / radius / half-length).
SHAPE_SIZES: dict[str, int] = {"box": 3, "cylinder": 2, "sphere": 1, "capsule": 2, "ellipsoid": 3}


class ObjectSpec(Spec):
    """One graspable object: a primitive shape with mass, colour and a sorting category."""

    name: str
    shape: Shape
    # MuJoCo size parameters in metres (half-extents, radius, half-length).
    size: tuple[Pos, ...]
    mass: Pos
    rgba: tuple[Unit, Unit, Unit, Unit]
    category: str
    friction: Pos = 1.0

    @model_validator(mode="after")
    def _check_size(self) -> ObjectSpec:
        want = SHAPE_SIZES[self.shape]
        if len(self.size) != want:
            raise ValueError(f"size: a {self.shape} takes {want} size values, got {len(self.size)}")
        return self

    @property
    def rest_height(self) -> float:
        """Half-height of the object resting upright on a flat surface."""
        if self.shape in ("box", "ellipsoid"):
            return self.size[2]
        if self.shape == "sphere":
            return self.size[0]
        if self.shape == "cylinder":
            return self.size[1]
        return self.size[0] + self.size[1]  # Capsule standing on its end.

    def half_extent(self, direction: np.ndarray, axes: np.ndarray) -> float:
        """How far the upright object reaches from its centre along a horizontal
        ``direction`` when its axes (3x3, one per column, cell frame) are ``axes``."""
        if self.shape not in ("box", "ellipsoid"):
            return float(self.size[0])  # Round about the vertical.
        return float(sum(abs(direction @ axes[:, i]) * self.size[i] for i in range(3)))


class BinSpec(Spec):
    """An open bin; it accepts the listed object categories."""

    name: str
    categories: tuple[str, ...] = Field(min_length=1)
    # Inner half-extents (x, y) and wall height in metres.
    half_size: tuple[Pos, Pos]
    wall_height: Pos
    rgba: tuple[Unit, Unit, Unit, Unit] = (0.25, 0.3, 0.35, 1.0)


class BeltSpec(Spec):
    """Belt speed: drawn uniformly from ``speed_range`` per episode, or ``fixed_speed`` in every
    episode when that is set (the fast-belt condition sets it to ``fast_speed``)."""

    speed_range: tuple[Pos, Pos]
    fast_speed: Pos
    # Set, episodes run at this speed and draw none (the random stream skips the draw).
    fixed_speed: Pos | None = None

    @model_validator(mode="after")
    def _check(self) -> BeltSpec:
        lo, hi = self.speed_range
        if lo > hi:
            raise ValueError(f"speed_range: min {lo} is above max {hi}")
        if self.fast_speed <= hi:
            raise ValueError(f"fast_speed: {self.fast_speed} must exceed the nominal max {hi}")
        if self.fixed_speed is not None and self.fixed_speed > self.fast_speed:
            raise ValueError(
                f"fixed_speed: {self.fixed_speed} is above fast_speed {self.fast_speed}, the "
                "fastest the belt is built for"
            )
        return self


class SpawnSpec(Spec):
    """When and where objects appear at the upstream end of the belt."""

    count: Annotated[int, Field(ge=1)] = 1
    first_at_s: NonNeg = 0.0
    interval_s: Pos = 4.0
    # Distance from the upstream end of the belt to the spawn point, metres.
    upstream_offset: NonNeg = 0.1
    lateral_jitter: NonNeg = 0.05
    random_yaw: bool = True
    # Generated episodes scale each object uniformly by a factor drawn from this range. The
    # cell's own episodes (the env, the twin) present objects at their spec sizes, as the
    # real objects are.
    size_scale: tuple[Pos, Pos] = (1.0, 1.0)
    # Which of the task's object lists the spawned objects are drawn from (the novel-objects
    # condition draws from ``novel_objects``).
    pool: Literal["objects", "novel_objects"] = "objects"

    @model_validator(mode="after")
    def _check_scale(self) -> SpawnSpec:
        lo, hi = self.size_scale
        if lo > hi:
            raise ValueError(f"size_scale: expected [low, high] with low <= high, got {[lo, hi]}")
        return self


class SuccessSpec(Spec):
    """An object is sorted when it rests (speed below ``settle_speed``) inside its bin."""

    settle_speed: Pos = 0.03
    # An object this far below the belt top, outside every bin, has been dropped.
    drop_depth: Pos = 0.15


class ShiftSpec(Spec):
    """What the shifted evaluation conditions change to (``r2s2r.spec.conditions``)."""

    red_light_rgb: tuple[Unit, Unit, Unit] = (1.0, 0.25, 0.2)


class TaskSpec(Spec):
    """The pick-and-sort task."""

    name: str
    instruction: str = "Pick the {object} off the belt and put it in the {bin}."
    objects: tuple[ObjectSpec, ...] = Field(min_length=1)
    # Objects that only the novel-objects shift uses.
    novel_objects: tuple[ObjectSpec, ...] = ()
    bins: tuple[BinSpec, ...] = Field(min_length=1)
    belt: BeltSpec
    spawn: SpawnSpec = SpawnSpec()
    episode_s: Pos = 12.0
    control_hz: Pos = 50.0
    success: SuccessSpec = SuccessSpec()
    shifts: ShiftSpec = ShiftSpec()

    @model_validator(mode="after")
    def _check_sorting_rule(self) -> TaskSpec:
        names = [o.name for o in self.all_objects]
        dup = {n for n in names if names.count(n) > 1}
        if dup:
            raise ValueError(f"objects: duplicate object names {sorted(dup)}")
        owners: dict[str, str] = {}
        for b in self.bins:
            for c in b.categories:
                if c in owners:
                    raise ValueError(f"bins: category {c!r} is in both {owners[c]} and {b.name}")
                owners[c] = b.name
        for o in self.all_objects:
            if o.category not in owners:
                raise ValueError(
                    f"objects: {o.name} has category {o.category!r}, which no bin accepts "
                    f"(bins accept {sorted(owners)})"
                )
        return self

    @model_validator(mode="after")
    def _check_settle(self) -> TaskSpec:
        settle = self.success.settle_speed
        if self.belt.speed_range[0] <= settle:
            raise ValueError(
                f"belt.speed_range: the slowest belt speed {self.belt.speed_range[0]} must exceed "
                f"success.settle_speed {settle}, or objects riding the belt "
                "would count as resting"
            )
        fixed = self.belt.fixed_speed
        if fixed is not None and fixed <= settle:
            raise ValueError(
                f"belt.fixed_speed: {fixed} must exceed success.settle_speed {settle}, or "
                "objects riding the belt would count as resting"
            )
        return self

    @model_validator(mode="after")
    def _check_pool(self) -> TaskSpec:
        if not self.spawn_pool:
            raise ValueError(f"spawn.pool: the task's {self.spawn.pool} list is empty")
        return self

    @property
    def all_objects(self) -> tuple[ObjectSpec, ...]:
        """Every object the scene holds: the nominal ones, then the novel ones."""
        return self.objects + self.novel_objects

    @property
    def spawn_pool(self) -> tuple[ObjectSpec, ...]:
        """The objects episodes draw from (``spawn.pool``)."""
        return self.novel_objects if self.spawn.pool == "novel_objects" else self.objects

    def object_named(self, name: str) -> ObjectSpec:
        """The object (nominal or novel) called ``name``."""
        for obj in self.all_objects:
            if obj.name == name:
                return obj
        raise KeyError(f"task {self.name}: no object {name!r}")

    def bin_for(self, obj: ObjectSpec) -> BinSpec:
        """The sorting rule: the bin whose categories include the object's category."""
        for b in self.bins:
            if obj.category in b.categories:
                return b
        raise KeyError(obj.category)

    def instruction_for(self, object_name: str) -> str:
        """The instruction of an episode that presents ``object_name``."""
        obj = self.object_named(object_name)
        return self.instruction.format(
            object=obj.name.replace("_", " "), bin=self.bin_for(obj).name
        )
