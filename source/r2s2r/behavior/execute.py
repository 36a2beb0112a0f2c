"""Run a command sequence in simulation without cameras, record what happened, and say why
an attempt failed; render kept attempts afterwards from their recorded states.

Physics first, pixels later: attempts step the world without rendering; only kept episodes
are replayed, state by state, through the renderer (the states are set, not re-simulated,
so the rendered episode is exactly the recorded one).
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field

import mujoco
import numpy as np

from r2s2r.behavior.instance import TaskInstance
from r2s2r.behavior.kinematics import FIXED_BODIES, arm_chain, body_geoms, self_contacts
from r2s2r.sim.env import PickSortEnv
from r2s2r.sim.replay import StateRenderer
from r2s2r.sim.scene import OBJECT_PREFIX
from r2s2r.spec import TaskSpec, WorldSpec
from r2s2r.spec.world import ARM_SIDES

# Failure reasons: the first six judged from an execution (in this order; ``unstable``: the
# physics diverged, and MuJoCo reset the state; ``collision``: an arm link touched the
# cell's fixed parts, the other arm or its own arm, which fails an attempt even if the
# object was sorted), the last two given to an instance the behavior could not produce
# commands for (a demo that cannot be adapted to it, no collision-free plan).
REASONS = (
    "unstable",
    "collision",
    "missed_grasp",
    "dropped",
    "wrong_bin",
    "timeout",
    "unreachable",
    "planner_failure",
)
# The object counts as lifted once this far above where it rested on the belt.
LIFT_M = 0.03
# A hand link's finger (1: the thumb) in its name: the vendor's ``finger{f}_link{k}``.
_FINGER = re.compile(r"finger([1-5])_")


@dataclass
class Attempt:
    """What one execution did: per control step the state before the action, the action,
    the object's pose, and the physics state to render it from."""

    instance: TaskInstance
    actions: np.ndarray  # (T, action_dim)
    states: np.ndarray  # (T, state_dim) proprio
    objects: np.ndarray  # (T, 7)
    qpos: np.ndarray  # (T, nq)
    qvel: np.ndarray  # (T, nv)
    success: bool = False
    status: str = "pending"
    reason: str | None = None  # None when it succeeded
    instruction: str = ""
    # When the object first left the belt (control step), and how many fingers (of five)
    # and whether the palm touched it then: the grasp type.
    lift_step: int | None = None
    fingers_in_contact: int = 0
    palm_in_contact: bool = False
    timings: dict[str, float] = field(default_factory=dict)


