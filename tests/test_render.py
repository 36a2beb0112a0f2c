"""Camera effects of the WorldSpec (exposure, motion blur) and the renderer registry."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from r2s2r.sim.env import PickSortEnv
from r2s2r.sim.render import RENDERERS, Renderer, make_renderer
from r2s2r.spec import WorldSpec
from r2s2r.spec.registry import RegistryError
from r2s2r.spec.world import CAMERA_NAMES


def _with_head(world: WorldSpec, **changes: float) -> WorldSpec:
    cams = dict(world.cameras)
    cams["head"] = cams["head"].replace(**changes)
    return world.replace(cameras=cams)


def test_exposure_scales_brightness(world: WorldSpec) -> None:
    base = PickSortEnv(world=world).reset(seed=0)[0]["images"]["head"]
    bright = PickSortEnv(world=_with_head(world, exposure=1.5)).reset(seed=0)[0]
    img = bright["images"]["head"]
    assert img.mean() > 1.2 * base.mean()
    np.testing.assert_array_equal(bright["images"]["left_wrist"].shape, (256, 256, 3))


def test_motion_blur_smears_only_what_moves(world: WorldSpec) -> None:
    sharp_env = PickSortEnv(world=world, condition="fast_belt")
    blur_env = PickSortEnv(world=_with_head(world, motion_blur_s=0.2), condition="fast_belt")
    images = []
    for env in (sharp_env, blur_env):
        obs, _ = env.reset(seed=0)
        hold = np.concatenate([np.concatenate([p, np.zeros(20)]) for p in obs["tcp_pose"]])
        for _ in range(10):  # The belt comes up to speed.
            obs, *_ = env.step(hold)
        images.append(obs["images"]["head"].astype(int))
    sharp, blurred = images
    changed = np.abs(sharp - blurred).max(axis=-1) > 8
    # The belt (3 cm in 0.2 s) is smeared; the still cell is not.
    assert 20 < changed.sum() < 0.2 * changed.size
    # With nothing moving, blur changes nothing.
    for env in (sharp_env, blur_env):
        qpos, qvel = env.physics.state()
        env.physics.set_state(0, qpos[0].copy(), np.zeros_like(qvel[0]))
    still = blur_env.renderer().render()["head"]
    np.testing.assert_array_equal(still, sharp_env.renderer().render()["head"])


def test_renderers_are_named_and_share_one_interface(world: WorldSpec) -> None:
    env = PickSortEnv(world=world, images=False)
    env.reset(seed=0)
    assert RENDERERS.names() == ("mujoco", "mujoco_warp")
    renderer = make_renderer("mujoco", env.physics, world, depth=True)
    assert isinstance(renderer, Renderer)
    views = renderer.render()
    w, h = world.render.obs_size
    assert sorted(views) == sorted(CAMERA_NAMES)
    assert all(v.shape == (1, h, w, 3) and v.dtype == np.uint8 for v in views.values())
    assert renderer.render_depth().shape == (1, h, w)
    renderer.close()
    with pytest.raises(RegistryError, match="did you mean 'mujoco'"):
        make_renderer("mujoko", env.physics, world)
    # The batched ray tracer works on the device state of the mujoco_warp backend only.
    if importlib.util.find_spec("mujoco_warp") is not None:
        with pytest.raises(ValueError, match="physics 'mujoco_warp'"):
            make_renderer("mujoco_warp", env.physics, world)
