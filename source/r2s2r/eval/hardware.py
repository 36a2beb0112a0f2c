"""Evaluation trials on the real cell: the operator sets up each trial's condition and
object, and judges the trial by key, as the twin's truth judges it on the twin.

``HardwareRigs`` is the runner's rig session for a ``HardwareRig``: per trial it asks the
operator (``prompt``) to set the condition up (the red light, the arms at their start pose),
sets the belt to the trial's speed and has the trial's object placed (both drawn from the
trial's seed, as the twin draws them: a fast-belt trial runs at the task's fast speed, a
novel-objects trial presents a novel object). ``KeyJudge`` ends a trial on the operator's
key (``s`` sorted, ``w`` wrong bin, ``d`` dropped, ``f`` failed) and asks for one when the
time runs out (then also ``t``: timeout).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from r2s2r.data.record import KeySource
from r2s2r.eval.protocol import Trial
from r2s2r.eval.runner import EvalError
from r2s2r.rig.interfaces import Rig
from r2s2r.rig.safety import SafetySupervisor
from r2s2r.runtime import EpisodeLog, EpisodeStart
from r2s2r.spec import TaskSpec, WorldSpec
from r2s2r.spec.conditions import apply_condition
from r2s2r.spec.worlds import sorting_arm

if TYPE_CHECKING:
    from r2s2r.rig.hardware import HardwareRig

log = logging.getLogger("r2s2r.eval")
KEY_OUTCOMES = {"s": "sorted", "w": "wrong_bin", "d": "dropped", "f": "failed"}
JUDGE_KEYS_HELP = "s sorted, w wrong bin, d dropped, f failed"
# What the operator does for a condition before its trial starts.
CONDITION_SETUP = {
    "nominal": "the cell as for the demonstrations",
    "red_light": "switch the key light to red",
    "fast_belt": "the belt runs fast (its speed is asked for next)",
    "novel_objects": "a novel object (named next)",
    "all_shifts": "red light, fast belt and a novel object",
}


def trial_draws(task: TaskSpec, seed: int) -> tuple[str, float]:
    """(object, belt speed m/s) of a trial on the real cell, drawn from its seed over the
    condition's task (``task``): the belt's fixed speed where the condition sets one."""
    rng = np.random.default_rng([seed, 7])
    pool = [o.name for o in task.spawn_pool]
    name = pool[int(rng.integers(len(pool)))]
    fixed = task.belt.fixed_speed
    speed = float(fixed) if fixed is not None else float(rng.uniform(*task.belt.speed_range))
    return name, speed


class HardwareRigs:
    """The runner's rig session on the real cell (opened once, supervised once)."""

    kind = "hardware"

    def __init__(
        self,
        rig: HardwareRig,
        task: TaskSpec,
        world: WorldSpec,
        prompt: Callable[[str], str] = input,
    ) -> None:
        self.rig, self.task, self.world, self.prompt = rig, task, world, prompt
        self.sup: SafetySupervisor = rig.supervise()

    def open(self, trial: Trial) -> tuple[Rig, SafetySupervisor, TaskSpec, WorldSpec]:
        if self.sup.estopped:
            raise EvalError(
                "the emergency stop is latched: release it, then run the same command again "
                "to continue at this trial"
            )
        task, world = apply_condition(trial.condition, self.task, self.world)
        return self.rig, self.sup, task, world

    def progress(self, rig: Rig) -> None:
        """The real cell's trials have no funnel: nothing reads their hands' contacts."""
        return None

    def start(self, rig: Rig, trial: Trial, task: TaskSpec, world: WorldSpec) -> EpisodeStart:
        name, speed = trial_draws(task, trial.seed)
        self.prompt(
            f"Trial {trial.index} ({trial.condition}): {CONDITION_SETUP[trial.condition]}; "
            "bring the arms to their start pose, then press Enter: "
        )
        rig.conveyor.set_speed(speed)
        name = rig.present(name)
        log.info("trial %d running; keys: %s", trial.index, JUDGE_KEYS_HELP)
        return EpisodeStart(
            object_name=name,
            arm=sorting_arm(task, world, name),
            belt_speed=float(rig.conveyor.speed()),
            instruction=task.instruction_for(name),
            tcp_poses={s: rig.arms[s].state().tcp_pose.copy() for s in rig.embodiment.sides},
            object_pose=rig.presenter.object_pose(),
        )

    def release(self, rig: Rig) -> None:
        """The cell stays open for the next trial (``close`` closes it)."""

    def close(self) -> None:
        self.rig.close()


class KeyJudge:
    """The operator's verdict by key (``KEY_OUTCOMES``), read from ``keys``."""

    def __init__(self, keys: KeySource, poll_s: float = 0.02) -> None:
        self.keys, self.poll_s = keys, poll_s
        self.key: str | None = None

    def begin(self) -> None:
        """Forget keys pressed before the trial started."""
        while self.keys.poll() is not None:
            pass
        self.key = None

    def pressed(self) -> bool:
        while self.key is None:
            key = self.keys.poll()
            if key is None:
                return False
            if key in KEY_OUTCOMES:
                self.key = key
        return True

    def verdict(self, episode: EpisodeLog) -> tuple[str, bool, str]:
        key, self.key = self.key, None
        if key is None and episode.ended_by in ("safety_stop", "estop", "policy_error"):
            return episode.outcome, False, episode.ended_by
        how = f"key:{key}"
        if key is None:
            log.warning("the time is up: judge the trial (%s, t timeout)", JUDGE_KEYS_HELP)
            key = self._wait("swdft")
            how = f"timeout, key:{key}"
        outcome = "timeout" if key == "t" else KEY_OUTCOMES[key]
        return outcome, outcome == "sorted", how

    def _wait(self, allowed: str) -> str:
        while True:
            key = self.keys.poll()
            if key is not None and key in allowed:
                return key
            time.sleep(self.poll_s)
