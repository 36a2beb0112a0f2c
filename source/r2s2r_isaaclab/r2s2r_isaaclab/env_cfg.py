"""Isaac Lab env configs of the pick-and-sort tasks, built from the core's TaskSpec / WorldSpec.

A config names its world, condition and task the way the core does; every number of the
scene (timestep, control rate, episode length, action and observation sizes) is read from
those specs in ``__post_init__``, so nothing here is a second copy of them. One config class
per registered task (``names.task_variants``), made from ``PickSortEnvCfg`` and, for the
Mimic tasks, Isaac Lab's ``MimicEnvCfg`` with what Isaac Lab Mimic's generation loop reads
from a config (``terminations.success``, ``observations.policy``, ``recorders``,
``mimic_recorder_config``; terms in ``r2s2r_isaaclab.mdp``).
"""

from __future__ import annotations

import sys
from typing import cast

from isaaclab.envs import DirectRLEnvCfg
from isaaclab.envs.mdp.recorders.recorders_cfg import (
    InitialStateRecorderCfg,
    PostStepStatesRecorderCfg,
    PreStepFlatPolicyObservationsRecorderCfg,
)
from isaaclab.envs.mimic_env_cfg import MimicEnvCfg, SubTaskConfig
from isaaclab.managers import ObservationGroupCfg, RecorderManagerBaseCfg
from isaaclab.managers import ObservationTermCfg as ObsTerm
from isaaclab.managers import TerminationTermCfg as DoneTerm
from isaaclab.scene import InteractiveSceneCfg
from isaaclab.sim import SimulationCfg
from isaaclab.utils import configclass
from isaaclab_newton.physics import MJWarpSolverCfg, NewtonCfg

from r2s2r.sim.contract import Contract
from r2s2r.sim.embodiment import ACTION_MODES, ActionMode
from r2s2r.sim.scene import build_scene
from r2s2r.spec import TaskSpec, WorldSpec
from r2s2r_isaaclab import mdp
from r2s2r_isaaclab.names import TaskVariant, task_variants, variant_specs

# MuJoCo Warp's per-world buffers for the cell. The vendor hands' links give Newton's broad
# phase up to about 370 candidate pairs per world (the core's mujoco_warp backend counts
# contacts, not candidates, and needs fewer); elliptic cones add up to 6 rows per contact.
NJMAX, NCONMAX = 2048, 512


def newton_sim_cfg(world: WorldSpec, device: str = "cpu") -> SimulationCfg:
    """Kit-less Newton physics on the MuJoCo Warp solver, at the world's timestep."""
    solver = MJWarpSolverCfg(
        njmax=NJMAX,
        nconmax=NCONMAX,
        integrator="implicitfast",
        cone="elliptic",
        impratio=5.0,
        # Newton's contact pipeline rather than MuJoCo Warp's: Isaac Lab's pin (MuJoCo Warp
        # 3.12) gives an upright cylinder on a box one alternating contact, so a can sorted
        # upright rocks in its bin for ever and is never judged at rest (mujoco_warp#1555,
        # fixed in later MuJoCo Warp releases; the core's 4.0 backend settles it).
        use_mujoco_contacts=False,
    )
    return SimulationCfg(dt=world.timestep, device=device, physics=NewtonCfg(solver_cfg=solver))


@configclass
class PickSortEnvCfg(DirectRLEnvCfg):
    """The pick-and-sort cell as an Isaac Lab env config (``r2s2r_isaaclab.env``)."""

    # The core's names: a world (a WorldSpec name or YAML path), a condition and a task.
    world: str = "nominal"
    condition: str = "nominal"
    task: str = "pick_sort"
    # The action mode of the core's contract ("tcp" or "joint").
    action_mode: str = "tcp"
    # Observations as the core's vector env gives them: images (MuJoCo's renderer on a CPU
    # copy of each world) and the presented object's pose.
    images: bool = False
    env_state: bool = False
    sim: SimulationCfg = SimulationCfg()
    scene: InteractiveSceneCfg = InteractiveSceneCfg(num_envs=2, env_spacing=3.0)
    # Filled from the specs in __post_init__.
    decimation: int = 0
    episode_length_s: float = 0.0
    observation_space: int = 0
    action_space: int = 0

    def __post_init__(self) -> None:
        task, world = self.specs()
        self.sim = newton_sim_cfg(world, self.sim.device)
        self.decimation = max(1, round(1.0 / (task.control_hz * world.timestep)))
        self.episode_length_s = task.episode_s
        if self.action_mode not in ACTION_MODES:
            raise ValueError(f"action_mode: one of {ACTION_MODES}, got {self.action_mode!r}")
        mode = cast(ActionMode, self.action_mode)
        contract = Contract.of(build_scene(task, world, action_mode=mode).embodiment, mode)
        self.action_space = contract.action_dim
        self.observation_space = contract.state_dim

    def specs(self) -> tuple[TaskSpec, WorldSpec]:
        """The task and world the env runs, with the condition applied."""
        return variant_specs(self.world, self.condition, self.task)


