"""Recorded states turned into camera frames: physics first, pixels later.

A kept attempt or a recorded episode is replayed state by state: each recorded state is set in
the physics, not simulated, so the frames show exactly the recorded episode. ``StateRenderer``
is the one way from recorded states to pixels: generation renders its kept attempts through it
(``r2s2r.behavior.execute``), and the dataset re-render (``r2s2r.app.render``) takes its MuJoCo
pinhole views from it.
"""

from __future__ import annotations

import mujoco
import numpy as np

from r2s2r.sim.physics import Physics
from r2s2r.sim.render import CameraPlan, SceneRenderer
from r2s2r.spec import WorldSpec


class StateRenderer:
    """The cameras of world 0 of ``physics``, rendered from recorded states by MuJoCo's
    rasterizer as ``world`` describes them (``SceneRenderer``: its lighting and colours are
    the model's as they are when a frame is rendered)."""

    def __init__(self, physics: Physics, world: WorldSpec) -> None:
        self.physics = physics
        self.renderer = SceneRenderer(physics, world)

    @property
    def plans(self) -> list[CameraPlan]:
        """How each camera is rendered (``plan_cameras``), in the cell's camera order."""
        return self.renderer.plans

    def views(self, qpos: np.ndarray, qvel: np.ndarray | None = None) -> dict[str, np.ndarray]:
        """The views {camera: (H, W, 3) uint8} of the state ``qpos`` (nq,), ``qvel`` (nv,) as
        the cameras deliver them: blurred over a shutter time along ``qvel`` (None: at rest),
        remapped where a camera is a fisheye or distorted, scaled by its exposure."""
        self._pose(qpos, qvel)
        return {name: img[0] for name, img in self.renderer.render().items()}

    def pinhole(self, qpos: np.ndarray) -> dict[str, np.ndarray]:
        """MuJoCo's render {camera: (h, w, 3) uint8} of each camera at the state ``qpos``
        (nq,), before any blur, remap or exposure: the ideal pinhole (or wide) view of its
        ``CameraPlan``, for a caller that finishes it as the camera would."""
        data = self._pose(qpos, None)
        return {plan.name: self.renderer.render_raw(data, plan) for plan in self.plans}

    def episode(self, qpos: np.ndarray, qvel: np.ndarray) -> dict[str, np.ndarray]:
        """The views {camera: (T, H, W, 3) uint8} of an episode's recorded states, ``qpos``
        (T, nq) and ``qvel`` (T, nv), one frame per state (``views``)."""
        frames: dict[str, list[np.ndarray]] = {plan.name: [] for plan in self.plans}
        for q, v in zip(qpos, qvel, strict=True):
            for name, img in self.views(q, v).items():
                frames[name].append(img)
        return {name: np.stack(imgs) for name, imgs in frames.items()}

    def _pose(self, qpos: np.ndarray, qvel: np.ndarray | None) -> mujoco.MjData:
        """Set world 0 to the state (kinematics, cameras and lights computed) and return it."""
        velocity = np.zeros(self.physics.model.nv) if qvel is None else qvel
        self.physics.set_state(0, qpos, velocity)
        return self.physics.mjdata(0)

    def close(self) -> None:
        self.renderer.close()
