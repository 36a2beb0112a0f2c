"""Conditions are registered transforms of the specs; seeded episodes are those of before."""

from __future__ import annotations

import numpy as np
import pytest

from r2s2r.rig.twin import TwinRig
from r2s2r.sim.env import PickSortEnv
from r2s2r.spec import SpecError, TaskSpec, WorldSpec
from r2s2r.spec.conditions import CONDITIONS, apply_condition, compose, fast_belt, red_light
from r2s2r.spec.registry import RegistryError

# What PickSortEnv(condition=c, images=False).reset(seed=s) gave before conditions became spec
# transforms (the cell tested the condition's name): the object, belt speed, lateral offset
# and yaw of the spawn, and the generator's next uniform draw (so the episode drew exactly as
# many numbers as it did then).
# fmt: off
REFERENCE = [
    ("nominal", 0, "green_can", 0.08184808436607272, -0.045902647606380534, -3.03774645687452, 0.8132702392002724),  # noqa: E501
    ("nominal", 1, "orange_ball", 0.07559108123501285, -0.03558403872803663, 2.8189476143269747, 0.31183145201048545),  # noqa: E501
    ("nominal", 2, "red_block", 0.06308060671246582, 0.031422574059428034, -2.5640677564709833, 0.600100525965654),  # noqa: E501
    ("nominal", 3, "yellow_brick", 0.05428245835718122, 0.03012744652063969, 0.5162392978075951, 0.09412864224039919),  # noqa: E501
    ("red_light", 0, "green_can", 0.08184808436607272, -0.045902647606380534, -3.03774645687452, 0.8132702392002724),  # noqa: E501
    ("red_light", 1, "orange_ball", 0.07559108123501285, -0.03558403872803663, 2.8189476143269747, 0.31183145201048545),  # noqa: E501
    ("red_light", 2, "red_block", 0.06308060671246582, 0.031422574059428034, -2.5640677564709833, 0.600100525965654),  # noqa: E501
    ("red_light", 3, "yellow_brick", 0.05428245835718122, 0.03012744652063969, 0.5162392978075951, 0.09412864224039919),  # noqa: E501
    ("fast_belt", 0, "white_puck", 0.16, -0.02302132862361297, -2.8841484100105235, 0.016527635528529094),  # noqa: E501
    ("fast_belt", 1, "purple_box", 0.16, 0.045046369632593536, -2.2358110930610913, 0.9486494471372439),  # noqa: E501
    ("fast_belt", 2, "white_puck", 0.16, -0.02015088565858767, 1.9743385564396059, 0.0919159421350969),  # noqa: E501
    ("fast_belt", 3, "orange_ball", 0.16, -0.02631894934039003, 1.8929632932132208, 0.5821620360643678),  # noqa: E501
    ("novel_objects", 0, "pink_egg", 0.08184808436607272, -0.045902647606380534, -3.03774645687452, 0.8132702392002724),  # noqa: E501
    ("novel_objects", 1, "brown_slab", 0.07559108123501285, -0.03558403872803663, 2.8189476143269747, 0.31183145201048545),  # noqa: E501
    ("novel_objects", 2, "teal_prism", 0.06308060671246582, 0.031422574059428034, -2.5640677564709833, 0.600100525965654),  # noqa: E501
    ("novel_objects", 3, "teal_prism", 0.05428245835718122, 0.03012744652063969, 0.5162392978075951, 0.09412864224039919),  # noqa: E501
    ("all_shifts", 0, "brown_slab", 0.16, -0.02302132862361297, -2.8841484100105235, 0.016527635528529094),  # noqa: E501
    ("all_shifts", 1, "pink_egg", 0.16, 0.045046369632593536, -2.2358110930610913, 0.9486494471372439),  # noqa: E501
    ("all_shifts", 2, "brown_slab", 0.16, -0.02015088565858767, 1.9743385564396059, 0.0919159421350969),  # noqa: E501
    ("all_shifts", 3, "brown_slab", 0.16, -0.02631894934039003, 1.8929632932132208, 0.5821620360643678),  # noqa: E501
]
# The key light's diffuse colour after reset(seed=0), without and with appearance
# randomization (which draws its intensity after the episode's own draws).
LIGHT = {
    "nominal": ((0.8, 0.8, 0.8), (1.006635069847107, 1.006635069847107, 1.006635069847107)),
    "red_light": ((0.8, 0.16, 0.12), (1.006635069847107, 0.20132702589035034, 0.15099526941776276)),
    "fast_belt": ((0.8, 0.8, 0.8), (0.6082637906074524, 0.6082637906074524, 0.6082637906074524)),
    "novel_objects": ((0.8, 0.8, 0.8), (1.006635069847107, 1.006635069847107, 1.006635069847107)),
    "all_shifts": ((0.8, 0.16, 0.12), (0.6082637906074524, 0.1216527670621872, 0.0912395715713501)),
}
# fmt: on


