"""The code-side configs are validated, immutable specs with the defaults they always had."""

from __future__ import annotations

import json
from pathlib import Path

import pydantic
import pytest

from r2s2r.behavior.adapt import AdaptCfg
from r2s2r.behavior.curobo_config import CuroboCfg
from r2s2r.behavior.generate import GenerateCfg
from r2s2r.behavior.kinematics import AvoidCfg
from r2s2r.behavior.plan import Planner, PlannerCfg
from r2s2r.behavior.planners import CARRY_PLANNERS
from r2s2r.behavior.routes import OmplCarry
from r2s2r.data.config import CameraCfg, DatasetCfg, DatasetError, VideoCfg
from r2s2r.ground.register import RegistrationCfg
from r2s2r.ground.sysid import SysIdCfg
from r2s2r.rig.teleop.retarget import RetargetCfg
from r2s2r.sim.env import PickSortEnv
from r2s2r.spec import Spec, SpecError
from r2s2r.spec.registry import RegistryError

# The defaults as they were while these were dataclasses (``dataclasses.asdict``).
# fmt: off
DEFAULTS: dict[type[Spec], dict] = {
    PlannerCfg: {"hover_m": 0.1, "descend_s": 0.8, "close_s": 0.5, "hold_s": 0.2, "lift_m": 0.15, "lift_s": 0.8, "carry_height_m": 0.25, "release_s": 0.4, "settle_s": 1.2, "vel_share": 0.5, "max_acc": 3.0, "max_jerk": 20.0, "power_span_m": 0.045, "claw_clear_m": 0.005, "yaws_deg": (-105.0, -90.0, -75.0, -60.0, -45.0, -30.0, -15.0, 0.0), "meet_offsets_m": (-0.1, 0.0, -0.2, 0.1, -0.3), "carry_plan_s": 1.0, "trial_hold_s": 0.6},  # noqa: E501
    AdaptCfg: {"noise_pos_m": 0.002, "noise_rot_rad": 0.01, "blend_s": 0.8, "min_approach_share": 0.5, "max_turn_deg": 30.0},  # noqa: E501
    AvoidCfg: {"detect_m": 0.05, "safety_m": 0.01, "gain": 0.5},
    RegistrationCfg: {"seed": 0, "search_margin": 0.1, "search_height": 0.05, "plane_threshold": 0.003, "surface_band": 0.002, "max_tilt_deg": 15.0, "edge_drop": 0.005, "ransac_points": 20000, "min_belt_coverage": 0.5, "model_spacing": 0.004, "bin_points": 4000, "object_points": 1500, "object_min_height": 0.003, "depth_jump": 0.02, "iou_accept": 0.6},  # noqa: E501
    SysIdCfg: {"arm_train_s": 80.0, "arm_held_out_s": 15.0, "arm_seed": 0, "hand_train_episodes": 6, "hand_val_episodes": 3, "hand_episode_s": 4.0, "hand_seed": 0, "hz": 50.0, "window_s": 1.0, "stride_s": 1.0, "arm_params": ("kp_pos", "kp_rot", "damping_ratio", "delay_s", "max_lin_vel", "max_lin_acc", "joint_friction"), "arm_max_iter": 20, "hand_max_iter": 8},  # noqa: E501
    RetargetCfg: {"scale": 1.0, "pinch_m": 0.02, "pinch_weight": 10.0, "middle_weight": 0.5, "smooth_weight": 0.001, "iterations": 6, "tolerance": 1e-07},  # noqa: E501
    CuroboCfg: {"overshoot_m": 0.015, "sphere_buffer_m": 0.0, "self_collision_skip": 2, "vel_share": 0.5, "max_acc": 3.0, "max_jerk": 20.0, "max_attempts": 5, "timeout_s": 1.0},  # noqa: E501
    VideoCfg: {"lossless": False, "crf": 23, "preset": "veryfast", "gop": 10},
}
# What a dataset's info.json holds under "r2s2r" (written by the dataclass version).
OLD_INFO = '{"fps": 50, "cameras": [{"name": "head", "height": 64, "width": 96}], "robot_type": "rizon4s_wuji2_bimanual", "action_mode": "tcp", "video": {"lossless": true, "crf": 23, "preset": "veryfast", "gop": 5}, "env_state": true}'  # noqa: E501
# fmt: on


@pytest.mark.parametrize("cls", list(DEFAULTS), ids=lambda c: c.__name__)
def test_configs_keep_their_defaults_and_are_frozen_and_strict(cls: type[Spec]) -> None:
    cfg = cls()
    assert cfg.model_dump() == DEFAULTS[cls]
    key = next(iter(DEFAULTS[cls]))
    with pytest.raises(pydantic.ValidationError, match="frozen"):
        setattr(cfg, key, getattr(cfg, key))
    with pytest.raises(SpecError, match="typo: unknown key"):
        cls.from_dict({"typo": 1})
    assert cfg.replace(**{key: getattr(cfg, key)}) == cfg and hash(cfg) == hash(cls())


