"""Export to robomimic's HDF5 layout, as read by robomimic, MimicGen and Isaac Lab Mimic.

Layout::

    data                 attrs: total (frames), env_args (JSON)
    data/demo_<i>        attrs: num_samples, task, success, and the episode metadata
        actions          (T, A) float32
        states           (T, S) float32   the proprio vector (no simulator state is recorded)
        rewards, dones   (T,)             1 at the last step (rewards: if the episode succeeded)
        obs/tcp_pose     (T, arms x 7)    obs/arm_joints, obs/hand_joints: the proprio's parts
        obs/<camera>_image  (T, H, W, 3) uint8
    mask/train, mask/valid   demo names as bytes
"""

from __future__ import annotations

import json
from pathlib import Path

import h5py
import numpy as np

from r2s2r.data.config import ACTION_KEY, ENV_STATE_KEY, EPISODE_META_FIELDS, STATE_KEY
from r2s2r.data.reader import Dataset


def export_robomimic(
    dataset: Dataset,
    out_path: str | Path,
    valid_every: int = 10,
    env_name: str = "R2S2R/PickSort-v0",
) -> Path:
    """Write ``dataset`` as robomimic HDF5; every ``valid_every``-th demo goes to ``valid``."""
    out = Path(out_path)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.stem + ".partial" + out.suffix)
    names: list[str] = []
    # Where each proprio part lies in the state vector.
    proprio = dataset.contract.state_layout()
    with h5py.File(tmp, "w") as f:
        data = f.create_group("data")
        data.attrs["total"] = len(dataset)
        data.attrs["env_args"] = json.dumps(
            {
                "env_name": env_name,
                "type": "r2s2r",
                "env_kwargs": {"fps": dataset.fps, "robot_type": dataset.info["robot_type"]},
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
        valid = names[valid_every - 1 :: valid_every] if valid_every > 0 else []
        train = [n for n in names if n not in valid]
        mask = f.create_group("mask")
        mask.create_dataset("train", data=np.array(train, dtype="S"))
        mask.create_dataset("valid", data=np.array(valid, dtype="S"))
    tmp.replace(out)
    return out
