"""Specs load from YAML, are immutable, and reject bad input with a precise message."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pydantic
import pytest
import yaml

from r2s2r.paths import presets_dir
from r2s2r.sim.scene import build_scene
from r2s2r.spec import SpecError, TaskSpec, WorldSpec
from r2s2r.spec.worlds import load_world, world_at

PRESETS = presets_dir()


def _write(tmp_path: Path, data: dict, name: str = "bad.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data))
    return path


def _nominal_dict() -> dict:
    return yaml.safe_load((PRESETS / "world" / "nominal.yaml").read_text())


def test_presets_load(task: TaskSpec, world: WorldSpec) -> None:
    assert len(task.objects) >= 6 and len(task.novel_objects) >= 3
    shapes = {o.shape for o in task.objects}
    assert len(shapes) >= 3
    assert len({o.mass for o in task.objects}) >= 4
    assert len({o.rgba for o in task.objects}) == len(task.objects)
    assert world.cameras["left_wrist"].model == "fisheye"
    assert world.cameras["head"].model == "pinhole"
    # The sorting rule sends every object to exactly one bin.
    for obj in task.all_objects:
        assert obj.category in task.bin_for(obj).categories


def test_specs_are_immutable(world: WorldSpec) -> None:
    with pytest.raises(pydantic.ValidationError):
        world.timestep = 0.001  # type: ignore[misc]
    with pytest.raises(pydantic.ValidationError):
        world.controller.kp_pos = 1.0  # type: ignore[misc]


def test_roundtrip_save_load(tmp_path: Path, world: WorldSpec) -> None:
    path = tmp_path / "w.yaml"
    world.save(path)
    assert WorldSpec.load(path) == world


def test_unknown_key_names_file_and_key(tmp_path: Path) -> None:
    data = _nominal_dict()
    data["controller"]["kp_postion"] = 10.0
    path = _write(tmp_path, data)
    with pytest.raises(SpecError) as err:
        WorldSpec.load(path)
    msg = str(err.value)
    assert str(path) in msg and "controller.kp_postion" in msg and "unknown key" in msg


def test_negative_belt_speed_is_rejected(tmp_path: Path) -> None:
    data = yaml.safe_load((PRESETS / "task" / "pick_sort.yaml").read_text())
    data["belt"]["speed_range"] = [-0.1, 0.1]
    path = _write(tmp_path, data)
    with pytest.raises(SpecError) as err:
        TaskSpec.load(path)
    msg = str(err.value)
    assert str(path) in msg and "belt.speed_range.0" in msg and "greater than 0" in msg


@pytest.mark.parametrize(
    ("camera_patch", "key", "reason"),
    [
        ({"dist": [0.1, 0.0]}, "cameras.left_wrist", "fisheye camera takes 4 coefficients"),
        ({"fx": -229.0}, "cameras.left_wrist.fx", "greater than 0"),
        ({"cx": 5000.0}, "cameras.left_wrist", "principal point"),
        ({"model": "kannala"}, "cameras.left_wrist.model", "'pinhole' or 'fisheye'"),
        ({"width": "wide"}, "cameras.left_wrist.width", "valid integer"),
    ],
)
def test_malformed_camera_is_rejected(
    tmp_path: Path, camera_patch: dict, key: str, reason: str
) -> None:
    data = _nominal_dict()
    data["cameras"]["left_wrist"].update(camera_patch)
    path = _write(tmp_path, data)
    with pytest.raises(SpecError) as err:
        WorldSpec.load(path)
    msg = str(err.value)
    assert str(path) in msg and key in msg and reason in msg, msg


def test_missing_camera_and_bad_yaml(tmp_path: Path) -> None:
    data = _nominal_dict()
    del data["cameras"]["head"]
    with pytest.raises(SpecError, match="missing \\['head'\\]"):
        WorldSpec.load(_write(tmp_path, data))
    broken = tmp_path / "broken.yaml"
    broken.write_text("cameras: [unclosed")
    with pytest.raises(SpecError, match="not valid YAML"):
        WorldSpec.load(broken)
    with pytest.raises(SpecError, match="no such WorldSpec file"):
        WorldSpec.load(tmp_path / "absent.yaml")


def test_task_rules_are_validated(tmp_path: Path) -> None:
    data = yaml.safe_load((PRESETS / "task" / "pick_sort.yaml").read_text())
    data["objects"][0]["category"] = "squishy"
    with pytest.raises(SpecError, match="which no bin accepts"):
        TaskSpec.load(_write(tmp_path, data))
    data = yaml.safe_load((PRESETS / "task" / "pick_sort.yaml").read_text())
    data["objects"][0]["size"] = [0.03, 0.03]
    with pytest.raises(SpecError, match="a box takes 3 size values"):
        TaskSpec.load(_write(tmp_path, data))
    data = yaml.safe_load((PRESETS / "task" / "pick_sort.yaml").read_text())
    data["belt"]["fast_speed"] = 0.05
    with pytest.raises(SpecError, match="must exceed the nominal max"):
        TaskSpec.load(_write(tmp_path, data))


def every_parameter_changed(world: WorldSpec) -> WorldSpec:
    """A world with every numeric WorldSpec parameter moved off its nominal value."""

    def bump(value: object, path: str) -> object:
        if isinstance(value, bool):
            return not value
        if isinstance(value, int):
            return value + 1
        if isinstance(value, float):
            return value * 0.95 + 0.001
        if isinstance(value, dict):
            return {k: bump(v, f"{path}.{k}") for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [bump(v, f"{path}.{i}") for i, v in enumerate(value)]
        return value

    data = world.model_dump(mode="json")
    changed = bump(data, "")
    assert isinstance(changed, dict)
    # Keep what must stay valid: unit quaternions, integer sizes, the offscreen limits.
    for cam, src in zip(changed["cameras"].values(), data["cameras"].values(), strict=True):
        cam["pose"]["quat"] = src["pose"]["quat"]
        cam["width"], cam["height"] = src["width"], src["height"]
        cam["dist"] = (
            [0.01, -0.002, 0.001, 0.0]
            if src["model"] == "fisheye"
            else [0.01, -0.002, 0.0, 0.0, 0.0]
        )
    for pose in changed["layout"]["robots"].values():
        pose["quat"] = data["layout"]["robots"]["left"]["quat"]
    changed["render"]["obs_size"] = [128, 96]
    changed["render"]["offsamples"] = 0
    changed["timestep"] = 0.0025
    changed["name"] = "every_parameter_changed"
    return WorldSpec.from_dict(changed)


def test_nominal_and_fully_changed_worlds_compile(task: TaskSpec, world: WorldSpec) -> None:
    nominal = build_scene(task, world).model
    changed_world = every_parameter_changed(world)
    assert changed_world != world
    changed = build_scene(task, changed_world).model
    assert changed.nq == nominal.nq and changed.nu == nominal.nu
    assert changed.opt.timestep == pytest.approx(0.0025)
    # The change reaches the model: gains, belt and lighting differ.
    act = nominal.actuator("left_tcp_x").id
    assert changed.actuator_gainprm[act, 0] != nominal.actuator_gainprm[act, 0]
    assert changed.actuator_delay[act] != nominal.actuator_delay[act]
    belt = nominal.body("belt_frame").id
    assert not (changed.body_pos[belt] == nominal.body_pos[belt]).all()
    assert (changed.light_diffuse != nominal.light_diffuse).any()


def test_joint_friction_reaches_the_arm_joints_and_only_those(
    task: TaskSpec, world: WorldSpec
) -> None:
    nominal = build_scene(task, world)
    rough_world = world.replace(controller={"joint_friction": 0.25})
    rough = build_scene(task, rough_world).model
    emb = nominal.embodiment
    joints = [j for side in emb.sides for j in emb.arm_joint_names(side)]
    arm = [nominal.model.joint(j).dofadr[0] for j in joints]
    assert len(arm) == 14 and rough.nv == nominal.model.nv
    np.testing.assert_array_equal(nominal.model.dof_frictionloss[arm], 0.0)
    np.testing.assert_array_equal(rough.dof_frictionloss[arm], 0.25)
    np.testing.assert_array_equal(
        np.delete(rough.dof_frictionloss, arm), np.delete(nominal.model.dof_frictionloss, arm)
    )


def test_grounded_world_missing_says_how_to_make_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "world").mkdir()
    monkeypatch.setenv("R2S2R_CONFIG_DIR", str(tmp_path))
    with pytest.raises(SpecError, match="r2s2r ground all"):
        load_world("grounded")
    with pytest.raises(SpecError, match="unknown world 'moon'"):
        load_world("moon")


def test_hand_actuator_values_are_one_or_one_per_joint_of_the_built_hand(
    task: TaskSpec, world: WorldSpec
) -> None:
    with pytest.raises(pydantic.ValidationError, match="the same number for all"):
        world.hand.model_validate({**world.hand.model_dump(), "kp": [0.5] * 20, "kv": [0.02] * 16})
    sixteen = world.hand.model_validate({**world.hand.model_dump(), "kp": [0.5] * 16})
    assert sixteen.per_joint() == 16 and world.hand.per_joint() is None
    # The count is the built hand's: the Wuji hand has 20 joints.
    with pytest.raises(ValueError, match="16 values per hand joint; the left hand has 20 joints"):
        build_scene(task, world.replace(hand=sixteen))


def test_replace_merges_a_mapping_into_a_nested_spec_and_validates(world: WorldSpec) -> None:
    small = world.replace(render={"obs_size": (64, 48)}, controller={"delay_s": 0.0})
    assert small.render.obs_size == (64, 48) and small.controller.delay_s == 0.0
    # The keys not named keep their values, in the nested specs and at the top.
    assert small.render.replace(obs_size=world.render.obs_size) == world.render
    assert small.controller.replace(delay_s=world.controller.delay_s) == world.controller
    assert (small.cameras, small.layout) == (world.cameras, world.layout)
    # A spec replaces the field whole; a dict of specs (the cameras) is not merged.
    assert world.replace(render=type(world.render)()).render.shadow_map == 512
    head = {"head": world.cameras["head"]}
    with pytest.raises(SpecError, match="cameras: missing"):
        world.replace(cameras=head)
    # Invalid values and unknown keys are refused, named by their dotted key.
    with pytest.raises(
        SpecError, match=r"WorldSpec.replace: invalid WorldSpec:\n  render.obs_size.0"
    ):
        world.replace(render={"obs_size": (0, 64)})
    with pytest.raises(SpecError, match=r"render.obs_sise: unknown key"):
        world.replace(render={"obs_sise": (64, 64)})
    with pytest.raises(SpecError, match=r"colour: unknown key"):
        world.replace(colour="red")


def test_world_at_gives_the_world_at_an_image_size(world: WorldSpec) -> None:
    assert world_at(None) == world
    assert world_at(64).render.obs_size == (64, 64)
    assert world_at((80, 60), world).render.obs_size == (80, 60)
    assert world_at(64).replace(render={"obs_size": world.render.obs_size}) == world
    with pytest.raises(SpecError, match="obs_size"):
        world_at(-8)


def test_no_unvalidated_spec_copies_in_source() -> None:
    """Specs are copied with changes through ``Spec.replace``, which validates; pydantic's
    ``model_copy(update=...)`` does not."""
    source = Path(__file__).resolve().parents[1] / "source"
    pattern = re.compile(r"\.model_copy\(\s*(?:deep\s*=\s*\w+\s*,\s*)?update\s*=")
    offenders = [
        f"{path.relative_to(source)}:{text.count(chr(10), 0, m.start()) + 1}"
        for path in sorted(source.rglob("*.py"))
        for text in [path.read_text()]
        for m in pattern.finditer(text)
    ]
    assert len(list(source.rglob("*.py"))) > 100  # The folder is the one with the code.
    assert offenders == [], f"model_copy(update=...) skips validation; use .replace: {offenders}"