class Executor:
    """Executes action sequences in one simulated world (MuJoCo, CPU, no cameras)."""

    def __init__(self, world: WorldSpec, task: TaskSpec, randomize_appearance: bool = True) -> None:
        self.env = PickSortEnv(
            world=world, task=task, images=False, randomize_appearance=randomize_appearance
        )
        model = self.env.model
        # Attempts run in one world; its contacts are read from the physics after each step.
        self._physics = self.env.physics
        # Per geom: its place along each arm's chain, which arm's link it is (-1: none;
        # the hands may touch the belt), and whether it is a fixed part.
        self._chains = [arm_chain(model, side) for side in ARM_SIDES]
        self._arm_of = np.full(model.ngeom, -1)
        for i, chain in enumerate(self._chains):
            self._arm_of[(chain >= 1) & (chain <= 8)] = i
        self._fixed = np.zeros(model.ngeom, dtype=bool)
        fixed = {model.body(b).id for b in FIXED_BODIES}
        self._fixed[body_geoms(model, fixed)] = True
        # Hand geom -> finger number (1 thumb .. 5), 0 for the palm.
        self._finger_of: dict[int, int] = {}
        for g in range(model.ngeom):
            body = model.body(model.geom_bodyid[g]).name
            if "_hand_" in body:
                finger = _FINGER.search(body.split("_hand_")[1])
                self._finger_of[g] = int(finger[1]) if finger else 0

    def run(
        self, instance: TaskInstance, actions: np.ndarray, seed: int, max_steps: int | None = None
    ) -> Attempt:
        """Reset to ``instance`` (appearance drawn from ``seed``), apply ``actions`` one per
        control step (the last one held) until the task is judged or the episode (or
        ``max_steps``) ends."""
        env = self.env
        obs, info = env.reset(seed=seed, options=instance.reset_options())
        physics = env.physics
        rest_z = float(info["object_pos"][0, 2])
        collided = unstable = False
        lift_step: int | None = None
        touching: set[int] = set()
        obj_geom = env.model.geom(f"{OBJECT_PREFIX}{instance.object_name}").id
        rows: dict[str, list[np.ndarray]] = {k: [] for k in ("a", "s", "o", "q", "v")}
        last = len(actions) - 1
        for j in range(min(env.cell.max_steps, max_steps or env.cell.max_steps)):
            qpos, qvel = physics.state()
            action = actions[min(j, last)]
            rows["s"].append(env.contract.state(obs))
            rows["o"].append(np.concatenate([info["object_pos"][0], info["object_quat"][0]]))
            rows["q"].append(qpos[0].copy())
            rows["v"].append(qvel[0].copy())
            rows["a"].append(action)
            obs, _, terminated, truncated, info = env.step(action)
            if info["unstable"]:
                unstable = True
                break
            if lift_step is None and info["object_pos"][0, 2] - rest_z > LIFT_M:
                lift_step, touching = j, self._hand_parts_touching(obj_geom)
            collided = collided or self._arm_hits_cell()
            if terminated or truncated:
                break
        status = info["object_status"][0]
        attempt = Attempt(
            instance=instance,
            actions=np.asarray(rows["a"]),
            states=np.asarray(rows["s"]),
            objects=np.asarray(rows["o"]),
            qpos=np.asarray(rows["q"]),
            qvel=np.asarray(rows["v"]),
            success=bool(info["success"]),
            status=status,
            instruction=obs["instruction"],
            lift_step=lift_step,
            fingers_in_contact=len(touching - {0}),
            palm_in_contact=0 in touching,
        )
        if unstable:
            attempt.success, attempt.reason = False, "unstable"
        elif collided:
            attempt.success, attempt.reason = False, "collision"
        elif not attempt.success:
            attempt.reason = _reason(status, lift_step is not None)
        return attempt

    def _hand_parts_touching(self, obj_geom: int) -> set[int]:
        g1, g2, _ = self._physics.contacts(0)
        mine = np.concatenate([g1[g2 == obj_geom], g2[g1 == obj_geom]])
        return {self._finger_of[int(g)] for g in mine if int(g) in self._finger_of}

    def raw_steps_per_s(self, seconds: float = 1.0) -> float:
        """``mujoco.mj_step`` calls per second on this world's model from its current state,
        with nothing else done: what the executor's physics rate compares with."""
        model = self.env.model
        data = mujoco.MjData(model)
        src = self.env.physics.mjdata(0)
        data.qpos[:], data.qvel[:], data.ctrl[:] = src.qpos, src.qvel, src.ctrl
        steps, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            mujoco.mj_step(model, data, nstep=50)
            steps += 50
        return steps / (time.perf_counter() - start)

    def _arm_hits_cell(self) -> bool:
        """Whether an arm link touches a fixed part, the other arm's links, or its own arm
        (``self_contacts``) in the last step's contacts."""
        g1, g2, _ = self._physics.contacts(0)
        if len(g1) == 0:
            return False
        a1, a2 = self._arm_of[g1], self._arm_of[g2]
        hits = ((a1 >= 0) & self._fixed[g2]) | ((a2 >= 0) & self._fixed[g1])
        hits |= (a1 >= 0) & (a2 >= 0) & (a1 != a2)
        for chain in self._chains:
            hits |= self_contacts(chain, g1, g2)
        return bool(hits.any())

    def close(self) -> None:
        self.env.close()


def _reason(status: str, lifted: bool) -> str:
    if not lifted:
        return "missed_grasp"
    if status == "dropped":
        return "dropped"
    if status == "wrong_bin":
        return "wrong_bin"
    return "timeout"


class ReplayRenderer:
    """Renders the three views of an attempt's recorded states (physics first, pixels later;
    ``r2s2r.sim.replay``)."""

    def __init__(self, world: WorldSpec, task: TaskSpec, randomize_appearance: bool = True):
        self.env = PickSortEnv(
            world=world, task=task, images=False, randomize_appearance=randomize_appearance
        )
        self._states = StateRenderer(self.env.physics, self.env.world_spec)

    def render(self, attempt: Attempt, seed: int) -> dict[str, np.ndarray]:
        """The views {camera: (T, H, W, 3) uint8} of ``attempt``'s states, with the
        appearance that ``seed`` draws (the one it ran with)."""
        self.env.reset(seed=seed, options=attempt.instance.reset_options())
        return self._states.episode(attempt.qpos, attempt.qvel)

    def close(self) -> None:
        self._states.close()
        self.env.close()
