"""Camera effects of the WorldSpec: exposure and motion blur."""

from __future__ import annotations

import numpy as np

from r2s2r.sim.env import PickSortEnv
from r2s2r.spec import WorldSpec


def _with_head(world: WorldSpec, **changes: float) -> WorldSpec:
    cams = dict(world.cameras)
    cams["head"] = cams["head"].model_copy(update=changes)
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
    data = blur_env.physics.mjdata(0)
    data.qvel[:] = 0.0
    still = blur_env.renderer().render(data)["head"]
    data_sharp = sharp_env.physics.mjdata(0)
    data_sharp.qvel[:] = 0.0
    np.testing.assert_array_equal(still, sharp_env.renderer().render(data_sharp)["head"])
