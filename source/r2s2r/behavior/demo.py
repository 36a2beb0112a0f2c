"""Source demonstrations: real episodes read from a dataset and split into subtasks.

A demo is split into ``approach`` (from home until the final descent onto the object),
``grasp`` (descent, closing the hand and lifting the object clear of the belt), ``carry``
(to above the bin) and ``release`` (opening the hand and what follows), from signals in the
data: how far the active hand's commanded fingers are closed, and where the recorded object
is (off the belt, over its bin). A person can move the boundaries of any demo with an
override file (YAML, ``{episode_index: {grasp: frame, carry: frame, release: frame}}``, each
the frame where that subtask starts).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import yaml

from r2s2r.data import Dataset, DatasetError
from r2s2r.data.config import ACTION_KEY, ENV_STATE_KEY, STATE_KEY
from r2s2r.sim.embodiment import TCP_POSE_DIM
from r2s2r.sim.robots.wuji_hand import FINGERS, FLEXION_JOINT, JOINTS_PER_FINGER
from r2s2r.spec import TaskSpec
from r2s2r.spec.world import ARM_SIDES

SUBTASKS = ("approach", "grasp", "carry", "release")
# Closure: the commanded flexion of the four fingers' knuckles (the joint that closes every
# grasp, the claw's too), as a share of the most the demo commands. The hand counts as
# closing above ``CLOSED`` and as opening again below ``OPEN`` once the object is off the
# belt.
CLOSED, OPEN = 0.5, 0.3
# The grasp subtask starts this long before the hand starts closing (the final descent) and
# ends once the object is this high above where it rested.
DESCENT_S = 1.2
LIFTED_M = 0.05
# The knuckle flexion of fingers 2-5 (joint 1 of each, the vendor's order).
_FINGER_FLEX = np.array([JOINTS_PER_FINGER * f + FLEXION_JOINT for f in range(1, FINGERS)])


@dataclass
class SourceDemo:
    """One recorded episode as adaptation needs it."""

    name: str  # "<dataset folder>#<episode index>"
    episode: int
    object_name: str
    arm: int  # 0 left, 1 right
    belt_speed: float
    fps: int
    actions: np.ndarray  # (T, action_dim), tcp mode
    tcp: np.ndarray  # (T, 2, 7) measured TCP poses
    objects: np.ndarray  # (T, 7) the object's pose
    starts: dict[str, int] = field(default_factory=dict)  # subtask -> first frame

    @property
    def length(self) -> int:
        return len(self.actions)

    def span(self, subtask: str) -> tuple[int, int]:
        """The frames [start, end) of one subtask."""
        i = SUBTASKS.index(subtask)
        end = self.starts[SUBTASKS[i + 1]] if i + 1 < len(SUBTASKS) else self.length
        return self.starts[subtask], end

    def closure(self) -> np.ndarray:
        """The active hand's commanded closure per frame (0 open .. 1 most closed)."""
        return closure(self.actions, self.arm)


def closure(actions: np.ndarray, arm: int) -> np.ndarray:
    """Commanded finger flexion of hand ``arm`` per frame, scaled to its maximum, from tcp-mode
    actions (T, arms x (7 + hand joints))."""
    hand = actions.reshape(len(actions), len(ARM_SIDES), -1)[:, arm, TCP_POSE_DIM:]
    flex = hand[:, _FINGER_FLEX].mean(axis=1)
    top = flex.max()
    return flex / top if top > 1e-6 else np.zeros_like(flex)


