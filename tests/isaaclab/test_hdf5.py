"""Conversion between r2s2r datasets and Isaac Lab's HDF5 format, both ways, through Isaac
Lab's own ``HDF5DatasetFileHandler``."""

from __future__ import annotations

import h5py
import numpy as np
import pytest
from isaaclab.utils.datasets import HDF5DatasetFileHandler
from r2s2r_isaaclab.hdf5 import from_isaaclab, to_isaaclab

from r2s2r.data.config import ACTION_KEY, ENV_STATE_KEY, STATE_KEY, DatasetError, VideoCfg
from r2s2r.data.reader import Dataset


def test_round_trip_keeps_every_frame_image_and_field(demo, tmp_path):
    src = Dataset(demo.root)
    path = to_isaaclab(src, tmp_path / "demo.hdf5")
    # Isaac Lab's handler reads what was written: one demo, its actions and proprio.
    handler = HDF5DatasetFileHandler()
    handler.open(str(path))
    assert list(handler.get_episode_names()) == ["demo_0"]
    episode = handler.load_episode("demo_0", "cpu")
    handler.close()
    arrays = src.episode_arrays(0)
    n = len(arrays[ACTION_KEY])
    np.testing.assert_array_equal(episode.data["actions"].numpy(), arrays[ACTION_KEY])
    assert episode.data["obs"]["tcp_pose"].shape == (n, 2, 7)
    assert episode.data["obs"]["head_image"].shape == (n, 64, 64, 3)
    assert bool(episode.success) == demo.success
    back = from_isaaclab(path, tmp_path / "back", video=VideoCfg(lossless=True))
    assert back.num_episodes == src.num_episodes == 1
    assert back.contract == src.contract
    a, b = back.episode_arrays(0), src.episode_arrays(0)
    for key in (STATE_KEY, ACTION_KEY, ENV_STATE_KEY, "timestamp"):
        np.testing.assert_array_equal(a[key], b[key], err_msg=key)
    for cam in src.cameras:
        np.testing.assert_array_equal(
            back.episode_images(0, cam.key), src.episode_images(0, cam.key)
        )
    ra, rb = back.episode(0), src.episode(0)
    for key in ("tasks", "success", "world", "behavior", "seed", "belt_speed"):
        assert ra[key] == rb[key], key


def test_state_parts_land_in_isaac_lab_obs(demo, tmp_path):
    src = Dataset(demo.root)
    path = to_isaaclab(src, tmp_path / "demo.hdf5")
    state = src.episode_arrays(0)[STATE_KEY]
    with h5py.File(path) as f:
        obs = f["data/demo_0/obs"]
        n = len(state)
        np.testing.assert_array_equal(obs["tcp_pose"][:].reshape(n, -1), state[:, :14])
        np.testing.assert_array_equal(obs["arm_joints"][:].reshape(n, -1), state[:, 14:28])
        np.testing.assert_array_equal(obs["hand_joints"][:].reshape(n, -1), state[:, 28:])
        assert f["data"].attrs["total"] == n


def test_a_file_without_the_r2s2r_block_converts_with_defaults(demo, tmp_path):
    src = Dataset(demo.root)
    path = to_isaaclab(
        src, tmp_path / "demo.hdf5", env_name="Isaac-R2S2R-PickSort-Grounded-Mimic-v0"
    )
    # What Isaac Lab Mimic's own writer leaves: env_args with only env_name and type.
    with h5py.File(path, "r+") as f:
        f["data"].attrs["env_args"] = (
            '{"env_name": "Isaac-R2S2R-PickSort-Grounded-Mimic-v0", "type": 2}'
        )
    back = from_isaaclab(path, tmp_path / "back")
    assert back.episode(0)["tasks"] == ["Isaac-R2S2R-PickSort-Grounded-Mimic-v0"]
    np.testing.assert_array_equal(
        back.episode_arrays(0)[ACTION_KEY], src.episode_arrays(0)[ACTION_KEY]
    )


def test_bad_files_name_what_is_wrong(demo, tmp_path):
    with pytest.raises(FileNotFoundError, match="no such Isaac Lab dataset"):
        from_isaaclab(tmp_path / "missing.hdf5", tmp_path / "x")
    path = to_isaaclab(Dataset(demo.root), tmp_path / "demo.hdf5")
    with h5py.File(path, "r+") as f:
        del f["data/demo_0/obs/arm_joints"]
    with pytest.raises(DatasetError, match=r"data/demo_0/obs: missing \['arm_joints'\]"):
        from_isaaclab(path, tmp_path / "y")
    with pytest.raises(ValueError, match="end in .hdf5"):
        to_isaaclab(Dataset(demo.root), tmp_path / "demo.h5")
