"""Lighting and colours: the world's lighting (a condition may have shifted it) and
appearance randomization."""

from __future__ import annotations

import mujoco
import numpy as np
from scipy.spatial.transform import Rotation

from r2s2r.sim.scene import OBJECT_PREFIX, Scene


class Appearance:
    """Per-world appearance parameters, drawn per episode and applied to a model to render."""

    def __init__(self, scene: Scene, randomize: bool, num_worlds: int = 1) -> None:
        model, world = scene.model, scene.world
        self.randomize = randomize
        self.ranges = world.appearance
        self.light_id = model.light("key").id
        self.obj_geoms = np.array(
            [model.geom(f"{OBJECT_PREFIX}{o.name}").id for o in scene.task.all_objects]
        )
        self.belt_mat = model.material("belt_mat").id
        light = world.lighting
        rgb = np.asarray(light.rgb, float)
        self.base_rgb = rgb
        self.base_intensity = light.intensity
        self.base_dir = np.asarray(light.direction, float) / np.linalg.norm(light.direction)
        self.base_obj_rgba = model.geom_rgba[self.obj_geoms].copy()
        self.base_belt_rgba = model.mat_rgba[self.belt_mat].copy()
        self.base_texrepeat = model.mat_texrepeat[self.belt_mat].copy()
        n = num_worlds
        self.light_diffuse = np.tile(rgb * light.intensity, (n, 1))
        self.light_dir = np.tile(self.base_dir, (n, 1))
        self.obj_rgba = np.tile(self.base_obj_rgba, (n, 1, 1))
        self.belt_rgba = np.tile(self.base_belt_rgba, (n, 1))
        self.texrepeat = np.tile(self.base_texrepeat, (n, 1))

    def draw(self, rng: np.random.Generator, world: int = 0) -> None:
        """New appearance for ``world`` (the nominal one unless randomization is on)."""
        if not self.randomize:
            return
        r = self.ranges
        self.light_diffuse[world] = self.base_rgb * rng.uniform(*r.light_intensity)
        tilt = Rotation.from_rotvec(rng.normal(size=3) * np.radians(r.light_direction_jitter_deg))
        self.light_dir[world] = tilt.apply(self.base_dir)
        jitter = rng.uniform(-1, 1, self.base_obj_rgba[:, :3].shape) * r.object_rgb_jitter
        self.obj_rgba[world, :, :3] = np.clip(self.base_obj_rgba[:, :3] + jitter, 0, 1)
        belt = rng.uniform(-1, 1, 3) * r.belt_rgb_jitter
        self.belt_rgba[world, :3] = np.clip(self.base_belt_rgba[:3] + belt, 0, 1)
        self.texrepeat[world] = self.base_texrepeat * rng.uniform(*r.texture_scale)

    def apply(self, model: mujoco.MjModel, world: int = 0) -> None:
        """Write ``world``'s appearance into ``model`` (before rendering it)."""
        model.light_diffuse[self.light_id] = self.light_diffuse[world]
        model.light_dir[self.light_id] = self.light_dir[world]
        model.geom_rgba[self.obj_geoms] = self.obj_rgba[world]
        model.mat_rgba[self.belt_mat] = self.belt_rgba[world]
        model.mat_texrepeat[self.belt_mat] = self.texrepeat[world]
