"""Task registration and ``parse_env_cfg`` for every variant, against Isaac Lab 3.0."""

from __future__ import annotations

import importlib.metadata

import gymnasium as gym
import pytest
import r2s2r_isaaclab
from isaaclab.envs import DirectRLEnvCfg
from isaaclab.envs.mimic_env_cfg import MimicEnvCfg
from isaaclab_newton.physics import MJWarpSolverCfg, NewtonCfg
from isaaclab_tasks.utils import parse_env_cfg
from r2s2r_isaaclab.names import task_variants

from r2s2r.spec.worlds import load_task, load_world

BRIEF_IDS = (
    "Isaac-R2S2R-PickSort-Grounded-v0",
    "Isaac-R2S2R-PickSort-Ungrounded-v0",
    "Isaac-R2S2R-PickSort-Grounded-RedLight-v0",
    "Isaac-R2S2R-PickSort-Ungrounded-FastBelt-v0",
    "Isaac-R2S2R-PickSort-Grounded-NovelObjects-v0",
    "Isaac-R2S2R-PickSort-Ungrounded-AllShifts-v0",
    "Isaac-R2S2R-PickSort-Grounded-Mimic-v0",
    "Isaac-R2S2R-PickSort-Ungrounded-Mimic-v0",
)


def test_import_registers_every_task_the_isaac_lab_way():
    assert set(BRIEF_IDS) <= set(r2s2r_isaaclab.TASK_IDS)
    assert len(r2s2r_isaaclab.TASK_IDS) == 12
    for variant in task_variants():
        spec = gym.registry[variant.task_id]
        assert spec.kwargs["env_cfg_entry_point"].startswith("r2s2r_isaaclab.env_cfg:")
        want = "mimic:PickSortMimicEnv" if variant.mimic else "env:PickSortIsaacEnv"
        assert spec.entry_point == f"r2s2r_isaaclab.{want}"
    # Registering again changes nothing (the import may run twice under Kit).
    assert r2s2r_isaaclab.register_tasks() == r2s2r_isaaclab.TASK_IDS


def test_isaaclab_tasks_entry_point_when_installed():
    points = {e.name: e.value for e in importlib.metadata.entry_points(group="isaaclab.tasks")}
    if "r2s2r" not in points:
        pytest.skip("r2s2r_isaaclab is not pip-installed here (make isaaclab-setup installs it)")
    assert points["r2s2r"] == "r2s2r_isaaclab.tasks"


@pytest.mark.parametrize("variant", task_variants(), ids=lambda v: v.task_id)
def test_parse_env_cfg_every_variant(variant):
    cfg = parse_env_cfg(variant.task_id, device="cpu", num_envs=3)
    assert isinstance(cfg, DirectRLEnvCfg)
    assert isinstance(cfg, MimicEnvCfg) == variant.mimic
    assert cfg.scene.num_envs == 3 and cfg.sim.device == "cpu"
    assert isinstance(cfg.sim.physics, NewtonCfg)
    assert isinstance(cfg.sim.physics.solver_cfg, MJWarpSolverCfg)
    assert (cfg.world, cfg.condition) == (variant.world, variant.condition)
    # Every number comes from the specs, condition applied.
    task, world = cfg.specs()
    assert cfg.sim.dt == world.timestep
    assert cfg.decimation * world.timestep * task.control_hz == pytest.approx(1.0)
    assert cfg.episode_length_s == task.episode_s
    assert cfg.action_space == 2 * (7 + 20)
    nominal_task = load_task("pick_sort")
    if variant.condition in ("fast_belt", "all_shifts"):
        assert task.belt.fixed_speed == nominal_task.belt.fast_speed
    else:
        assert task.belt.fixed_speed is None
    if variant.condition in ("red_light", "all_shifts"):
        assert world.lighting.rgb == nominal_task.shifts.red_light_rgb
    pool = "novel_objects" if variant.condition in ("novel_objects", "all_shifts") else "objects"
    assert task.spawn.pool == pool
    # The grounded variant runs the grounded world (the conftest's, whose belt is moved).
    belt = load_world(variant.world).layout.belt.pos
    assert world.layout.belt.pos == belt
    assert (belt != load_world("nominal").layout.belt.pos) == (variant.world == "grounded")
    if variant.mimic:
        from isaaclab_mimic.datagen.selection_strategy import assert_selection_strategy_exists

        assert set(cfg.subtask_configs) == {"left", "right"}
        for subtasks in cfg.subtask_configs.values():
            assert [s.object_ref for s in subtasks] == ["object", "bin"]
            assert subtasks[0].subtask_term_signal == "grasp"
            for subtask in subtasks:
                assert_selection_strategy_exists(subtask.selection_strategy)


def test_unknown_task_names_the_nearest():
    with pytest.raises(KeyError, match="did you mean Isaac-R2S2R-PickSort-Grounded-v0"):
        r2s2r_isaaclab.make_env_cfg("Isaac-R2S2R-PickSort-Grounded-v1")


def test_grounded_world_missing_says_how_to_make_it(monkeypatch, tmp_path):
    from r2s2r.paths import CONFIG_DIR_ENV
    from r2s2r.spec.base import SpecError

    monkeypatch.setenv(CONFIG_DIR_ENV, str(tmp_path))
    with pytest.raises(SpecError, match="r2s2r ground all"):
        parse_env_cfg("Isaac-R2S2R-PickSort-Grounded-v0", device="cpu", num_envs=1)
