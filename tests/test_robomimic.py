"""The robomimic export read by robomimic 0.3 itself: its ``SequenceDataset`` at its default
settings, with frame stacks, sequences and goals, and its own training loop, on an export of
a dataset recorded from the twin (``make setup`` installs robomimic beside the core)."""

from __future__ import annotations

import json
from pathlib import Path

import h5py
import numpy as np
import pytest

# robomimic's models import torch; torch must load before MuJoCo renders in this process.
torch = pytest.importorskip("torch")
pytest.importorskip("robomimic", reason="robomimic 0.3 is installed by `make setup`")

from robomimic.utils.dataset import SequenceDataset  # noqa: E402

from r2s2r.data import Dataset, export_robomimic  # noqa: E402
from r2s2r.data.config import ACTION_KEY, ENV_STATE_KEY, STATE_KEY  # noqa: E402

DATASET_KEYS = ("actions", "rewards", "dones")  # robomimic's config.train.dataset_keys


@pytest.fixture(scope="module")
def exports(recorded_demos: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("robomimic")
    with Dataset(recorded_demos) as ds:
        return {
            mode: export_robomimic(ds, out / f"{mode}.hdf5", valid_every=3, next_obs=mode)
            for mode in ("copy", "link")
        }


def expected_obs(ds: Dataset, episode: int) -> dict[str, np.ndarray]:
    """Each robomimic observation key of ``episode``, from the r2s2r dataset."""
    arrays = ds.episode_arrays(episode)
    obs = {k: arrays[STATE_KEY][:, sl] for k, sl in ds.contract.state_layout().items()}
    obs["object"] = arrays[ENV_STATE_KEY]
    for cam in ds.cameras:
        obs[f"{cam.name}_image"] = ds.episode_images(episode, cam.key)
    return obs


def obs_keys(path: Path) -> list[str]:
    with h5py.File(path, "r") as f:
        return sorted(f["data/demo_0/obs"])


@pytest.mark.parametrize("mode", ["copy", "link"])
def test_sequence_dataset_at_its_defaults_reads_obs_next_obs_and_actions(
    mode: str, exports: dict[str, Path], recorded_demos: Path
) -> None:
    path = exports[mode]
    keys = obs_keys(path)
    # Every argument but the two required ones at robomimic's defaults (load_next_obs=True).
    sd = SequenceDataset(str(path), obs_keys=keys, dataset_keys=DATASET_KEYS)
    ds = Dataset(recorded_demos)
    assert len(sd) == len(ds) and sd.n_demos == ds.num_episodes
    assert len(keys) == 3 + 1 + len(ds.cameras)
    start = 0
    for e in range(ds.num_episodes):
        obs = expected_obs(ds, e)
        actions = ds.episode_arrays(e)[ACTION_KEY]
        n, success = len(actions), bool(ds.episode(e)["success"])
        for t in (0, n // 2, n - 1):
            item = sd[start + t]
            assert "goal_obs" not in item  # Goal-free (goal_mode=None).
            np.testing.assert_array_equal(item["actions"][0], actions[t])
            assert item["dones"][0] == float(t == n - 1)
            assert item["rewards"][0] == float(t == n - 1 and success)
            for k in keys:
                np.testing.assert_array_equal(item["obs"][k][0], obs[k][t], err_msg=k)
                # The step after; the last step's next observation repeats it.
                np.testing.assert_array_equal(
                    item["next_obs"][k][0], obs[k][min(t + 1, n - 1)], err_msg=k
                )
        start += n


def test_sequence_dataset_stacks_frames_pads_sequences_and_reads_goals(
    exports: dict[str, Path], recorded_demos: Path
) -> None:
    path = exports["link"]
    keys = ["tcp_pose", "object", "head_image"]
    sd = SequenceDataset(
        str(path),
        obs_keys=keys,
        dataset_keys=("actions",),
        frame_stack=3,
        seq_length=4,
        goal_mode="last",
        hdf5_cache_mode="all",
        filter_by_attribute="valid",
    )
    ds = Dataset(recorded_demos)
    # valid_every=3: the third demo alone is in mask/valid.
    assert sd.demos == ["demo_2"] and len(sd) == ds.episode(2)["length"]
    obs = expected_obs(ds, 2)
    actions = ds.episode_arrays(2)[ACTION_KEY]
    n = len(actions)
    for t in (0, 1, n // 2, n - 2):
        item = sd[t]
        # frame_stack - 1 frames before t (the first repeated), then seq_length from t on
        # (the last repeated).
        steps = np.clip(np.arange(t - 2, t + 4), 0, n - 1)
        np.testing.assert_array_equal(item["actions"], actions[steps])
        for k in keys:
            assert item["obs"][k].shape == (6, *obs[k].shape[1:])
            np.testing.assert_array_equal(item["obs"][k], obs[k][steps], err_msg=k)
            np.testing.assert_array_equal(
                item["next_obs"][k], obs[k][np.minimum(steps + 1, n - 1)], err_msg=k
            )
            np.testing.assert_array_equal(item["goal_obs"][k], obs[k][n - 1], err_msg=k)


def test_env_args_name_the_registered_env_with_the_dataset_contract(
    exports: dict[str, Path], recorded_demos: Path
) -> None:
    import gymnasium as gym

    import r2s2r  # noqa: F401  (registers the env ids)

    with h5py.File(exports["copy"], "r") as f:
        env_args = json.loads(f["data"].attrs["env_args"])
    assert env_args["type"] == 2  # robomimic's EnvType.GYM_TYPE
    spec = gym.spec(env_args["env_name"])
    env = gym.make(spec.id, **env_args["env_kwargs"])
    try:
        ds = Dataset(recorded_demos)
        env.unwrapped.contract.check_compatible(ds.contract, "the export's env", "the dataset")
        assert env.unwrapped.env_state == env_args["env_kwargs"]["env_state"] is True
    finally:
        env.close()


def test_robomimic_trains_bc_on_the_export(exports: dict[str, Path]) -> None:
    """What robomimic's training script (``robomimic/scripts/train.py``) does with a dataset,
    step by step: shapes from the file, a BC policy over proprio, object pose and the head
    camera (its ResNet-18 encoder, random weights), the train / valid splits from the masks,
    two gradient steps and a validation pass."""
    import robomimic.utils.file_utils as FileUtils
    import robomimic.utils.obs_utils as ObsUtils
    import robomimic.utils.train_utils as TrainUtils
    from robomimic.algo import algo_factory
    from robomimic.config import config_factory
    from torch.utils.data import DataLoader

    cfg = config_factory("bc")
    with cfg.values_unlocked():
        cfg.train.data = str(exports["link"])
        cfg.train.hdf5_filter_key = "train"
        cfg.train.hdf5_validation_filter_key = "valid"
        cfg.experiment.validate = True
        cfg.train.batch_size = 8
        cfg.observation.modalities.obs.low_dim = ["tcp_pose", "arm_joints", "hand_joints", "object"]
        cfg.observation.modalities.obs.rgb = ["head_image"]
    ObsUtils.initialize_obs_utils_with_config(cfg)
    meta = FileUtils.get_shape_metadata_from_dataset(cfg.train.data, cfg.all_obs_keys)
    assert meta["ac_dim"] == 54 and meta["use_images"]
    assert meta["all_shapes"]["head_image"] == [3, 64, 64]  # robomimic's CHW
    model = algo_factory("bc", cfg, meta["all_shapes"], meta["ac_dim"], torch.device("cpu"))
    trainset, validset = TrainUtils.load_data_for_training(cfg, obs_keys=meta["all_obs_keys"])
    assert (trainset.demos, validset.demos) == (["demo_0", "demo_1"], ["demo_2"])
    loader = DataLoader(trainset, batch_size=8, shuffle=True, drop_last=True)
    log = TrainUtils.run_epoch(model, loader, epoch=1, num_steps=2)
    assert np.isfinite(log["Loss"]) and log["Policy_Grad_Norms"] > 0
    with torch.no_grad():
        valid = TrainUtils.run_epoch(
            model, DataLoader(validset, batch_size=8), epoch=1, validate=True, num_steps=1
        )
    assert np.isfinite(valid["Loss"])


def test_export_refuses_an_unknown_next_obs_mode(recorded_demos: Path, tmp_path: Path) -> None:
    with Dataset(recorded_demos) as ds, pytest.raises(ValueError, match="next_obs must be one of"):
        export_robomimic(ds, tmp_path / "x.hdf5", next_obs="mirror")  # type: ignore[arg-type]
