"""Task instances: what one generated episode is asked to do.

A task instance fixes what the cell otherwise draws when an episode starts: which object is
presented, where across the belt and turned how, and the belt's speed. Every behavior and
world draws its instances from ``draw_instance``, so that the four simulated datasets differ
only in world and behavior.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from scipy.spatial.transform import Rotation

from r2s2r.spec import ObjectSpec, TaskSpec, WorldSpec


@dataclass(frozen=True)
class TaskInstance:
    """One episode's object, spawn pose and belt speed."""

    object_name: str
    # Offset across the belt (m) and turn about the vertical (rad) where the object appears.
    lateral: float
    yaw: float
    belt_speed: float  # m/s
    # The object's size as a factor of its spec size (uniform scaling).
    scale: float = 1.0

    def reset_options(self) -> dict[str, Any]:
        """The env's ``reset(options=...)`` that starts this instance."""
        return {
            "objects": [self.object_name],
            "spawn": (self.belt_speed, np.array([self.lateral]), np.array([self.yaw])),
            "scales": np.array([self.scale]),
        }

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def draw_instance(
    task: TaskSpec, rng: np.random.Generator, objects: list[str] | None = None
) -> TaskInstance:
    """An instance from the task's distribution (the one the cell draws from), over
    ``objects`` (default: all of the task's objects)."""
    names = objects or [o.name for o in task.objects]
    spawn, belt = task.spawn, task.belt
    name = str(names[rng.integers(len(names))])
    lateral = float(rng.uniform(-1.0, 1.0) * spawn.lateral_jitter)
    yaw = float(rng.uniform(-np.pi, np.pi)) if spawn.random_yaw else 0.0
    speed = float(rng.uniform(*belt.speed_range))
    lo, hi = spawn.size_scale
    scale = float(rng.uniform(lo, hi)) if hi > lo else lo
    return TaskInstance(name, lateral, yaw, speed, scale)


def scaled_object(task: TaskSpec, instance: TaskInstance) -> ObjectSpec:
    """The instance's object at the instance's size."""
    obj = task.object_named(instance.object_name)
    if instance.scale == 1.0:
        return obj
    return obj.replace(size=tuple(v * instance.scale for v in obj.size))


def check_instance(task: TaskSpec, world: WorldSpec, instance: TaskInstance) -> None:
    """Refuse an instance the cell cannot present: an unknown object, an object that would
    overhang the belt's edge, or a belt speed the belt cannot run."""
    names = [o.name for o in task.all_objects]
    if instance.object_name not in names:
        raise ValueError(f"task instance: unknown object {instance.object_name!r}; known: {names}")
    obj = scaled_object(task, instance)
    lo, hi = task.spawn.size_scale
    if not lo - 1e-9 <= instance.scale <= hi + 1e-9 and instance.scale != 1.0:
        raise ValueError(
            f"task instance: object scale {instance.scale} outside the task's size_scale "
            f"[{lo}, {hi}]"
        )
    half_width = world.layout.belt.width / 2
    if obj.shape in ("box", "ellipsoid"):
        reach = abs(instance.lateral) + float(np.hypot(obj.size[0], obj.size[1]))
    else:
        reach = abs(instance.lateral) + obj.size[0]
    if reach > half_width:
        raise ValueError(
            f"task instance: {instance.object_name} at {instance.lateral:+.3f} m across the "
            f"belt reaches {reach:.3f} m from its centre, beyond the belt's half width "
            f"{half_width:.3f} m"
        )
    top = 2.0 * max(task.belt.speed_range[1], task.belt.fast_speed)
    if not 0.0 < instance.belt_speed <= top:
        raise ValueError(
            f"task instance: belt speed {instance.belt_speed} m/s outside (0, {top}] m/s"
        )


def object_pose_on_belt(
    task: TaskSpec, world: WorldSpec, instance: TaskInstance, t: np.ndarray
) -> np.ndarray:
    """Where the belt carries the instance's object at times ``t`` (s) after the episode
    starts, if nothing touches it: poses (len(t), 7) in the cell frame."""
    belt = world.layout.belt
    obj = scaled_object(task, instance)
    heading = Rotation.from_euler("z", belt.yaw_deg, degrees=True)
    t = np.atleast_1d(np.asarray(t, dtype=float))
    along = -belt.length / 2 + task.spawn.upstream_offset + instance.belt_speed * t
    local = np.stack(
        [along, np.full_like(t, instance.lateral), np.full_like(t, obj.rest_height)], axis=1
    )
    pos = np.asarray(belt.pos) + heading.apply(local)
    quat = (heading * Rotation.from_euler("z", instance.yaw)).as_quat(scalar_first=True)
    return np.concatenate([pos, np.tile(quat, (len(t), 1))], axis=1)
