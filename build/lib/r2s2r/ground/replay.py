"""The check a grounded world has to pass: the same command sequence replayed on the rig, in
the nominal sim and in the grounded sim, compared by TCP trajectory and by head-camera image.

``capture_replay`` starts an episode (arms at home, belt stopped), drives both arms through a
short excitation (hands open) through the safety supervisor, and stores the commands, the
measured TCP poses and a head frame every second::

    DIR/replay/replay.json        hz, commanded targets and measured TCP poses per arm
    DIR/replay/frame_KK.png       head frames, at the periods listed in replay.json

``compare_replay`` runs the same commands from the same start in a simulated cell of a world
and reports its TCP RMS and image difference against the rig.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import cv2
import numpy as np

from r2s2r.ground.sysid import SysIdError, arm_excitation
from r2s2r.ground.sysid_arm import tcp_rms
from r2s2r.rig.interfaces import Rig
from r2s2r.rig.safety import SafetySupervisor
from r2s2r.sim.cell import Cell
from r2s2r.spec import TaskSpec, WorldSpec
from r2s2r.spec.world import ARM_SIDES

REPLAY_S = 8.0
FRAME_EVERY_S = 1.0


def capture_replay(
    rig: Rig, supervisor: SafetySupervisor, out: Path, seconds: float = REPLAY_S, seed: int = 7
) -> Path:
    """Replay an excitation of both arms on ``rig`` and store it with head frames."""
    folder = Path(out) / "replay"
    folder.mkdir(parents=True, exist_ok=True)
    rig.presenter.present()
    rig.conveyor.set_speed(0.0)
    hz = 50.0
    start = {s: np.asarray(supervisor.arm(s).state().tcp_pose, dtype=float) for s in ARM_SIDES}
    targets = np.stack(
        [
            arm_excitation(start[s], seconds, seed=seed + i, hz=hz, limits=supervisor.limits)
            for i, s in enumerate(ARM_SIDES)
        ],
        axis=1,
    )
    every = int(round(FRAME_EVERY_S * hz))
    open_hand = np.zeros(supervisor.embodiment.hand_dof)
    measured: list[list[np.ndarray]] = []
    frames: list[int] = []
    for k, target in enumerate(targets):
        for i, side in enumerate(ARM_SIDES):
            supervisor.arm(side).send_tcp_target(target[i])
            supervisor.hand(side).send_joint_targets(open_hand)
        supervisor.tick()
        rig.step()
        measured.append([np.asarray(supervisor.arm(s).state().tcp_pose) for s in ARM_SIDES])
        if (k + 1) % every == 0:
            image = rig.cameras["head"].read().image
            cv2.imwrite(str(folder / f"frame_{len(frames):02d}.png"), image[:, :, ::-1])
            frames.append(k)
    data = {
        "hz": hz,
        "frame_periods": frames,
        "targets": np.asarray(targets).tolist(),
        "measured": np.asarray(measured).tolist(),
    }
    (folder / "replay.json").write_text(json.dumps(data))
    return folder


@dataclass(frozen=True)
class Replay:
    """A replay captured on a rig: commands and measured TCP poses (T, 2, 7), head frames."""

    hz: float
    targets: np.ndarray
    measured: np.ndarray
    frame_periods: list[int]
    frames: list[np.ndarray]

    @classmethod
    def load(cls, capture: Path) -> Replay:
        folder = Path(capture) / "replay"
        path = folder / "replay.json"
        try:
            data = json.loads(path.read_text())
            targets = np.asarray(data["targets"], dtype=float)
            measured = np.asarray(data["measured"], dtype=float)
            periods = [int(k) for k in data["frame_periods"]]
        except FileNotFoundError:
            raise SysIdError(f"{path}: missing; run 'r2s2r ground capture'") from None
        except (json.JSONDecodeError, KeyError, TypeError, ValueError) as err:
            raise SysIdError(
                f"{path}: not a replay record ({err}); capture the replay again"
            ) from None
        if targets.ndim != 3 or targets.shape[1:] != (2, 7) or measured.shape != targets.shape:
            raise SysIdError(
                f"{path}: targets and measured poses must both be (T, 2, 7), got "
                f"{targets.shape} and {measured.shape}"
            )
        frames = []
        for i in range(len(periods)):
            image = cv2.imread(str(folder / f"frame_{i:02d}.png"), cv2.IMREAD_COLOR)
            if image is None:
                raise SysIdError(f"{folder / f'frame_{i:02d}.png'}: missing or unreadable")
            frames.append(image[:, :, ::-1].copy())
        return cls(float(data["hz"]), targets, measured, periods, frames)


def replay_in_sim(
    task: TaskSpec, world: WorldSpec, replay: Replay
) -> tuple[np.ndarray, list[np.ndarray]]:
    """The replay's commands run in ``world``'s simulated cell from an episode start: TCP
    poses (T, 2, 7) and head views (the camera's own resolution) at the frame periods."""
    from r2s2r.geometry.rotations import mat_to_quat
    from r2s2r.sim.physics import make_physics
    from r2s2r.sim.render import SceneRenderer
    from r2s2r.sim.scene import build_scene

    scene = build_scene(task, world, action_mode="tcp")
    physics = make_physics("mujoco", scene.model)
    cell = Cell(scene, physics)
    cell.reset(np.array([0]), [np.random.default_rng(0)])
    cell.set_belt_speed(np.array([0]), 0.0)
    # The head view before exposure (which the comparison normalises away), so MuJoCo's own
    # renderer: its raw render and remap.
    renderer = SceneRenderer(physics, world, native=True)
    plan = next(p for p in renderer.plans if p.name == "head")
    wanted = set(replay.frame_periods)
    tcp, views = [], []
    emb = scene.embodiment
    action = np.zeros((emb.num_arms, emb.action_per_arm("tcp")))
    for k, target in enumerate(replay.targets):
        action[:, :7] = target
        cell.step(action.reshape(1, -1))
        pos, mat = physics.site_poses(cell.idx.tcp_sites)
        tcp.append(np.concatenate([pos[0], mat_to_quat(mat[0])], axis=-1))
        if k in wanted:
            image = renderer.render_raw(physics.mjdata(0), plan)
            views.append(plan.remap(image) if plan.remap is not None else image)
    renderer.close()
    return np.asarray(tcp), views


def image_difference(a: np.ndarray, b: np.ndarray) -> float:
    """Mean absolute difference of two views after each is normalised to zero mean and unit
    contrast and lightly blurred, so that exposure, white balance and sensor noise count less
    than where things are (in grey levels of a 64-level contrast)."""

    def norm(img: np.ndarray) -> np.ndarray:
        grey = cv2.GaussianBlur(
            cv2.cvtColor(img, cv2.COLOR_RGB2GRAY).astype(np.float32), (0, 0), 2.0
        )
        return np.asarray((grey - grey.mean()) / max(float(grey.std()), 1e-6))

    return float(np.mean(np.abs(norm(a) - norm(b))) * 64.0)


def compare_replay(task: TaskSpec, worlds: dict[str, WorldSpec], replay: Replay) -> dict[str, Any]:
    """Each world's sim against the rig on the replay: TCP RMS (mm, deg), mean image
    difference of the head views, and the first frame of each for the report."""
    out: dict[str, Any] = {"views": {"rig": replay.frames[0] if replay.frames else None}}
    for name, world in worlds.items():
        tcp, views = replay_in_sim(task, world, replay)
        mm, deg = tcp_rms([tcp], [replay.measured])
        diffs = [image_difference(v, f) for v, f in zip(views, replay.frames, strict=True)]
        out[f"{name}_replay_tcp_mm"] = mm
        out[f"{name}_replay_tcp_deg"] = deg
        out[f"{name}_image_diff"] = float(np.mean(diffs)) if diffs else float("nan")
        out["views"][name] = views[0] if views else None
    return out
