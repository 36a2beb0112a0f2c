"""A learned policy through the runtime on the twin: the request the loop builds (views,
the proprio history it keeps, the instruction) is the one the policy was trained on."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from r2s2r.data import Dataset
from r2s2r.data.config import ACTION_KEY, ENV_STATE_KEY, STATE_KEY
from r2s2r.policy.base import BELT_SPEED_KEY, STATE_PAD_KEY, TASK_KEY, PolicyError
from r2s2r.policy.config import load_policy_cfg
from r2s2r.policy.learned import LearnedPolicy
from r2s2r.policy.train import TrainCfg, Trainer
from r2s2r.policy.windows import WindowDataset
from r2s2r.rig.observe import observe
from r2s2r.rig.safety import SafetySupervisor
from r2s2r.rig.twin import TwinRig
from r2s2r.runtime import Runtime, RuntimeCfg, StepLog, start_episode
from r2s2r.runtime.request import StateHistory, build_request
from r2s2r.runtime.scripted import OperatorPolicy
from r2s2r.sim.contract import Contract
from r2s2r.spec.worlds import world_at


def _train(demos: Path, tmp: Path, preset: str | Path = "tiny") -> Path:
    cfg = TrainCfg.from_dict(
        {
            "preset": str(preset),
            "real": demos,
            "steps": 2,
            "batch_size": 2,
            "warmup_steps": 1,
            "workers": 0,
            "save_every": 1000,
            "cache_dir": tmp / "cache",
            "stats_windows": 200,
        }
    )
    Trainer(cfg, tmp / "run").fit()
    return tmp / "run"


@pytest.fixture(scope="module")
def run(recorded_demos: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _train(recorded_demos, tmp_path_factory.mktemp("learned"))


def _train_tiny_with(demos: Path, tmp: Path, **changes: bool) -> Path:
    """A run of the tiny preset with ``changes`` made to it (an extra input switched on)."""
    preset = tmp / "tiny_variant.yaml"
    cfg = load_policy_cfg("tiny").replace(**changes)
    preset.write_text(yaml.safe_dump(cfg.model_dump(mode="json")))
    return _train(demos, tmp, preset)


@pytest.fixture(scope="module")
def belt_run(recorded_demos: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny preset with the belt speed token."""
    return _train_tiny_with(
        recorded_demos, tmp_path_factory.mktemp("learned_belt"), belt_speed=True
    )


