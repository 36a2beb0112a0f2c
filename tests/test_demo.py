"""The scripted demo: an arm picks an object off the moving belt; the video is readable."""

from __future__ import annotations

from pathlib import Path

import av
import numpy as np

from r2s2r.sim.demo import run_demo
from r2s2r.sim.env import PickSortEnv
from r2s2r.sim.scripted import ScriptedPicker


def test_scripted_picker_lifts_an_object_off_the_belt_into_its_bin() -> None:
    env = PickSortEnv(images=False)
    obs, info = env.reset(seed=0)
    picker = ScriptedPicker(env)
    picker.reset(obs, info)
    heights = []
    while True:
        obs, reward, terminated, truncated, info = env.step(picker.act(obs, info))
        heights.append(info["object_pos"][0, 2])
        if terminated or truncated:
            break
    # The object left the belt upwards (carried by the hand, not teleported) and was sorted.
    belt_top = env.world_spec.layout.belt.pos[2]
    assert max(heights) > belt_top + 0.15
    assert np.max(np.abs(np.diff(heights))) < 0.05
    assert info["success"] and reward == 1.0


def test_demo_writes_a_video_of_the_three_views(tmp_path: Path) -> None:
    result = run_demo(tmp_path, seconds=1.0, fps=10)
    video = Path(result["video"])
    assert video.is_file() and result["frames"] == 10
    with av.open(str(video)) as container:
        frames = [f.to_ndarray(format="rgb24") for f in container.decode(video=0)]
    assert len(frames) == 10
    assert frames[0].shape == (256, 3 * 256, 3)
    assert frames[-1].std() > 10