def mimic_subtasks(eef: str) -> list[SubTaskConfig]:
    """Two subtasks per arm: grasp the presented object, then carry it to its bin (the last
    subtask ends with the episode, so it has no signal).

    The grasp starts without interpolation steps: the belt carries the object on while the
    arm goes through them, so each makes the arm a period late on a segment timed to the
    moving object (five put it six periods late, about 1 cm at 0.08 m/s, and the generated
    episode missed the source demo's own grasp from the demo's own start). The segment starts
    at the source's first TCP pose moved with the object, and the cell's controller limits
    how fast the TCP goes there."""
    return [
        SubTaskConfig(
            object_ref="object",
            subtask_term_signal="grasp",
            subtask_term_offset_range=(0, 0),
            selection_strategy="nearest_neighbor_object",
            action_noise=0.0,
            num_interpolation_steps=0,
            description=f"{eef} arm: grasp the object on the belt",
        ),
        SubTaskConfig(
            object_ref="bin",
            subtask_term_signal=None,
            selection_strategy="random",
            action_noise=0.0,
            num_interpolation_steps=5,
            description=f"{eef} arm: put the object in its bin",
        ),
    ]


@configclass
class TaskInstanceCfg:
    """One episode's start, which the cell otherwise draws (the core's ``TaskInstance``)."""

    # The presented object (a name among the task's objects).
    object_name: str = ""
    # Where it appears: offset across the belt (m) and turn about the vertical (rad).
    lateral: float = 0.0
    yaw: float = 0.0
    # The belt's speed (m/s, above 0).
    belt_speed: float = 0.0


@configclass
class PolicyObsCfg(ObservationGroupCfg):
    """The ``policy`` observations Isaac Lab's recorders store as ``obs`` (flat per env)."""

    tcp_pose = ObsTerm(func=mdp.tcp_pose)
    arm_joints = ObsTerm(func=mdp.arm_joints)
    hand_joints = ObsTerm(func=mdp.hand_joints)
    object = ObsTerm(func=mdp.object_pose)


@configclass
class MimicObservationsCfg:
    policy: PolicyObsCfg = PolicyObsCfg()


@configclass
class MimicTerminationsCfg:
    """Mimic's generator judges each step with ``success``; the episode itself ends by the core
    cell's rules (every object judged, or out of time)."""

    success = DoneTerm(func=mdp.object_sorted)


@configclass
class PickSortRecorderManagerCfg(RecorderManagerBaseCfg):
    """What a Mimic run records: Isaac Lab's initial-state, state and policy-observation terms,
    and the stepped actions (``mdp.PreStepActionsRecorder``)."""

    record_initial_state = InitialStateRecorderCfg()
    record_post_step_states = PostStepStatesRecorderCfg()
    record_pre_step_actions = mdp.PreStepActionsRecorderCfg()
    record_pre_step_flat_policy_observations = PreStepFlatPolicyObservationsRecorderCfg()


@configclass
class PickSortMimicEnvCfg(PickSortEnvCfg, MimicEnvCfg):
    """The pick-and-sort env for Isaac Lab Mimic (``r2s2r_isaaclab.mimic``)."""

    observations: MimicObservationsCfg = MimicObservationsCfg()
    # None (as Isaac Lab Mimic's setup_env_config sets it): episodes end only by a reset.
    terminations: MimicTerminationsCfg | None = MimicTerminationsCfg()
    # Isaac Lab's recorder manager; no terms by default (setup_env_config sets them).
    recorders: RecorderManagerBaseCfg = RecorderManagerBaseCfg()
    mimic_recorder_config: RecorderManagerBaseCfg | None = PickSortRecorderManagerCfg()
    # Resets start these instances in turn (cycling; a seeded full reset starts over) instead
    # of drawing them; empty: drawn, as in the core.
    reset_instances: list[TaskInstanceCfg] = []

    def __post_init__(self) -> None:
        PickSortEnvCfg.__post_init__(self)
        self.datagen_config.name = f"r2s2r_pick_sort_{self.world}"
        self.datagen_config.generation_guarantee = True
        self.datagen_config.generation_keep_failed = False
        self.datagen_config.generation_num_trials = 10
        self.datagen_config.generation_select_src_per_subtask = True
        self.datagen_config.max_num_failures = 25
        self.datagen_config.seed = 1
        self.subtask_configs = {eef: mimic_subtasks(eef) for eef in ("left", "right")}


def _variant_cfg(variant: TaskVariant) -> type:
    base = PickSortMimicEnvCfg if variant.mimic else PickSortEnvCfg
    attrs = {
        "__annotations__": {"world": str, "condition": str},
        "world": variant.world,
        "condition": variant.condition,
        "__module__": __name__,
        "__qualname__": variant.cfg_class_name,
        "__doc__": f"The env config of ``{variant.task_id}``.",
    }
    return configclass(type(variant.cfg_class_name, (base,), attrs))


# One config class per registered task, named as ``TaskVariant.cfg_class_name`` says.
VARIANT_CFGS: dict[str, type] = {}
for _variant in task_variants():
    _cls = _variant_cfg(_variant)
    setattr(sys.modules[__name__], _variant.cfg_class_name, _cls)
    VARIANT_CFGS[_variant.task_id] = _cls