@pytest.fixture(scope="module")
def object_run(recorded_demos: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny preset with the (diagnostic) object-pose token."""
    tmp = tmp_path_factory.mktemp("learned_object")
    return _train_tiny_with(recorded_demos, tmp, object_pose=True)


def _twin(seed: int) -> TwinRig:
    return TwinRig(seed=seed, world=world_at(64))


def test_a_learned_policy_runs_in_lockstep_with_rtc(run: Path) -> None:
    twin = _twin(1)
    policy = LearnedPolicy.load(run, device="cpu")
    sup = SafetySupervisor(dict(twin.arms), dict(twin.hands), twin.now, twin.embodiment)
    cfg = RuntimeCfg(execution="rtc", exec_horizon=10, delay_periods=3)
    with Runtime(twin, policy, sup, cfg) as rt:
        episode = rt.run_episode(start_episode(twin, twin.task, twin.nominal), max_s=0.7)
    assert episode.ended_by in ("timeout", "safety_stop", "verdict")
    chunks = episode.chunks
    assert len(chunks) >= 3 and all(c.accepted for c in chunks[:3]), [c.reason for c in chunks]
    # In lockstep every chunk arrives exactly delay_periods after its observation, and from
    # the second one on RTC keeps that many committed actions.
    assert [c.arrived_step - c.requested_step for c in chunks if c.arrived_step is not None][
        :3
    ] == [3, 3, 3]
    assert [c.delay for c in chunks[:3]] == [0, 3, 3]
    # The first three periods wait for the first chunk (the arms hold); then every period
    # is covered.
    held = [s.action is None for s in episode.steps]
    assert held[:3] == [True] * 3 and not any(held[3:])
    # The executed actions over each delay are the previous chunk's, exactly.
    c0, c1 = chunks[0], chunks[1]
    assert c0.actions is not None
    for k in range(c1.requested_step, c1.requested_step + 3):
        np.testing.assert_array_equal(episode.steps[k].action, c0.actions[k - c0.requested_step])


def test_the_first_request_is_the_policys_env_form_after_a_reset(run: Path) -> None:
    twin = _twin(2)
    policy = LearnedPolicy.load(run, device="cpu")
    contract = Contract.of(twin.embodiment, "tcp", policy.metadata.cameras)
    # The server checks the TCP quaternions where the contract holds them.
    assert policy.metadata.quaternions == contract.state_quaternions() == (3, 10)
    start = start_episode(twin, twin.task, twin.nominal)
    obs = observe(twin, contract, start.instruction)
    history = StateHistory(policy.metadata.state_history)
    history.push(contract.state(obs))
    request = build_request(obs, history, contract.cameras)
    policy.reset()
    np.testing.assert_allclose(policy.infer(request), policy.infer(obs), atol=1e-5)


def test_the_runtimes_requests_are_the_training_windows_of_a_recorded_take(
    recorded_demos: Path,
) -> None:
    # The recorded take replayed by its own operator through the runtime: at every frame the
    # request the loop would build (its proprio history, padding, instruction) equals the
    # training window there, and the action run at the frame is the window's first action.
    history = StateHistory(20)
    requests: dict[int, tuple[dict[str, Any], np.ndarray | None]] = {}
    twin = _twin(1)
    contract = Contract.of(twin.embodiment, "tcp", ())
    sup = SafetySupervisor(dict(twin.arms), dict(twin.hands), twin.now, twin.embodiment)

    def on_step(step: StepLog, obs: dict[str, Any] | None) -> None:
        assert obs is not None
        history.push(contract.state(obs))
        requests[step.step] = (build_request(obs, history, ()), step.action)

    policy = OperatorPolicy.for_twin(twin, 1)
    with Runtime(twin, policy, sup, RuntimeCfg(execution="sync", exec_horizon=1)) as rt:
        episode = rt.run_episode(start_episode(twin, twin.task, twin.nominal), 1.5, on_step)
    with Dataset(recorded_demos) as ds:
        frames = int(ds.episodes[0]["dataset_to_index"])
        assert len(episode.steps) == frames
        for k in range(frames):
            request, action = requests[k]
            window = ds.window(k, 20, 40)
            np.testing.assert_array_equal(request[STATE_KEY], window[STATE_KEY])
            np.testing.assert_array_equal(request[STATE_PAD_KEY], window["state_is_pad"])
            assert request[TASK_KEY] == ds.frame(k)["task"]
            assert request[BELT_SPEED_KEY] == ds.episodes[0]["belt_speed"]
            assert action is not None
            np.testing.assert_allclose(action, window[ACTION_KEY][0], atol=1e-5)


def test_a_policy_reading_the_belt_speed_gets_the_conveyors_reading(
    belt_run: Path, recorded_demos: Path
) -> None:
    # Training gives each window its take's recorded speed; live, the runtime hands over the
    # conveyor's reading, in an observation and in a request alike.
    windows = WindowDataset(recorded_demos, 64, 20, 40, use_cache=False)
    with Dataset(recorded_demos) as ds:
        last = int(ds.episodes[1]["dataset_from_index"])
        assert windows[last]["belt_speed"] == pytest.approx(ds.episodes[1]["belt_speed"])
    twin = _twin(3)
    policy = LearnedPolicy.load(belt_run, device="cpu")
    contract = Contract.of(twin.embodiment, "tcp", policy.metadata.cameras)
    start = start_episode(twin, twin.task, twin.nominal)
    obs = observe(twin, contract, start.instruction)
    assert obs["belt_speed"] == twin.conveyor.speed() == start.belt_speed
    history = StateHistory(policy.metadata.state_history)
    history.push(contract.state(obs))
    request = build_request(obs, history, contract.cameras)
    assert request[BELT_SPEED_KEY] == obs["belt_speed"]
    policy.reset()
    chunk = policy.infer(request)
    np.testing.assert_allclose(chunk, policy.infer(obs), atol=1e-5)
    # The token is read: another speed, another chunk (same noise).
    faster = policy.infer({**request, BELT_SPEED_KEY: 3 * request[BELT_SPEED_KEY]})
    assert np.abs(faster - chunk).max() > 1e-6
    del request[BELT_SPEED_KEY]
    with pytest.raises(PolicyError, match="belt_speed"):
        policy.infer(request)


def test_a_policy_told_the_objects_pose_gets_the_twins_truth_through_the_runtime(
    object_run: Path, recorded_demos: Path
) -> None:
    # Training gives each window its frame's recorded pose of the object.
    windows = WindowDataset(recorded_demos, 64, 20, 40, use_cache=False)
    with Dataset(recorded_demos) as ds:
        poses = ds.low_dim()[ENV_STATE_KEY]
    np.testing.assert_array_equal(windows[7]["object_pose"], poses[7])
    policy = LearnedPolicy.load(object_run, device="cpu")
    assert policy.metadata.environment_state
    # The runtime observes the twin's truth every period and sends it in each request: the
    # policy refuses a request without it, so every chunk accepted is a chunk that had it.
    twin = _twin(4)
    sup = SafetySupervisor(dict(twin.arms), dict(twin.hands), twin.now, twin.embodiment)
    with Runtime(twin, policy, sup, RuntimeCfg(execution="sync", exec_horizon=10)) as rt:
        episode = rt.run_episode(start_episode(twin, twin.task, twin.nominal), max_s=0.5)
    assert len(episode.chunks) >= 2 and all(c.accepted for c in episode.chunks)
    contract = Contract.of(twin.embodiment, "tcp", policy.metadata.cameras)
    obs = observe(twin, contract, "sort", environment_state=True)
    history = StateHistory(policy.metadata.state_history)
    history.push(contract.state(obs))
    request = build_request(obs, history, contract.cameras)
    np.testing.assert_allclose(request[ENV_STATE_KEY], twin.presenter.object_pose(), atol=1e-6)
    chunk = policy.infer(request)
    moved = request[ENV_STATE_KEY] + np.array([0.2, 0, 0, 0, 0, 0, 0], dtype=np.float32)
    assert np.abs(policy.infer({**request, ENV_STATE_KEY: moved}) - chunk).max() > 1e-6
    del request[ENV_STATE_KEY]
    with pytest.raises(PolicyError, match="object_pose"):
        policy.infer(request)
