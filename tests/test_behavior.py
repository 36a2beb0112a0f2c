"""Behavior: real demos (recorded on the twin by the scripted operator) segmented, adapted
to new task instances, executed in simulation, success-filtered and written as a dataset."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from r2s2r.behavior.adapt import AdaptError, adapt, instance_of
from r2s2r.behavior.behaviors import (
    BEHAVIORS,
    AdaptedBehavior,
    BehaviorSetup,
    PlannedBehavior,
    make_behavior,
)
from r2s2r.behavior.demo import CLOSED, SUBTASKS, SourceDemo, closure, load_demos
from r2s2r.behavior.execute import Executor, ReplayRenderer
from r2s2r.behavior.generate import GenerateCfg, Generator
from r2s2r.behavior.instance import TaskInstance, check_instance, object_pose_on_belt
from r2s2r.behavior.plan import PlanError, Planner, PlannerCfg
from r2s2r.cli import app
from r2s2r.data import (
    Dataset,
    DatasetCfg,
    DatasetError,
    DatasetWriter,
    verify,
)
from r2s2r.data.record import Recorder
from r2s2r.rig.safety import SafetySupervisor
from r2s2r.rig.teleop import TeleopSession, TrackerCalibration
from r2s2r.rig.teleop.operator import ScriptedOperator, TwinEyes
from r2s2r.rig.twin import TwinRig
from r2s2r.sim.env import PickSortEnv
from r2s2r.spec import TaskSpec, WorldSpec
from r2s2r.spec.worlds import load_task, load_world, world_at

runner = CliRunner()
# Twin seeds whose scripted-operator take succeeds: puck (left arm), brick, can, flat box.
DEMO_SEEDS = (0, 1, 3, 5)
ARM = 27  # Actions per arm.


@pytest.fixture(scope="module")
def task() -> TaskSpec:
    return load_task("pick_sort")


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Real demonstrations: scripted-operator takes on ideal twins (adapting a demo to its own
    instance in its own world must reproduce it exactly), without cameras, with the object's
    pose as the twin tracked it."""
    logging.getLogger("r2s2r.safety").setLevel(logging.ERROR)
    root = tmp_path_factory.mktemp("demos") / "real"
    with DatasetWriter(root, DatasetCfg(cameras=(), env_state=True)) as writer:
        for seed in DEMO_SEEDS:
            rig = TwinRig(seed=seed, ideal=True)
            cal = TrackerCalibration.twin()
            sup = SafetySupervisor(rig.arms, rig.hands, rig.now, rig.embodiment)
            teleop = TeleopSession(rig, sup, cal)
            operator = ScriptedOperator(seed, TwinEyes(rig), rig.task, rig.nominal, cal)
            meta = {"world": "twin", "behavior": "teleop", "seed": seed}
            rec = Recorder(rig, operator, teleop, writer, rig.task, rig.nominal, meta)
            (take,) = rec.run(1, None)
            assert take.success, f"seed {seed}: the operator's take failed"
    return root


@pytest.fixture(scope="module")
def demos(source: Path, task: TaskSpec) -> list[SourceDemo]:
    return load_demos(source, task)


def truth_world(demo: SourceDemo) -> WorldSpec:
    """The world the demo was recorded in (tests only: behavior code never sees it)."""
    return TwinRig(seed=DEMO_SEEDS[demo.episode], ideal=True).reveal_truth().world


def test_segmentation_finds_grasp_carry_and_release_from_the_signals(
    demos: list[SourceDemo], task: TaskSpec
) -> None:
    world = load_world("nominal")
    assert [d.object_name for d in demos] == [
        "white_puck",
        "yellow_brick",
        "green_can",
        "purple_box",
    ]
    assert [d.arm for d in demos] == [0, 1, 0, 1]  # Round objects to the left bin.
    for d in demos:
        starts = [d.starts[s] for s in SUBTASKS]
        assert starts == sorted(set(starts)) and starts[0] == 0, d.starts
        c, z = d.closure(), d.objects[:, 2]
        grasp, carry, release = d.starts["grasp"], d.starts["carry"], d.starts["release"]
        assert c[grasp] < 0.3 and c[carry] > 0.5  # Open hand before, closed after.
        rest = np.median(z[:25])
        assert z[carry] - rest > 0.05 > z[grasp] - rest  # Lifted clear at the carry.
        assert c[release + 5] < c[release - 1]  # The hand is opening.
        # It lets go over its bin.
        obj = next(o for o in task.objects if o.name == d.object_name)
        bin_pos = np.asarray(world.layout.bins[task.bin_for(obj).name].pos)
        assert np.linalg.norm(d.objects[release, :2] - bin_pos[:2]) < 0.12


