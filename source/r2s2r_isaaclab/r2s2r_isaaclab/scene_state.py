"""The Mimic env's ``env.scene``: the core's ``Scene`` of the cell, with Isaac Lab's scene-state
API (``get_state`` / ``reset_to``) over the cell's worlds.

Isaac Lab Mimic's generator reads ``env.scene.get_state(is_relative=True)`` after each reset,
and Isaac Lab's recorders store it (``initial_state``, ``states``), in the layout of
``isaaclab.scene.InteractiveScene.get_state``; each tensor is ``(num_envs, ...)``::

    articulation/robot     root_pose (7), root_velocity (6)   the robot's base: the cell frame
                           joint_position, joint_velocity     (S*J + S*H,) every arm's joints,
                                                              then every hand's (contract order)
    articulation/belt      root_pose, root_velocity           the belt's base (the world's layout)
                           joint_position, joint_velocity     (1,) its slide joint
    rigid_object/<name>    root_pose (7), root_velocity (6)   every object of the task (stored
                                                              ones included), its free joint
    cell/...               what the next steps depend on besides the bodies (below)

Poses are position + quaternion ``(x, y, z, qx, qy, qz, qw)``, Isaac Lab 3's order (its HDF5
format version 1); a ``root_velocity`` is the free joint's MuJoCo velocity (linear in the cell
frame, angular in the body's), so that nothing is rounded on the way back. ``cell`` holds the
actuator command ``ctrl``, the solver's ``warmstart``, the Cartesian motion generator's
``tcp_command`` / ``tcp_command_velocity``, and the episode: ``objects`` (an index into the
task's objects per spawn slot), ``spawn_xy``, ``spawn_yaw``, ``belt_speed``, ``spawned``,
``status``, ``steps`` and ``unstable``. With all of it ``reset_to`` puts a world back exactly:
the steps after it are those that followed the capture. The cell on Newton has no mocap
bodies (``NewtonPhysics`` refuses them) and no actuator activations, so neither appears.
Each world is its own cell (MuJoCo Warp's separate worlds), so every env origin is the cell
frame and ``is_relative`` changes nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Any

import numpy as np
import torch
from scipy.spatial.transform import Rotation

from r2s2r.sim.cell import Cell
from r2s2r.sim.scene import Scene

ROBOT, BELT = "robot", "belt"
# The episode's entries of the cell block (each a Cell attribute of that name) and their dtypes.
_EPISODE = {
    "belt_speed": torch.float64,
    "spawn_xy": torch.float64,
    "spawn_yaw": torch.float64,
    "spawned": torch.bool,
    "status": torch.int64,
    "steps": torch.int64,
    "unstable": torch.bool,
}
_XYZW = np.array([1, 2, 3, 0])  # wxyz -> xyzw
_WXYZ = np.array([3, 0, 1, 2])  # xyzw -> wxyz


@dataclass(frozen=True)
class _Layout:
    """qpos / qvel addresses of each entity of the state."""

    robot_q: np.ndarray  # (S*J + S*H,)
    robot_v: np.ndarray
    belt_q: np.ndarray  # (1,)
    belt_v: np.ndarray
    belt_pose: np.ndarray  # (7,) xyzw
    objects: tuple[str, ...]
    obj_q: np.ndarray  # (K,) the free joints' first qpos address
    obj_v: np.ndarray  # (K,)

    @classmethod
    def of(cls, scene: Scene, cell: Cell) -> _Layout:
        model, emb = scene.model, scene.embodiment
        names = [n for s in emb.sides for n in emb.arm_joint_names(s)]
        names += [n for s in emb.sides for n in emb.hand_joint_names(s)]
        belt = scene.world.layout.belt
        quat = Rotation.from_euler("z", belt.yaw_deg, degrees=True).as_quat()  # xyzw
        layout = cls(
            robot_q=np.array([model.joint(n).qposadr[0] for n in names]),
            robot_v=np.array([model.joint(n).dofadr[0] for n in names]),
            belt_q=np.array([model.joint("belt").qposadr[0]]),
            belt_v=np.array([model.joint("belt").dofadr[0]]),
            belt_pose=np.concatenate([belt.pos, quat]),
            objects=tuple(o.name for o in cell.objects),
            obj_q=cell.idx.obj_qadr.copy(),
            obj_v=cell.idx.obj_vadr.copy(),
        )
        # Everything the physics integrates must be in the state, once.
        q = np.concatenate(
            [layout.robot_q, layout.belt_q, *(a + np.arange(7) for a in layout.obj_q)]
        )
        v = np.concatenate(
            [layout.robot_v, layout.belt_v, *(a + np.arange(6) for a in layout.obj_v)]
        )
        if not (np.array_equal(np.sort(q), np.arange(model.nq))
                and np.array_equal(np.sort(v), np.arange(model.nv))):  # fmt: skip
            raise RuntimeError(
                f"the scene state covers {len(q)} of {model.nq} qpos and {len(v)} of {model.nv} "
                "qvel entries (robot, belt, objects): the cell has joints it does not know"
            )
        return layout


@dataclass(frozen=True, eq=False)
class CellScene(Scene):
    """The core's ``Scene`` (same fields) plus Isaac Lab's ``get_state`` / ``reset_to`` over the
    worlds of ``cell``, as torch tensors on ``device``."""

    cell: Cell
    device: str
    layout: _Layout

    @classmethod
    def of(cls, scene: Scene, cell: Cell, device: str) -> CellScene:
        base = {f.name: getattr(scene, f.name) for f in fields(Scene)}
        return cls(**base, cell=cell, device=device, layout=_Layout.of(scene, cell))

    @property
    def num_envs(self) -> int:
        return self.cell.n

    @property
    def env_origins(self) -> torch.Tensor:
        """(N, 3): every world is its own cell, at the cell frame."""
        return torch.zeros(self.cell.n, 3, device=self.device)

    def _t(self, x: np.ndarray, dtype: torch.dtype = torch.float64) -> torch.Tensor:
        # A copy: the state must not follow the cell's arrays as they change.
        return torch.tensor(np.array(x), dtype=dtype, device=self.device)

    def get_state(self, is_relative: bool = False) -> dict[str, dict[str, Any]]:
        """Every world's state (see the module doc); ``is_relative`` changes nothing here."""
        cell, lay = self.cell, self.layout
        n = cell.n
        snap = cell.physics.snapshot(np.arange(n))  # type: ignore[attr-defined]
        qpos, qvel = snap["qpos"], snap["qvel"]
        base = np.tile([0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0], (n, 1))
        still = np.zeros((n, 6))
        objects = {}
        for name, a, v in zip(lay.objects, lay.obj_q, lay.obj_v, strict=True):
            pose = np.concatenate([qpos[:, a : a + 3], qpos[:, a + 3 : a + 7][:, _XYZW]], axis=1)
            objects[name] = {
                "root_pose": self._t(pose),
                "root_velocity": self._t(qvel[:, v : v + 6]),
            }
        episode = {k: self._t(getattr(cell, k), dtype) for k, dtype in _EPISODE.items()}
        return {
            "articulation": {
                ROBOT: {
                    "root_pose": self._t(base),
                    "root_velocity": self._t(still),
                    "joint_position": self._t(qpos[:, lay.robot_q]),
                    "joint_velocity": self._t(qvel[:, lay.robot_v]),
                },
                BELT: {
                    "root_pose": self._t(np.tile(lay.belt_pose, (n, 1))),
                    "root_velocity": self._t(still),
                    "joint_position": self._t(qpos[:, lay.belt_q]),
                    "joint_velocity": self._t(qvel[:, lay.belt_v]),
                },
            },
            "rigid_object": objects,
            "cell": {
                "ctrl": self._t(cell.ctrl),
                "warmstart": self._t(snap["warmstart"]),
                "tcp_command": self._t(cell.motion.pose),
                "tcp_command_velocity": self._t(cell.motion.vel),
                "objects": self._t(cell.chosen, torch.int64),
                **episode,
            },
        }

    def reset_to(
        self,
        state: dict[str, dict[str, Any]],
        env_ids: Sequence[int] | np.ndarray | torch.Tensor | None = None,
        is_relative: bool = False,
    ) -> None:
        """Put the worlds ``env_ids`` (default: all) into ``state``, whose tensors have one row
        per world in ``env_ids`` (``get_state``'s layout)."""
        cell, lay, model = self.cell, self.layout, self.model
        ids = env_indices(env_ids, cell.n)
        k = len(ids)
        get = _Reader(state, k)
        qpos, qvel = np.zeros((k, model.nq)), np.zeros((k, model.nv))
        robot = get("articulation", ROBOT)
        qpos[:, lay.robot_q] = get.array(robot, "joint_position", len(lay.robot_q))
        qvel[:, lay.robot_v] = get.array(robot, "joint_velocity", len(lay.robot_v))
        belt = get("articulation", BELT)
        qpos[:, lay.belt_q] = get.array(belt, "joint_position", 1)
        qvel[:, lay.belt_v] = get.array(belt, "joint_velocity", 1)
        for name, a, v in zip(lay.objects, lay.obj_q, lay.obj_v, strict=True):
            obj = get("rigid_object", name)
            pose = get.array(obj, "root_pose", 7)
            qpos[:, a : a + 3] = pose[:, :3]
            qpos[:, a + 3 : a + 7] = pose[:, 3:][:, _WXYZ]
            qvel[:, v : v + 6] = get.array(obj, "root_velocity", 6)
        block = get("cell")
        slots = cell.chosen.shape[1]
        chosen = get.array(block, "objects", slots).astype(int)
        if chosen.min() < 0 or chosen.max() >= len(lay.objects):
            raise ValueError(
                f"state['cell']['objects']: object indices must lie in [0, {len(lay.objects)}), "
                f"got {chosen.tolist()}"
            )
        episode = {key: get.array(block, key, getattr(cell, key).shape[1:]) for key in _EPISODE}
        ctrl = get.array(block, "ctrl", model.nu)
        command = get.array(block, "tcp_command", cell.motion.pose.shape[1:])
        command_vel = get.array(block, "tcp_command_velocity", cell.motion.vel.shape[1:])
        warm = get.array(block, "warmstart", model.nv)
        # All of it read and checked: now the worlds change.
        throwaway = np.random.default_rng(0)
        for i, w in enumerate(ids):
            # The cell's own reset sets up the episode's objects (their state indices, bins);
            # what it would draw is given, and everything it set is overwritten below.
            cell.reset(
                np.array([w]),
                [throwaway],
                [lay.objects[j] for j in chosen[i]],
                (float(episode["belt_speed"][i]), episode["spawn_xy"][i, :, 1],
                 episode["spawn_yaw"][i]),
            )  # fmt: skip
        for key, value in episode.items():
            getattr(cell, key)[ids] = value
        cell.ctrl[ids] = ctrl
        cell.motion.pose[ids] = command
        cell.motion.vel[ids] = command_vel
        cell.physics.restore(  # type: ignore[attr-defined]
            ids, {"qpos": qpos, "qvel": qvel, "ctrl": ctrl, "warmstart": warm}
        )


