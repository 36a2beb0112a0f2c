"""Export to robomimic's HDF5 layout, as read by robomimic, MimicGen and Isaac Lab Mimic.

Layout::

    data                 attrs: total (frames), env_args (JSON)
    data/demo_<i>        attrs: num_samples, task, success, and the episode metadata
        actions          (T, A) float32
        states           (T, S) float32   the proprio vector (no simulator state is recorded)
        rewards, dones   (T,)             1 at the last step (rewards: if the episode succeeded)
        obs/tcp_pose     (T, arms x 7)    obs/arm_joints, obs/hand_joints: the proprio's parts
        obs/object       (T, 7)           the presented object's pose, where it was tracked
        obs/<camera>_image  (T, H, W, 3) uint8
        next_obs/<key>   (T, ...)         obs/<key> one step later; the last step repeats
    mask/train, mask/valid   demo names as bytes

robomimic's ``SequenceDataset`` reads ``next_obs`` at its default settings
(``load_next_obs=True``, which ``goal_mode="last"`` also needs). The dataset records what
was observed before each action, so the observation after the last action was never seen:
its ``next_obs`` repeats the last observation, and ``dones`` marks that step. With
``next_obs="link"`` the ``next_obs`` datasets are HDF5 virtual datasets over ``obs`` (in the
same file), so the images are stored once; tools that merge files by copying demo groups
under new names break such links, so the default writes plain copies.

``env_args`` names the gymnasium id r2s2r registers (``type`` 2, robomimic's gym type) with
the constructor arguments that give an env of the dataset's contract.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

import h5py
import numpy as np

from r2s2r.data.config import ACTION_KEY, ENV_STATE_KEY, EPISODE_META_FIELDS, STATE_KEY
from r2s2r.data.reader import Dataset

NextObs = Literal["copy", "link"]
NEXT_OBS_MODES: tuple[NextObs, ...] = ("copy", "link")
# robomimic's ``EnvType.GYM_TYPE`` (robomimic/envs/env_base.py); Isaac Lab writes it too.
GYM_ENV_TYPE = 2


def export_robomimic(
    dataset: Dataset,
    out_path: str | Path,
    valid_every: int = 10,
    env_name: str = "R2S2R/PickSort-v0",
    next_obs: NextObs = "copy",
) -> Path:
    """Write ``dataset`` as robomimic HDF5; every ``valid_every``-th demo goes to ``valid``.
    ``next_obs``: ``copy`` (plain datasets) or ``link`` (virtual datasets over ``obs``)."""
    if next_obs not in NEXT_OBS_MODES:
        raise ValueError(f"next_obs must be one of {NEXT_OBS_MODES}, got {next_obs!r}")
    if dataset.num_episodes == 0:
        raise ValueError(f"{dataset.root}: the dataset has no episodes to export")
    out = Path(out_path)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.stem + ".partial" + out.suffix)
    names: list[str] = []
    contract = dataset.contract
    # Where each proprio part lies in the state vector.
    proprio = contract.state_layout()
    with h5py.File(tmp, "w") as f:
        data = f.create_group("data")
        data.attrs["total"] = len(dataset)
        data.attrs["env_args"] = json.dumps(
            {
                "env_name": env_name,
                "type": GYM_ENV_TYPE,
                "env_kwargs": {
                    "action_mode": contract.action_mode,
                    "images": bool(dataset.cameras),
                    "env_state": ENV_STATE_KEY in dataset.features,
                },
                "r2s2r": {"fps": dataset.fps, "robot_type": dataset.info["robot_type"]},
            }
        )
        for i in range(dataset.num_episodes):
            row = dataset.episode(i)
            arrays = dataset.episode_arrays(i)
            name = f"demo_{i}"
            names.append(name)
            demo = data.create_group(name)
            n = len(arrays["timestamp"])
            demo.attrs["num_samples"] = n
            demo.attrs["task"] = row["tasks"][0]
            demo.attrs["success"] = bool(row["success"])
            for key in EPISODE_META_FIELDS:
                if row.get(key) is not None:
                    value = row[key]
                    demo.attrs[key] = json.dumps(value) if isinstance(value, list) else value
            demo.create_dataset("actions", data=arrays[ACTION_KEY])
            demo.create_dataset("states", data=arrays[STATE_KEY])
            dones = np.zeros(n, dtype=np.int64)
            dones[-1] = 1
            demo.create_dataset("dones", data=dones)
            demo.create_dataset("rewards", data=dones * float(row["success"]))
            obs = demo.create_group("obs")
            for key, sl in proprio.items():
                obs.create_dataset(key, data=arrays[STATE_KEY][:, sl])
            if ENV_STATE_KEY in arrays:
                # robomimic's name for low-dimensional object state.
                obs.create_dataset("object", data=arrays[ENV_STATE_KEY])
            for cam in dataset.cameras:
                images = dataset.episode_images(i, cam.key)
                obs.create_dataset(
                    f"{cam.name}_image",
                    data=images,
                    chunks=(1, *images.shape[1:]),
                    compression="gzip",
                    compression_opts=1,
                )
            _write_next_obs(demo, next_obs)
        valid = names[valid_every - 1 :: valid_every] if valid_every > 0 else []
        train = [n for n in names if n not in valid]
        mask = f.create_group("mask")
        mask.create_dataset("train", data=np.array(train, dtype="S"))
        mask.create_dataset("valid", data=np.array(valid, dtype="S"))
    tmp.replace(out)
    return out


def _write_next_obs(demo: h5py.Group, mode: NextObs) -> None:
    """``demo/next_obs/<key>``: every ``obs/<key>`` shifted one step on, the last repeated."""
    obs = demo["obs"]
    nxt = demo.create_group("next_obs")
    for key in obs:
        src = obs[key]
        n = src.shape[0]
        if mode == "copy":
            shifted = np.concatenate([src[1:], src[-1:]])
            nxt.create_dataset(
                key,
                data=shifted,
                chunks=src.chunks,
                compression=src.compression,
                compression_opts=src.compression_opts,
            )
            continue
        # "." is HDF5's name for the file that holds the virtual dataset, so the links
        # survive moving or renaming the file.
        source = h5py.VirtualSource(".", src.name, shape=src.shape, dtype=src.dtype)
        layout = h5py.VirtualLayout(shape=src.shape, dtype=src.dtype)
        if n > 1:
            layout[: n - 1] = source[1:]
        layout[n - 1] = source[n - 1]
        nxt.create_virtual_dataset(key, layout)