def test_segment_overrides_move_boundaries_and_bad_ones_are_refused(
    source: Path, demos: list[SourceDemo], task: TaskSpec, tmp_path: Path
) -> None:
    fix = tmp_path / "segments.yaml"
    new_carry = demos[1].starts["carry"] + 10
    fix.write_text(f"1: {{carry: {new_carry}}}\n")
    fixed = load_demos(source, task, fix)
    assert fixed[1].starts["carry"] == new_carry
    assert fixed[0].starts == demos[0].starts
    fix.write_text("1: {carry: 1}\n")
    with pytest.raises(DatasetError, match="must increase"):
        load_demos(source, task, fix)
    fix.write_text("1: {lift: 100}\n")
    with pytest.raises(DatasetError, match="unknown subtasks"):
        load_demos(source, task, fix)


def test_adapting_a_demo_to_its_own_instance_reproduces_it(
    demos: list[SourceDemo], task: TaskSpec
) -> None:
    for demo in demos[:2]:
        world = truth_world(demo)
        own = instance_of(demo, task, world)
        actions = adapt(demo, own, task, world)
        assert actions.shape == demo.actions.shape
        np.testing.assert_allclose(actions, demo.actions, atol=1e-3)
        result = Executor(world, task, randomize_appearance=False).run(own, actions, seed=0)
        assert result.success, result.reason


def test_an_arm_collision_fails_an_attempt_even_if_the_object_is_sorted(
    demos: list[SourceDemo], task: TaskSpec
) -> None:
    """A fault injected mid-episode (the idle arm's shoulder thrown down, its links into the
    table, before it springs back home) makes a sorted attempt a ``collision``: generated
    data must not show the arm hitting the cell."""
    demo = demos[0]
    world = truth_world(demo)
    own = instance_of(demo, task, world)
    actions = adapt(demo, own, task, world)
    executor = Executor(world, task, randomize_appearance=False)
    assert executor.run(own, actions, seed=0).success
    idle = 0 if np.ptp(actions[:, :7], axis=0).max() < 1e-9 else 1
    env, step = executor.env, executor.env.step
    shoulder = env.cell.idx.arm_qadr[idle][1]
    calls = []

    def faulty(action: np.ndarray):  # type: ignore[no-untyped-def]
        calls.append(1)
        if len(calls) == len(actions) // 2:
            qpos, qvel = (a[0].copy() for a in env.physics.state())
            qpos[shoulder] = -1.2
            env.physics.set_state(0, qpos, qvel)
        return step(action)

    env.step = faulty  # type: ignore[method-assign]
    result = executor.run(own, actions, seed=0)
    assert result.status == "sorted"  # The object still made it ...
    assert not result.success and result.reason == "collision"  # ... but the attempt fails.


def test_a_shifted_object_shifts_the_grasp_and_not_the_release(
    demos: list[SourceDemo], task: TaskSpec
) -> None:
    demo = demos[2]  # The can: round, so the hand is not turned with it.
    world = truth_world(demo)
    own = instance_of(demo, task, world)
    shifted = dataclasses.replace(own, lateral=own.lateral + 0.03)
    base, moved = adapt(demo, own, task, world), adapt(demo, shifted, task, world)
    grasp = slice(*demo.span("grasp"))
    arm = slice(demo.arm * ARM, demo.arm * ARM + 3)
    shift = moved[grasp, arm] - base[grasp, arm]
    # Across the (true, slightly turned) belt by 3 cm, at every step of the grasp.
    np.testing.assert_allclose(np.linalg.norm(shift, axis=1), 0.03, atol=1e-9)
    np.testing.assert_allclose(shift, np.broadcast_to([0.0, 0.03, 0.0], shift.shape), atol=1e-3)
    np.testing.assert_allclose(moved[-1], base[-1])  # The bins do not move.
    result = Executor(world, task, randomize_appearance=False).run(shifted, moved, seed=0)
    assert result.success, result.reason