def segment(demo: SourceDemo) -> dict[str, int]:
    """The first frame of each subtask, from the closure and object signals; raises
    ``DatasetError`` naming the demo when it has no grasp or no release."""
    c = demo.closure()
    z = demo.objects[:, 2]
    rest = float(np.median(z[: max(1, demo.fps // 2)]))
    closing = np.flatnonzero(c > CLOSED)
    if not closing.size:
        raise DatasetError(f"{demo.name}: no grasp (the {_side(demo)} hand never closes)")
    close = int(closing[0])
    lifted = np.flatnonzero((z - rest > LIFTED_M) & (np.arange(demo.length) > close))
    if not lifted.size:
        raise DatasetError(f"{demo.name}: no grasp (the object never leaves the belt)")
    carry = int(lifted[0])
    opening = np.flatnonzero((c < OPEN) & (np.arange(demo.length) > carry))
    if not opening.size:
        raise DatasetError(f"{demo.name}: no release (the hand never opens after the lift)")
    release = int(opening[0])
    # The release starts when the hand starts opening: walk back to where closure peaked.
    while release > carry + 1 and c[release - 1] < c[release - 2] - 1e-9:
        release -= 1
    grasp = max(1, close - int(round(DESCENT_S * demo.fps)))
    return {"approach": 0, "grasp": grasp, "carry": carry, "release": release}


def active_arm(tcp: np.ndarray) -> int:
    """The arm (0 left, 1 right) whose TCP (T, 2, 7) moved farthest from where it started."""
    moved = np.linalg.norm(tcp[:, :, :3] - tcp[:1, :, :3], axis=2).max(axis=0)
    return int(np.argmax(moved))


def _side(demo: SourceDemo) -> str:
    return ("left", "right")[demo.arm]


def load_demos(
    root: str | Path,
    task: TaskSpec,
    overrides: str | Path | None = None,
    successful_only: bool = True,
) -> list[SourceDemo]:
    """The (successful) episodes of the dataset at ``root``, segmented. Raises
    ``DatasetError`` if there are none, if the dataset has no object poses, or if a demo
    cannot be segmented."""
    root = Path(root)
    ds = Dataset(root)
    if ENV_STATE_KEY not in ds.features:
        raise DatasetError(
            f"{root}: no object poses ({ENV_STATE_KEY}); adapting demos needs them. Record the "
            "demos on a rig that tracks the object (r2s2r record --rig twin does)"
        )
    names = {o.name for o in task.all_objects}
    fixes = _read_overrides(overrides) if overrides is not None else {}
    demos = []
    for i in range(ds.num_episodes):
        row = ds.episode(i)
        if successful_only and not row["success"]:
            continue
        objects = row.get("object_ids") or []
        if len(objects) != 1 or objects[0] not in names:
            raise DatasetError(
                f"{root}#{i}: object_ids {objects} must name one object of task {task.name}"
            )
        arrays = ds.episode_arrays(i)
        state = arrays[STATE_KEY].astype(float)
        actions = arrays[ACTION_KEY].astype(float)
        tcp = ds.contract.split_state(state)["tcp_pose"]
        demo = SourceDemo(
            name=f"{root.name}#{i}",
            episode=i,
            object_name=objects[0],
            arm=active_arm(tcp),
            belt_speed=float(row["belt_speed"]),
            fps=ds.fps,
            actions=actions,
            tcp=tcp,
            objects=arrays[ENV_STATE_KEY].astype(float),
        )
        demo.starts = segment(demo)
        if i in fixes:
            demo.starts.update(fixes[i])
            _check_starts(demo, overrides)
        demos.append(demo)
    if not demos:
        which = "successful episodes" if successful_only else "episodes"
        raise DatasetError(f"{root}: no {which} to adapt")
    return demos


def _read_overrides(path: str | Path) -> dict[int, dict[str, int]]:
    try:
        raw = yaml.safe_load(Path(path).read_text()) or {}
    except (OSError, yaml.YAMLError) as err:
        raise DatasetError(f"{path}: cannot read the segment overrides ({err})") from err
    if not isinstance(raw, dict):
        raise DatasetError(f"{path}: expected a mapping of episode index -> subtask starts")
    out: dict[int, dict[str, int]] = {}
    for episode, starts in raw.items():
        if not isinstance(episode, int) or not isinstance(starts, dict):
            raise DatasetError(f"{path}: entry {episode!r}: expected int -> {{subtask: frame}}")
        bad = set(starts) - set(SUBTASKS[1:])
        if bad:
            raise DatasetError(
                f"{path}: episode {episode}: unknown subtasks {sorted(bad)}; "
                f"one of {list(SUBTASKS[1:])}"
            )
        out[episode] = {k: int(v) for k, v in starts.items()}
    return out


def _check_starts(demo: SourceDemo, source: str | Path | None) -> None:
    frames = [demo.starts[s] for s in SUBTASKS]
    if frames != sorted(set(frames)) or frames[-1] >= demo.length:
        raise DatasetError(
            f"{source}: episode {demo.episode}: subtask starts {demo.starts} must increase "
            f"and lie within its {demo.length} frames"
        )
