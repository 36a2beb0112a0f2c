"""Parity of the Isaac Lab env with the core's MuJoCo cell: one command sequence, two sims.

The core's ``PickSortEnv`` (MuJoCo C on the CPU) runs the scripted picker closed loop; its
actions are then replayed open loop in the Isaac Lab env (Newton's MuJoCo Warp solver), from
the same spawn (object, belt speed, lateral offset, yaw). Compared per control step: both
TCP poses (position error in mm, orientation error in degrees) and, at the end, the object's
status and position.

    python -m r2s2r_isaaclab.parity --seed 0 --json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from r2s2r.geometry.rotations import quat_conj, quat_mul
from r2s2r.sim.env import PickSortEnv
from r2s2r.sim.scripted import ScriptedPicker

# Control steps the replay holds the last recorded action for, waiting for the judgement.
HOLD_STEPS = 100


@dataclass(frozen=True)
class Reference:
    """The core cell's episode: actions (T, A), TCP poses after each step (T, S, 7), and how
    it ended."""

    actions: np.ndarray
    tcp: np.ndarray
    objects: list[str]
    spawn: tuple[float, np.ndarray, np.ndarray]
    status: list[str]
    object_pos: np.ndarray  # (S, 3) at the end
    success: bool
    object_traj: np.ndarray  # (T, 3) the presented object after each step


def core_reference(seed: int, world: str = "nominal", max_steps: int | None = None) -> Reference:
    """The scripted picker's episode ``seed`` in the core's MuJoCo cell."""
    env = PickSortEnv(world=world, images=False)
    obs, info = env.reset(seed=seed)
    picker = ScriptedPicker(env)
    picker.reset(obs, info)
    cell = env.cell
    spawn = (float(cell.belt_speed[0]), cell.spawn_xy[0, :, 1].copy(), cell.spawn_yaw[0].copy())
    actions, tcp, traj = [], [], []
    limit = max_steps or cell.max_steps
    for _ in range(limit):
        action = picker.act(obs, info)
        obs, _, terminated, truncated, info = env.step(action)
        actions.append(action)
        tcp.append(obs["tcp_pose"].copy())
        traj.append(np.asarray(info["object_pos"])[0].copy())
        if terminated or truncated:
            break
    return Reference(
        np.array(actions),
        np.array(tcp),
        list(info["object_names"]),
        spawn,
        list(info["object_status"]),
        np.asarray(info["object_pos"]).copy(),
        bool(info["success"]),
        np.array(traj),
    )


def save_reference(ref: Reference, path: str | Path) -> Path:
    """Write ``ref`` to an .npz file."""
    path = Path(path)
    np.savez(
        path,
        actions=ref.actions,
        tcp=ref.tcp,
        objects=np.array(ref.objects),
        speed=ref.spawn[0],
        lateral=ref.spawn[1],
        yaw=ref.spawn[2],
        status=np.array(ref.status),
        object_pos=ref.object_pos,
        success=ref.success,
        object_traj=ref.object_traj,
    )
    return path


def load_reference(path: str | Path) -> Reference:
    with np.load(path) as f:
        return Reference(
            f["actions"],
            f["tcp"],
            [str(o) for o in f["objects"]],
            (float(f["speed"]), f["lateral"], f["yaw"]),
            [str(s) for s in f["status"]],
            f["object_pos"],
            bool(f["success"]),
            f["object_traj"],
        )


def reference_in(python: str | Path, seed: int, world: str) -> Reference:
    """The core cell's episode computed by another interpreter (the core's own venv, with
    its MuJoCo), through ``--reference-out``."""
    package = Path(__file__).resolve().parents[1]
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "reference.npz"
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(package), str(package.parent)])}
        cmd = [str(python), "-m", "r2s2r_isaaclab.parity", "--seed", str(seed), "--world", world]
        done = subprocess.run(
            [*cmd, "--reference-out", str(out)], env=env, capture_output=True, text=True
        )
        if done.returncode != 0:
            raise RuntimeError(
                f"{python}: the core cell's reference failed:\n{done.stderr[-2000:]}"
            )
        return load_reference(out)


@dataclass(frozen=True)
class Parity:
    """How far the Isaac Lab env's replay is from the core cell's episode."""

    # Control steps of the core's episode and of the replay (each ends when its object is
    # judged; the TCP errors are over the steps both ran).
    steps: int
    isaac_steps: int
    tcp_pos_max_mm: float
    tcp_pos_rms_mm: float
    tcp_rot_max_deg: float
    # The presented object: its largest distance from the core's over the steps both ran,
    # over those before the hand lets go of it (the release), and at each episode's end.
    object_max_mm: float
    object_carry_max_mm: float
    object_end_err_mm: float
    core_status: list[str]
    isaac_status: list[str]
    core_success: bool
    isaac_success: bool
    replay_s: float


def replay(env: Any, ref: Reference, progress: bool = False) -> tuple[np.ndarray, dict[str, Any]]:
    """Replay ``ref``'s actions in world 0 of ``env`` (a ``PickSortIsaacEnv``, every world
    given the same actions) from its spawn until world 0's episode ends (holding the last
    action for at most ``HOLD_STEPS`` after them); returns the TCP
    poses (T', S, 7) and world 0's status, object position and success at its end."""
    from r2s2r.sim.cell import STATUS_NAMES

    env.reset(seed=0)
    n = env.num_envs
    worlds = np.arange(n)
    env.cell.reset(
        worlds,
        [np.random.default_rng(0) for _ in worlds],
        ref.objects,
        (ref.spawn[0], ref.spawn[1], ref.spawn[2]),
    )
    tcp, traj = [], []
    info: dict[str, Any] = {}
    # After the recorded actions the last one is held, for up to HOLD_STEPS, until the
    # object is judged (its last bounce in the bin may take longer or shorter than in the
    # core's cell).
    held = np.repeat(ref.actions[-1:], HOLD_STEPS, axis=0)
    commands = np.concatenate([ref.actions, held])
    for action in tqdm(commands, desc="replay", disable=not progress):
        obs, _, terminated, truncated, info = env.step(np.tile(action, (n, 1)))
        tcp.append(obs["tcp_pose"][0].copy())
        traj.append(info["object_pos"][0, 0].copy())
        # World 0's episode is over (its next step would start a new one).
        if terminated[0] or truncated[0]:
            break
    last = {
        "status": [STATUS_NAMES[s] for s in info["status"][0]],
        "object_pos": info["object_pos"][0].copy(),
        "success": bool(env.cell.success[0]),
        "object_traj": np.array(traj),
    }
    return np.array(tcp), last


def compare(ref: Reference, tcp: np.ndarray, last: dict[str, Any], replay_s: float) -> Parity:
    """The errors between the core's episode and the replay."""
    isaac_steps = len(tcp)
    n = min(isaac_steps, len(ref.tcp))
    tcp, ref_tcp = tcp[:n], ref.tcp[:n]
    pos_err = np.linalg.norm(tcp[..., :3] - ref_tcp[..., :3], axis=-1) * 1e3
    dq = quat_mul(quat_conj(ref_tcp[..., 3:]), tcp[..., 3:])
    rot_err = np.degrees(2 * np.arccos(np.clip(np.abs(dq[..., 0]), 0.0, 1.0)))
    obj_err = np.linalg.norm(last["object_traj"][:n] - ref.object_traj[:n], axis=-1) * 1e3
    # The release: the first step at which the recorded hand command opens (its joint
    # targets' sum drops below half its largest value) after having closed.
    hands = np.abs(ref.actions.reshape(len(ref.actions), tcp.shape[1], -1)[..., 7:]).sum(-1)
    grip = hands.max(axis=1)
    closed = np.flatnonzero(grip > 0.5 * grip.max())
    after = closed[0] + np.flatnonzero(grip[closed[0] :] < 0.5 * grip.max()) if len(closed) else []
    release = int(after[0]) if len(after) else n
    return Parity(
        steps=len(ref.actions),
        isaac_steps=isaac_steps,
        tcp_pos_max_mm=float(pos_err.max()),
        tcp_pos_rms_mm=float(np.sqrt((pos_err**2).mean())),
        tcp_rot_max_deg=float(rot_err.max()),
        object_max_mm=float(obj_err.max()),
        object_carry_max_mm=float(obj_err[: min(release, n)].max()),
        object_end_err_mm=float(np.linalg.norm(last["object_pos"] - ref.object_pos, axis=-1).max())
        * 1e3,
        core_status=ref.status,
        isaac_status=last["status"],
        core_success=ref.success,
        isaac_success=last["success"],
        replay_s=replay_s,
    )


def run(
    seed: int,
    task_id: str,
    num_envs: int = 1,
    progress: bool = False,
    mujoco_cpu: bool = False,
    reference_python: str | Path | None = None,
) -> Parity:
    """The parity of ``task_id``'s env with the core cell on episode ``seed``; with
    ``mujoco_cpu`` Newton's solver runs MuJoCo C instead of MuJoCo Warp (one world); with
    ``reference_python`` the core cell runs in that interpreter (the core's venv) rather than
    in this one."""
    import gymnasium as gym

    import r2s2r_isaaclab

    cfg = r2s2r_isaaclab.make_env_cfg(task_id, device="cpu", num_envs=num_envs)
    cfg.sim.physics.solver_cfg.use_mujoco_cpu = mujoco_cpu
    if reference_python is None:
        ref = core_reference(seed, world=cfg.world)
    else:
        ref = reference_in(reference_python, seed, cfg.world)
    env = gym.make(task_id, cfg=cfg).unwrapped
    start = time.perf_counter()
    tcp, last = replay(env, ref, progress)
    return compare(ref, tcp, last, time.perf_counter() - start)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m r2s2r_isaaclab.parity", description=__doc__)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--task", default="Isaac-R2S2R-PickSort-Ungrounded-v0")
    parser.add_argument("--num-envs", type=int, default=1)
    parser.add_argument(
        "--mujoco-cpu", action="store_true", help="Newton's solver on MuJoCo C, not MuJoCo Warp"
    )
    parser.add_argument(
        "--reference-python",
        help="run the core cell in this interpreter (e.g. the core venv's .venv/bin/python)",
    )
    parser.add_argument(
        "--reference-out", help="only run the core cell and write its episode here (.npz)"
    )
    parser.add_argument("--world", default="nominal", help="the world of --reference-out")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    args = parser.parse_args(argv)
    if args.reference_out:
        save_reference(core_reference(args.seed, world=args.world), args.reference_out)
        return 0
    result = run(
        args.seed, args.task, args.num_envs, not args.json, args.mujoco_cpu, args.reference_python
    )
    if args.json:
        print(json.dumps(asdict(result)))
    else:
        for key, value in asdict(result).items():
            print(f"{key:20s} {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