def test_a_faster_belt_is_still_intercepted(demos: list[SourceDemo], task: TaskSpec) -> None:
    for demo in (demos[0], demos[2]):
        world = truth_world(demo)
        own = instance_of(demo, task, world)
        fast = dataclasses.replace(own, belt_speed=own.belt_speed + 0.03)
        actions = adapt(demo, fast, task, world)
        assert len(actions) < demo.length  # It meets the object sooner.
        result = Executor(world, task, randomize_appearance=False).run(fast, actions, seed=0)
        assert result.success, (demo.name, result.reason)
        assert result.fingers_in_contact >= 3  # A several-finger grasp, as the demo's.
        # The hand met the object where the demo did, on the belt moving faster.
        grasp = demo.starts["grasp"] - demo.length + len(actions)
        seen = object_pose_on_belt(task, world, fast, np.array([grasp / demo.fps]))[0]
        np.testing.assert_allclose(seen[:2], demo.objects[demo.starts["grasp"], :2], atol=0.01)
    too_fast = dataclasses.replace(own, belt_speed=4 * own.belt_speed)
    with pytest.raises(AdaptError, match="sooner than"):
        adapt(demo, too_fast, task, world)


def test_generation_keeps_successes_logs_failures_resumes_and_repeats(
    source: Path, tmp_path: Path
) -> None:
    cfg = GenerateCfg(source=source, out=tmp_path / "a", episodes=2, image_size=0, seed=7)
    gen = Generator(cfg)
    summary = gen.run()
    gen.close()
    records = [json.loads(line) for line in (cfg.out / "generation/attempts.jsonl").open()]
    assert summary["kept"] == 2 and summary["attempts"] == len(records)
    assert summary["success_rate"] == pytest.approx(2 / len(records))
    assert sum(summary["failures"].values()) == len(records) - 2
    assert all(r["kept"] == (r["reason"] is None) for r in records)
    ds = Dataset(cfg.out)
    assert ds.num_episodes == 2 and all(ds.episode(e)["success"] for e in range(2))
    kept = [r for r in records if r["kept"]]
    for e, r in enumerate(kept):
        row = ds.episode(e)
        assert row["behavior"] == "adapted" and row["world"] == "nominal"
        assert row["seed"] == r["attempt"] and row["source_demo"] == r["source_demo"]
        assert row["object_ids"] == [r["instance"]["object_name"]]
        assert row["belt_speed"] == pytest.approx(r["instance"]["belt_speed"])

    # Resuming asks for one more and continues after the logged attempts (also a job
    # logged before the carry planner was an argument: it planned on the CPU).
    job_path = cfg.out / "generation/job.json"
    job = json.loads(job_path.read_text())
    assert job.pop("planner") == "cpu"
    job_path.write_text(json.dumps(job))
    gen = Generator(cfg.replace(episodes=3))
    more = gen.run()
    gen.close()
    assert more["kept"] == 3 and Dataset(cfg.out).num_episodes == 3
    again = [json.loads(line) for line in (cfg.out / "generation/attempts.jsonl").open()]
    assert [r["attempt"] for r in again] == list(range(len(again)))

    # Continuing with other arguments is refused, and nothing is written.
    with pytest.raises(ValueError, match=r"other arguments \(seed: 7 -> 8\)"):
        Generator(cfg.replace(seed=8)).run()
    assert Dataset(cfg.out).num_episodes == 3

    # The same seed in a fresh folder gives the same episodes, with attempts simulated in
    # two worker processes.
    gen = Generator(cfg.replace(out=tmp_path / "b", episodes=3, workers=2))
    gen.run()
    gen.close()
    first, second = Dataset(cfg.out), Dataset(tmp_path / "b")
    for key in ("action", "observation.state", "observation.environment_state"):
        np.testing.assert_array_equal(first.low_dim()[key], second.low_dim()[key])


def test_rendered_replay_matches_what_the_cameras_saw_live(
    demos: list[SourceDemo], task: TaskSpec
) -> None:
    world = world_at(32)
    demo = demos[3]
    instance = instance_of(demo, task, world)
    actions = adapt(demo, instance, task, world)[:120]
    first = Executor(world, task).run(instance, actions, seed=11)
    second = Executor(world, task).run(instance, actions, seed=11)
    np.testing.assert_array_equal(first.qpos, second.qpos)  # Execution is deterministic.
    views = ReplayRenderer(world, task).render(first, seed=11)
    live = PickSortEnv(world=world, task=task, randomize_appearance=True)
    obs, _ = live.reset(seed=11, options=instance.reset_options())
    for k in range(0, len(first.actions), 40):
        while live.cell.steps[0] < k:
            obs, *_ = live.step(first.actions[live.cell.steps[0]])
        for cam, frames in views.items():
            np.testing.assert_array_equal(frames[k], obs["images"][cam])
    live.close()