def test_the_registered_conditions_are_the_evaluation_conditions() -> None:
    assert CONDITIONS.names() == (
        "nominal",
        "red_light",
        "fast_belt",
        "novel_objects",
        "all_shifts",
    )
    with pytest.raises(RegistryError, match="unknown condition 'fast'; did you mean 'fast_belt'"):
        CONDITIONS.get("fast")


@pytest.mark.parametrize("condition", CONDITIONS.names())
def test_seeded_episodes_are_those_of_before(condition: str) -> None:
    for randomize, light in zip((False, True), LIGHT[condition], strict=True):
        env = PickSortEnv(images=False, condition=condition, randomize_appearance=randomize)
        for cond, seed, name, speed, lateral, yaw, after in REFERENCE:
            if cond != condition:
                continue
            _, info = env.reset(seed=seed)
            assert info["condition"] == condition
            assert info["object_names"] == [name]
            assert info["belt_speed"] == speed
            assert env.cell.spawn_xy[0, 0, 1] == lateral and env.cell.spawn_yaw[0, 0] == yaw
            assert info["object_pos"][0, 1] == lateral
            if not randomize:
                assert env.np_random.uniform() == after
            if seed == 0:
                diffuse = env.model.light_diffuse[env.model.light("key").id]
                np.testing.assert_allclose(diffuse, light, rtol=1e-6)
        # The scene holds every object whatever the condition, in the task's order.
        assert env.cell.objects == env.task_spec.all_objects


def test_conditions_change_only_their_own_fields(task: TaskSpec, world: WorldSpec) -> None:
    t, w = apply_condition("nominal", task, world)
    assert (t, w) == (task, world)
    t, w = apply_condition("red_light", task, world)
    assert t == task and w.lighting.rgb == task.shifts.red_light_rgb
    assert w.replace(lighting=world.lighting) == world
    t, w = apply_condition("fast_belt", task, world)
    assert w == world and t.belt.fixed_speed == task.belt.fast_speed
    assert t.replace(belt=task.belt) == task
    t, w = apply_condition("novel_objects", task, world)
    assert w == world and t.spawn_pool == task.novel_objects and t.all_objects == task.all_objects
    t, w = apply_condition("all_shifts", task, world)
    assert (t.belt.fixed_speed, t.spawn.pool, w.lighting.rgb) == (
        task.belt.fast_speed,
        "novel_objects",
        task.shifts.red_light_rgb,
    )
    # Composition applies in order and is itself a condition.
    assert compose(fast_belt, red_light)(task, world) == (t.replace(spawn=task.spawn), w)


def test_a_condition_the_task_cannot_take_says_why(task: TaskSpec, world: WorldSpec) -> None:
    plain = task.replace(novel_objects=())
    with pytest.raises(SpecError, match="task pick_sort has no novel_objects"):
        apply_condition("all_shifts", plain, world)
    # A spec that asks for an empty pool, or a fixed speed the belt is not built for, is invalid.
    with pytest.raises(SpecError, match="spawn.pool: the task's novel_objects list is empty"):
        plain.replace(spawn=plain.spawn.replace(pool="novel_objects"))
    with pytest.raises(SpecError, match="fixed_speed: 0.5 is above fast_speed"):
        task.replace(belt=task.belt.replace(fixed_speed=0.5))
    with pytest.raises(SpecError, match="belt.fixed_speed: 0.01 must exceed success.settle"):
        task.replace(belt=task.belt.replace(fixed_speed=0.01))


def test_the_twin_runs_under_a_condition() -> None:
    twin = TwinRig(seed=0, condition="all_shifts")
    novel = {o.name for o in twin.task.novel_objects}
    assert twin.present() in novel
    assert twin.conveyor.speed() == twin.task.belt.fast_speed
    truth = twin.reveal_truth().world
    assert truth.lighting.rgb == twin.task.shifts.red_light_rgb
    # The shift leaves the rest of the hidden world as the nominal twin draws it.
    nominal = TwinRig(seed=0).reveal_truth().world
    assert truth.replace(lighting=nominal.lighting) == nominal
    with pytest.raises(ValueError, match="did you mean 'red_light'"):
        TwinRig(seed=0, condition="red_lihgt")


# Slow: MuJoCo Warp compiles the cell's kernels first where its cache is cold, as in CI (2 min).
@pytest.mark.slow
def test_the_vector_env_applies_the_condition() -> None:
    pytest.importorskip("mujoco_warp")
    from r2s2r.sim.vector_env import PickSortVectorEnv

    env = PickSortVectorEnv(2, condition="all_shifts", device="cpu")
    try:
        env.reset(seed=0)  # World i draws from default_rng(0 + i), as the env at seed i.
        rows = [r for r in REFERENCE if r[0] == "all_shifts"][:2]
        names = [env.cell.objects[i].name for i in env.cell.chosen[:, 0]]
        assert names == [r[2] for r in rows]
        assert env.cell.belt_speed.tolist() == [r[3] for r in rows]
        assert env.cell.spawn_xy[:, 0, 1].tolist() == [r[4] for r in rows]
        np.testing.assert_allclose(env.appearance.light_diffuse[0], LIGHT["all_shifts"][0])
    finally:
        env.close()