def env_indices(
    env_ids: Sequence[int] | np.ndarray | torch.Tensor | slice | None, n: int
) -> np.ndarray:
    """Env ids as an int array (None or a slice: those of ``range(n)``)."""
    if env_ids is None:
        return np.arange(n)
    if isinstance(env_ids, slice):
        return np.arange(n)[env_ids]
    raw = env_ids.detach().cpu().numpy() if isinstance(env_ids, torch.Tensor) else env_ids
    ids = np.asarray(raw, dtype=int).reshape(-1)
    if len(ids) and (ids.min() < 0 or ids.max() >= n):
        raise IndexError(f"env_ids {ids.tolist()}: there are {n} envs")
    return ids


class _Reader:
    """Reads a state's entries with an error that names the entry and what was expected."""

    def __init__(self, state: dict[str, Any], rows: int) -> None:
        self.state, self.rows = state, rows

    def __call__(self, *path: str) -> tuple[str, dict[str, Any]]:
        node: Any = self.state
        for i, key in enumerate(path):
            if not isinstance(node, dict) or key not in node:
                where = "".join(f"[{p!r}]" for p in path[: i + 1])
                raise KeyError(f"state{where}: missing (a state as CellScene.get_state gives it)")
            node = node[key]
        return "".join(f"[{p!r}]" for p in path), node

    def array(self, entry: tuple[str, dict[str, Any]], key: str, shape: Any) -> np.ndarray:
        where, node = entry
        if key not in node:
            raise KeyError(f"state{where}[{key!r}]: missing")
        value = node[key]
        if isinstance(value, torch.Tensor):
            value = value.detach().cpu().numpy()
        arr = np.asarray(value)
        want = (self.rows, *((shape,) if isinstance(shape, int) else tuple(shape)))
        if arr.shape != want:
            raise ValueError(
                f"state{where}[{key!r}]: expected shape {want} (one row per env reset), "
                f"got {arr.shape}"
            )
        return arr