def test_configs_reject_values_out_of_range() -> None:
    for make, message in (
        (lambda: PlannerCfg(vel_share=1.5), "vel_share"),
        (lambda: PlannerCfg(yaws_deg=()), "yaws_deg"),
        (lambda: AvoidCfg(safety_m=0.06), "safety_m: 0.06 must be below detect_m 0.05"),
        (lambda: SysIdCfg(arm_params=("kp_pso",)), "'kp_pso'] are not ArmControllerSpec fields"),
        (lambda: RetargetCfg(iterations=0), "iterations"),
        (lambda: RegistrationCfg(iou_accept=0.0), "iou_accept"),
        (lambda: CuroboCfg(vel_share=0.0), "vel_share"),
    ):
        with pytest.raises(pydantic.ValidationError, match=message):
            make()


def test_dataset_cfg_checks_and_reads_old_info_json() -> None:
    for kwargs, message in (
        ({"fps": 0}, "fps must be positive, got 0"),
        ({"cameras": (CameraCfg(name="a"), CameraCfg(name="a"))}, "camera names must be unique"),
        ({"cameras": (CameraCfg(name="a", height=63),)}, "H.264 needs positive even sizes"),
    ):
        with pytest.raises(pydantic.ValidationError, match=message):
            DatasetCfg(**kwargs)
    cfg = DatasetCfg(
        cameras=(CameraCfg(name="head", height=64, width=96),),
        video=VideoCfg(lossless=True, gop=5),
        env_state=True,
    )
    # An info.json from before datasets recorded their embodiment names the nominal robot in
    # robot_type: it reopens as that embodiment; new ones record the embodiment itself.
    assert DatasetCfg.from_json(json.loads(OLD_INFO)) == cfg
    written = cfg.to_json()
    assert written["embodiment"]["name"] == "rizon4s_wuji2_bimanual" and "robot_type" not in written
    # Old info.json files have no group limits either: they continue with the defaults.
    assert written["files"] == {"data_mb": 100.0, "video_mb": 200.0, "episodes": None}
    kept = json.loads(json.dumps(written))
    assert {k: v for k, v in kept.items() if k not in ("embodiment", "files")} == {
        k: v for k, v in json.loads(OLD_INFO).items() if k != "robot_type"
    }
    assert DatasetCfg.from_json(json.loads(json.dumps(written))) == cfg
    with pytest.raises(DatasetError, match="robot_type 'other_robot' is not the nominal"):
        DatasetCfg.from_json({**json.loads(OLD_INFO), "robot_type": "other_robot"})
    # Datasets from before environment states existed have no env_state key.
    before = json.loads(OLD_INFO)
    del before["env_state"]
    assert DatasetCfg.from_json(before) == cfg.replace(env_state=False)
    with pytest.raises(DatasetError, match="fps must be positive"):
        DatasetCfg.from_json({**json.loads(OLD_INFO), "fps": -1})


def test_generate_cfg_is_a_spec_whose_planner_is_registered(tmp_path: Path) -> None:
    cfg = GenerateCfg(source=None, out=tmp_path)
    assert cfg.planner == "cpu" and cfg.adapt == AdaptCfg()
    assert cfg.replace(workers=2).workers == 2 and cfg.workers == 1
    with pytest.raises(pydantic.ValidationError, match="unknown planner 'cpuu'; did you mean"):
        GenerateCfg(source=None, out=tmp_path, planner="cpuu")


def test_the_planner_builds_its_carry_planner_by_name() -> None:
    assert CARRY_PLANNERS.names() == ("cpu", "curobo")
    env = PickSortEnv(images=False)
    planner = Planner(env.world_spec, env.task_spec, env.cell, PlannerCfg(carry_plan_s=2.0))
    assert isinstance(planner.carry, OmplCarry) and planner.carry.name == "cpu"
    assert planner.carry.plan_s == 2.0 and planner.carry.dt == planner.dt
    with pytest.raises(RegistryError, match="unknown planner 'gpu'"):
        Planner(env.world_spec, env.task_spec, env.cell, carry="gpu")


def test_safety_limits_are_a_checked_spec() -> None:
    from r2s2r.rig.safety import SafetyLimits

    assert SafetyLimits().replace(max_jump_m=0.1).max_jump_m == 0.1
    with pytest.raises(pydantic.ValidationError, match="stop_after_s 0.05 must exceed"):
        SafetyLimits(stop_after_s=0.05)
    with pytest.raises(pydantic.ValidationError, match="must lie below workspace_max"):
        SafetyLimits(workspace_min=(0.0, 0.0, 2.0))
    with pytest.raises(pydantic.ValidationError, match="max_lin_vel"):
        SafetyLimits(max_lin_vel=0.0)