def test_bad_input_fails_with_a_clear_message(source: Path, task: TaskSpec, tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    DatasetWriter(empty, DatasetCfg(cameras=(), env_state=True)).close()
    with pytest.raises(DatasetError, match="no successful episodes"):
        load_demos(empty, task)

    blind = tmp_path / "blind"
    with DatasetWriter(blind, DatasetCfg(cameras=())) as writer:
        contract = writer.contract
        writer.add_frame({}, np.zeros(contract.state_dim), np.zeros(contract.action_dim))
        writer.save_episode("t", True, {"object_ids": ["green_can"]})
    with pytest.raises(DatasetError, match="environment_state"):
        load_demos(blind, task)

    # A demo whose hand never closes (the actions of a real demo with the fingers held open).
    real = Dataset(source)
    arrays = real.episode_arrays(2)
    open_hand = tmp_path / "open_hand"
    with DatasetWriter(open_hand, DatasetCfg(cameras=(), env_state=True)) as writer:
        for s, a, o in zip(
            arrays["observation.state"],
            arrays["action"],
            arrays["observation.environment_state"],
            strict=True,
        ):
            a = a.copy()
            a[7:ARM] = a[ARM + 7 :] = 0.0
            writer.add_frame({}, s, a, env_state=o)
        writer.save_episode("t", True, {"object_ids": ["green_can"], "belt_speed": 0.08})
    with pytest.raises(DatasetError, match="no grasp"):
        load_demos(open_hand, task)
    # The same demo with its fingers closes them: only the open hand made it fail.
    assert (closure(arrays["action"].astype(float), 0) > CLOSED).any()

    world = load_world("nominal")
    with pytest.raises(ValueError, match="beyond the belt's half width"):
        check_instance(task, world, TaskInstance("yellow_brick", 0.12, 0.0, 0.08))

    result = runner.invoke(
        app, ["generate", "--source", str(empty), "--out", str(tmp_path / "g"), "--episodes", "1"]
    )
    assert result.exit_code != 0
    assert "no successful episodes" in str(result.exception) + result.output


def test_behaviors_are_named_and_make_the_commands_of_their_modules(
    demos: list[SourceDemo], task: TaskSpec, tmp_path: Path
) -> None:
    """The registry builds each behavior from one setup; the adapted one adapts the demo it
    chooses with the same draws as ``adapt``, and a wrong name gets the nearest names."""
    assert BEHAVIORS.names() == ("adapted", "planned")
    world = load_world("nominal")
    executor = Executor(world, task)
    setup = BehaviorSetup(task, world, executor, demos)
    adapted = make_behavior("adapted", setup)
    assert isinstance(adapted, AdaptedBehavior) and adapted.making == "adapt"
    instance = instance_of(demos[2], task, world)
    made = adapted.commands(instance, np.random.default_rng(4))
    assert made.source_demo == demos[2].name and made.reason is None
    expected = adapt(demos[2], instance, task, world, np.random.default_rng(4))
    np.testing.assert_array_equal(made.actions, expected)
    too_fast = dataclasses.replace(instance, belt_speed=4 * instance.belt_speed)
    failed = adapted.commands(too_fast, np.random.default_rng(4))
    assert failed.actions is None and failed.reason == "unreachable"
    assert "sooner than" in failed.detail and failed.source_demo == demos[2].name
    planned = make_behavior("planned", setup)
    assert isinstance(planned, PlannedBehavior) and planned.making == "plan"
    with pytest.raises(ValueError, match="needs real demonstrations"):
        make_behavior("adapted", BehaviorSetup(task, world, executor))
    with pytest.raises(ValueError, match="did you mean 'planned'"):
        Generator(GenerateCfg(source=None, out=tmp_path / "x", behavior="planed"))
    result = runner.invoke(app, ["generate", "--behavior", "adaptd", "--out", str(tmp_path)])
    assert result.exit_code != 0
    assert "did you mean 'adapted'" in str(result.exception) + result.output


# ----------------------------------------------------------------- planned behavior
@pytest.fixture(scope="module")
def planning(task: TaskSpec) -> tuple[Planner, Executor, WorldSpec]:
    world = load_world("nominal")
    executor = Executor(world, task)
    return Planner(world, task, executor.env.cell), executor, world


def test_planned_routes_are_collision_free_and_meet_the_belt_speed(
    planning: tuple[Planner, Executor, WorldSpec], task: TaskSpec
) -> None:
    planner, executor, world = planning
    instances = [
        TaskInstance("green_can", 0.02, 0.3, 0.09),
        TaskInstance("yellow_brick", -0.03, 1.2, 0.06),
        TaskInstance("white_puck", 0.0, 0.0, 0.1),
    ]
    for instance in instances:
        plan = planner.plan(instance)
        side = ("left", "right")[plan.arm]
        kin = planner.kin[side]
        hands = plan.actions[:, plan.arm * ARM + 7 : (plan.arm + 1) * ARM]
        # Densely along the whole joint route: the arm never enters the table, belt, bins or
        # the other arm; away from the object the hand does not either.
        near_object = {"descend", "close", "lift"}
        for k in range(1, len(plan.route)):
            for u in (0.25, 0.5, 0.75, 1.0):
                q = plan.route[k - 1] + u * (plan.route[k] - plan.route[k - 1])
                assert not kin.collides(q, hands[k], links_only=plan.phases[k] in near_object), (
                    instance,
                    k,
                    plan.phases[k],
                )
        # At the grasp the planned TCP moves with the belt.
        g = plan.grasp_step
        velocity = (plan.tcp[g + 1, :3] - plan.tcp[g - 1, :3]) * planner.fps / 2
        np.testing.assert_allclose(velocity, [instance.belt_speed, 0.0, 0.0], atol=0.005)
        result = executor.run(instance, plan.actions, seed=0)
        assert result.success and result.reason is None, (instance, result.reason)
        # Executed, the hand follows the object when it closes (measured TCP velocity).
        tcp = result.states[:, plan.arm * 7 : plan.arm * 7 + 3]
        measured = (tcp[g + 3] - tcp[g - 3]) * planner.fps / 6
        np.testing.assert_allclose(measured[:2], [instance.belt_speed, 0.0], atol=0.02)


def test_planner_failure_is_a_clear_reason(task: TaskSpec, tmp_path: Path) -> None:
    world = load_world("nominal")
    executor = Executor(world, task)
    # Meeting the object a metre downstream of the arm's base is beyond its reach.
    stuck = Planner(world, task, executor.env.cell, PlannerCfg(meet_offsets_m=(1.0,)))
    with pytest.raises(PlanError, match="no collision-free route for the green_can"):
        stuck.plan(TaskInstance("green_can", 0.0, 0.0, 0.08))
    cfg = GenerateCfg(
        source=None, out=tmp_path / "p", episodes=2, image_size=0, behavior="planned", seed=3
    )
    gen = Generator(cfg)
    summary = gen.run()
    gen.close()
    assert summary["kept"] == 2 and summary["behavior"] == "planned"
    assert Dataset(cfg.out).episode(0)["behavior"] == "planned"
    gen = Generator(cfg.replace(out=tmp_path / "q"))
    gen.behavior = PlannedBehavior(stuck)
    gen.cfg = cfg.replace(out=tmp_path / "q", max_attempts=2)
    summary = gen.run()
    gen.close()
    assert summary["kept"] == 0 and summary["failures"]["planner_failure"] == 2


def test_instances_scale_objects_in_the_simulation_and_the_grasp_with_them(
    demos: list[SourceDemo], task: TaskSpec
) -> None:
    world = load_world("nominal")
    env = PickSortEnv(world=world, task=task, images=False)
    can = next(o for o in task.all_objects if o.name == "green_can")
    geom = env.model.geom("obj:green_can").id
    big = TaskInstance("green_can", 0.0, 0.0, 0.08, scale=1.1)
    _, info = env.reset(seed=0, options=big.reset_options())
    np.testing.assert_allclose(env.model.geom_size[geom, :2], np.array(can.size) * 1.1)
    belt_top = world.layout.belt.pos[2]  # The belt surface.
    assert info["object_pos"][0, 2] - belt_top == pytest.approx(can.rest_height * 1.1, abs=3e-3)
    env.reset(seed=0, options=dataclasses.replace(big, scale=1.0).reset_options())
    np.testing.assert_allclose(env.model.geom_size[geom, :2], can.size)  # Back to spec size.
    env.close()
    with pytest.raises(ValueError, match="outside the task's size_scale"):
        check_instance(task, world, dataclasses.replace(big, scale=1.5))

    # Adapted to a larger can, the hand keeps its place relative to the can's size.
    demo = demos[2]
    truth = truth_world(demo)
    own = instance_of(demo, task, truth)
    larger = dataclasses.replace(own, scale=1.1)
    base, grown = adapt(demo, own, task, truth), adapt(demo, larger, task, truth)
    g0 = demo.starts["grasp"]
    centre = object_pose_on_belt(task, truth, own, np.array([g0 / demo.fps]))[0, :3]
    centre_big = object_pose_on_belt(task, truth, larger, np.array([g0 / demo.fps]))[0, :3]
    arm = slice(demo.arm * ARM, demo.arm * ARM + 3)
    np.testing.assert_allclose(
        grown[g0, arm] - centre_big, 1.1 * (base[g0, arm] - centre), atol=1e-6
    )


def test_a_killed_generation_job_resumes_to_the_same_episodes(source: Path, tmp_path: Path) -> None:
    """SIGKILL a ``r2s2r generate`` run once it has kept an episode; the rerun finishes the
    job, and the dataset is the one an uninterrupted run writes."""
    args = ["--source", str(source), "--episodes", "3", "--image-size", "32", "--seed", "5"]
    killed = tmp_path / "killed"
    log = killed / "generation/attempts.jsonl"
    cmd = [sys.executable, "-m", "r2s2r", "generate", "--out", str(killed), *args]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while not (log.exists() and '"kept": true' in log.read_text()):
            assert proc.poll() is None, "the job ended before keeping an episode"
            assert time.monotonic() < deadline, "no kept episode within 120 s"
            time.sleep(0.05)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait()
    assert Dataset(killed).num_episodes < 3
    result = runner.invoke(app, ["generate", "--out", str(killed), *args, "--json"])
    assert result.exit_code == 0, result.output
    whole = tmp_path / "whole"
    result = runner.invoke(app, ["generate", "--out", str(whole), *args, "--json"])
    assert result.exit_code == 0, result.output
    assert verify(killed, decode=True).ok
    first, second = Dataset(killed), Dataset(whole)
    assert first.num_episodes == second.num_episodes == 3
    assert [first.episode(e)["seed"] for e in range(3)] == [
        second.episode(e)["seed"] for e in range(3)
    ]
    for key in ("action", "observation.state"):
        np.testing.assert_array_equal(first.low_dim()[key], second.low_dim()[key])
    # The views are the same renders (the states above are) and their coding the same bytes
    # (r2s2r.data.video.x264_params: x264's AVX-512 functions did not code them the same in
    # every process), so the decoded images are the same to the bit.
    for cam in first.camera_keys:
        np.testing.assert_array_equal(
            first.episode_images(2, cam), second.episode_images(2, cam), err_msg=cam
        )


def test_diverged_physics_ends_the_attempt_as_unstable(task: TaskSpec) -> None:
    """A fault injected into the simulation (a non-finite object velocity, which MuJoCo
    answers by resetting the state) ends the attempt with reason ``unstable``, never as a
    success or an ordinary failure."""
    world = load_world("nominal")
    executor = Executor(world, task)
    env, step = executor.env, executor.env.step
    calls = []

    def faulty(action: np.ndarray):  # type: ignore[no-untyped-def]
        calls.append(1)
        if len(calls) == 10:
            qpos, qvel = (a[0].copy() for a in env.physics.state())
            qvel[-6:] = np.nan
            env.physics.set_state(0, qpos, qvel)
        return step(action)

    env.step = faulty  # type: ignore[method-assign]
    instance = TaskInstance("green_can", 0.0, 0.0, 0.08)
    obs, _ = env.reset(seed=0, options=instance.reset_options())
    # Both arms hold their home poses, hands open.
    hold = np.concatenate([np.concatenate([pose, np.zeros(20)]) for pose in obs["tcp_pose"]])
    result = executor.run(instance, hold[None], seed=0)
    assert result.reason == "unstable" and not result.success
    assert len(result.actions) == 10
