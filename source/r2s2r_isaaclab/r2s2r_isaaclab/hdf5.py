"""Conversion between r2s2r datasets (LeRobot v3, ``r2s2r.data``) and Isaac Lab's HDF5
dataset format (``isaaclab.utils.datasets.HDF5DatasetFileHandler``), both ways.

An r2s2r episode becomes one ``data/demo_<i>`` written through Isaac Lab's own handler::

    actions               (T, A)         the contract's action
    obs/tcp_pose          (T, S, 7)      the proprio parts, per arm
    obs/arm_joints        (T, S, J)
    obs/hand_joints       (T, S, H)
    obs/object            (T, 7)         the presented object's pose, where recorded
    obs/<camera>_image    (T, H, W, 3)   uint8
    obs/datagen_info      Isaac Lab Mimic's annotations (``r2s2r_isaaclab.annotate``): eef_pose,
                          target_eef_pose, object_pose, subtask_term_signals; for TCP-action
                          episodes with the object's pose and name (``object_ids``) recorded
    timestamps            (T,)           seconds since the episode's start
    attrs: success, seed (where the episode has one)

``data.attrs["env_args"]`` (JSON) carries ``env_name`` and an ``r2s2r`` block: fps, the
embodiment, the action mode, the cameras, and each episode's task string and metadata, so
the way back restores the dataset exactly (images as exactly as the target's video codec
keeps them: lossless datasets round-trip bit for bit). An Isaac Lab file without that block
(one Isaac Lab Mimic generated, say) converts too: the nominal embodiment, TCP actions,
50 fps, and the ``env_name`` as every episode's task.

    python -m r2s2r_isaaclab.hdf5 to-isaaclab DATASET OUT.hdf5
    python -m r2s2r_isaaclab.hdf5 from-isaaclab IN.hdf5 DATASET
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import torch
from isaaclab.utils.datasets import EpisodeData, HDF5DatasetFileHandler
from tqdm import tqdm

from r2s2r.data.config import (
    ACTION_KEY,
    ENV_STATE_KEY,
    EPISODE_META_FIELDS,
    STATE_KEY,
    CameraCfg,
    DatasetCfg,
    DatasetError,
    VideoCfg,
)
from r2s2r.data.reader import Dataset
from r2s2r.data.writer import DatasetWriter
from r2s2r.sim.embodiment import Embodiment
from r2s2r_isaaclab.annotate import datagen_info
from r2s2r_isaaclab.names import variant_of, variant_specs

PROPRIO_OBS = ("tcp_pose", "arm_joints", "hand_joints")
OBJECT_OBS = "object"
IMAGE_SUFFIX = "_image"
DATAGEN_OBS = "datagen_info"


def to_isaaclab(
    dataset: Dataset | str | Path,
    out_path: str | Path,
    env_name: str = "Isaac-R2S2R-PickSort-Ungrounded-v0",
    progress: bool = False,
) -> Path:
    """Write ``dataset`` as an Isaac Lab HDF5 file at ``out_path`` (.hdf5)."""
    ds = dataset if isinstance(dataset, Dataset) else Dataset(dataset)
    out = Path(out_path)
    if out.suffix != ".hdf5":
        raise ValueError(f"{out}: Isaac Lab's dataset files end in .hdf5")
    tmp = out.with_name(out.stem + ".partial.hdf5")
    contract = ds.contract
    layout = contract.state_layout()
    arms = contract.embodiment.num_arms
    episodes = []
    # Mimic's annotations need TCP actions and the bins' poses in a registered env's world.
    variant = variant_of(env_name) if contract.action_mode == "tcp" else None
    specs = variant_specs(variant.world, variant.condition) if variant is not None else None
    handler = HDF5DatasetFileHandler()
    handler.create(str(tmp), env_name=env_name)
    try:
        for i in tqdm(range(ds.num_episodes), desc="to isaaclab", disable=not progress):
            row, arrays = ds.episode(i), ds.episode_arrays(i)
            episode = EpisodeData()
            state = arrays[STATE_KEY]
            n = len(state)
            obs: dict[str, Any] = {}
            for key in PROPRIO_OBS:
                obs[key] = torch.from_numpy(state[:, layout[key]].reshape(n, arms, -1).copy())
            if ENV_STATE_KEY in arrays:
                obs[OBJECT_OBS] = torch.from_numpy(arrays[ENV_STATE_KEY].copy())
                named = row.get("object_ids") or []
                if specs is not None and len(named) == 1:
                    info = datagen_info(
                        obs["tcp_pose"].numpy(),
                        arrays[ACTION_KEY],
                        arrays[ENV_STATE_KEY],
                        named[0],
                        *specs,
                        contract.embodiment.sides,
                    )
                    obs[DATAGEN_OBS] = {
                        k: {name: torch.from_numpy(v) for name, v in part.items()}
                        for k, part in info.items()
                    }
            for cam in ds.cameras:
                obs[cam.name + IMAGE_SUFFIX] = torch.from_numpy(ds.episode_images(i, cam.key))
            episode.data = {
                "actions": torch.from_numpy(arrays[ACTION_KEY].copy()),
                "obs": obs,
                "timestamps": torch.from_numpy(arrays["timestamp"].astype(np.float64)),
            }
            episode.success = bool(row["success"])
            if row.get("seed") is not None:
                episode.seed = int(row["seed"])
            handler.write_episode(episode)
            meta = {k: row[k] for k in EPISODE_META_FIELDS if row.get(k) is not None}
            episodes.append({"task": row["tasks"][0], "meta": meta})
        handler.add_env_args(
            {
                "r2s2r": {
                    "fps": ds.fps,
                    "embodiment": contract.embodiment.to_json(),
                    "action_mode": contract.action_mode,
                    "cameras": [c.model_dump() for c in ds.cameras],
                    "env_state": ds.cfg.env_state if ds.cfg else ENV_STATE_KEY in ds.vector_keys,
                    "episodes": episodes,
                }
            }
        )
        handler.flush()
    finally:
        handler.close()
    tmp.replace(out)
    return out


def _r2s2r_block(path: Path, env_args: dict[str, Any], first: dict[str, Any]) -> dict[str, Any]:
    """The ``r2s2r`` block of ``env_args``, or one inferred from the first episode."""
    block = env_args.get("r2s2r")
    if block is not None:
        return block
    obs = first.get("obs", {})
    cams = [
        {"name": k.removesuffix(IMAGE_SUFFIX), "height": v.shape[1], "width": v.shape[2]}
        for k, v in obs.items()
        if k.endswith(IMAGE_SUFFIX)
    ]
    return {
        "fps": 50,
        "embodiment": None,
        "action_mode": "tcp",
        "cameras": cams,
        "env_state": OBJECT_OBS in obs,
        "episodes": None,
    }


def from_isaaclab(
    in_path: str | Path,
    out_root: str | Path,
    video: VideoCfg | None = None,
    progress: bool = False,
) -> Dataset:
    """Write the Isaac Lab HDF5 file ``in_path`` as an r2s2r dataset at ``out_root``."""
    path = Path(in_path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such Isaac Lab dataset file")
    handler = HDF5DatasetFileHandler()
    handler.open(str(path))
    try:
        names = sorted(handler.get_episode_names(), key=_demo_index)
        if not names:
            raise DatasetError(f"{path}: data holds no demos")
        env_name = handler.get_env_name() or ""
        env_args = _env_args(path)
        first = handler.load_episode(names[0], "cpu")
        block = _r2s2r_block(path, env_args, first.data)
        cfg_kwargs: dict[str, Any] = {
            "fps": int(block["fps"]),
            "cameras": tuple(CameraCfg(**c) for c in block["cameras"]),
            "action_mode": block["action_mode"],
            "env_state": bool(block["env_state"]),
        }
        if block["embodiment"] is not None:
            cfg_kwargs["embodiment"] = Embodiment.from_json(block["embodiment"])
        if video is not None:
            cfg_kwargs["video"] = video
        cfg = DatasetCfg(**cfg_kwargs)
        episodes = block["episodes"]
        if episodes is not None and len(episodes) != len(names):
            raise DatasetError(
                f"{path}: env_args lists {len(episodes)} r2s2r episodes, data holds {len(names)}"
            )
        with DatasetWriter(out_root, cfg) as writer:
            for k, name in enumerate(tqdm(names, desc="from isaaclab", disable=not progress)):
                ep = first if k == 0 else handler.load_episode(name, "cpu")
                _write_episode(writer, path, name, ep, cfg)
                task = episodes[k]["task"] if episodes else env_name
                meta = dict(episodes[k]["meta"]) if episodes else {}
                if ep.seed is not None and "seed" not in meta:
                    meta["seed"] = int(ep.seed)
                success = bool(ep.success) if ep.success is not None else True
                writer.save_episode(task, success, meta)
    finally:
        handler.close()
    return Dataset(out_root)


def _env_args(path: Path) -> dict[str, Any]:
    """``data.attrs["env_args"]`` (the handler reads only its env_name)."""
    with h5py.File(path, "r") as f:
        raw = f["data"].attrs.get("env_args")
    try:
        return json.loads(raw) if raw is not None else {}
    except json.JSONDecodeError as err:
        raise DatasetError(f"{path}: data.attrs['env_args'] is not JSON ({err})") from err


def _demo_index(name: str) -> int:
    try:
        return int(name.removeprefix("demo_"))
    except ValueError:
        return sys.maxsize


def _write_episode(
    writer: DatasetWriter, path: Path, name: str, ep: EpisodeData, cfg: DatasetCfg
) -> None:
    data = ep.data
    where = f"{path}: data/{name}"
    for key in ("actions", "obs"):
        if key not in data:
            raise DatasetError(f"{where}: no {key!r}")
    obs = data["obs"]
    missing = [k for k in PROPRIO_OBS if k not in obs]
    if missing:
        raise DatasetError(f"{where}/obs: missing {missing} (the r2s2r proprio parts)")
    actions = data["actions"].numpy()
    n = len(actions)
    state = np.concatenate([obs[k].numpy().reshape(n, -1) for k in PROPRIO_OBS], axis=1)
    times = data["timestamps"].numpy() if "timestamps" in data else np.arange(n) / cfg.fps
    images = {}
    for cam in cfg.cameras:
        key = cam.name + IMAGE_SUFFIX
        if key not in obs:
            raise DatasetError(f"{where}/obs: no {key!r} for camera {cam.name}")
        images[cam.name] = obs[key].numpy()
    env = obs[OBJECT_OBS].numpy() if cfg.env_state else None
    for t in range(n):
        writer.add_frame(
            {c: v[t] for c, v in images.items()},
            state[t],
            actions[t],
            float(times[t]),
            None if env is None else env[t],
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m r2s2r_isaaclab.hdf5", description=__doc__)
    sub = parser.add_subparsers(dest="cmd", required=True)
    to = sub.add_parser("to-isaaclab", help="an r2s2r dataset -> an Isaac Lab HDF5 file")
    to.add_argument("dataset")
    to.add_argument("out")
    to.add_argument("--env-name", default="Isaac-R2S2R-PickSort-Ungrounded-v0")
    back = sub.add_parser("from-isaaclab", help="an Isaac Lab HDF5 file -> an r2s2r dataset")
    back.add_argument("hdf5")
    back.add_argument("dataset")
    back.add_argument("--lossless", action="store_true", help="lossless video (exact RGB)")
    args = parser.parse_args(argv)
    if args.cmd == "to-isaaclab":
        print(to_isaaclab(args.dataset, args.out, args.env_name, progress=True))
    else:
        video = VideoCfg(lossless=True) if args.lossless else None
        ds = from_isaaclab(args.hdf5, args.dataset, video, progress=True)
        print(f"{ds.root}: {ds.num_episodes} episodes, {len(ds)} frames")
    return 0


if __name__ == "__main__":
    sys.exit(main())
