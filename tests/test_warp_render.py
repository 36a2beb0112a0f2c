"""Tests for the batched MuJoCo Warp renderer (``WarpSceneRenderer``).

They run on Warp's CPU device when there is no GPU, at a small observation size. The first
run compiles Warp kernels; later runs load them from Warp's kernel cache.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator

import cv2
import numpy as np
import pytest

pytest.importorskip("mujoco_warp")

from r2s2r.sim.appearance import Appearance  # noqa: E402
from r2s2r.sim.cell import Cell  # noqa: E402
from r2s2r.sim.render import (  # noqa: E402
    RENDERERS,
    Renderer,
    SceneRenderer,
    make_renderer,
    plan_cameras,
)
from r2s2r.sim.scene import Scene, build_scene  # noqa: E402
from r2s2r.sim.vector_env import PickSortVectorEnv  # noqa: E402
from r2s2r.sim.warp_physics import WarpPhysics  # noqa: E402
from r2s2r.sim.warp_render import DeviceRemap, WarpSceneRenderer  # noqa: E402
from r2s2r.spec import TaskSpec, WorldSpec  # noqa: E402
from r2s2r.spec.world import CAMERA_NAMES  # noqa: E402
from r2s2r.spec.worlds import world_at  # noqa: E402

OBS_SIZE = (64, 64)
# The ray tracer and the rasterizer shade differently (lighting model, texture filtering,
# specular highlights, sites drawn only by MuJoCo), so whole images are compared by the mean
# absolute difference of their grey levels. Measured: 8.5 (head) and 5 (wrists); the same
# views shifted by one pixel differ by 17 (head) and 12 (wrists), by four pixels by 26 to 31.
GREY_MAD_TOL = 12.0
# Both renderers project through the same pinhole (and the same fisheye remap), so an
# object's image centroid agrees to a fraction of a pixel; the rest allows for the two
# renderers' different edge sampling and shading inside the changed-pixel mask.
CENTROID_TOL_PX = 2.0
# A pixel belongs to the object when placing it changes some channel by more than this.
CHANGE_LEVELS = 30
# The object must cover at least this many pixels of a view for its centroid to be compared.
MIN_OBJECT_PX = 8
# With its key light brighter than about 0.6 (plus the 0.3 ambient and 0.2 diffuse headlight)
# MuJoCo's rasterizer saturates while the ray tracer's brightness keeps growing: at the
# nominal 0.8 the ray tracer's head view is 10 % brighter, at 1.2 17 %, at 0.6 or less the
# two agree to 3 grey levels of mean absolute difference.
KEY_LIGHT_SATURATION = 0.6
# Object positions on the table in front of the head camera, one per world, and a hidden one.
OBJECT_POS = np.array([[-0.3, -0.45, 0.8], [0.3, -0.55, 0.8]])
HIDDEN_POS = np.array([0.0, 0.0, -2.0])


@pytest.fixture(scope="module")
def small_world(world: WorldSpec) -> WorldSpec:
    return world_at(OBS_SIZE, world)


@pytest.fixture(scope="module")
def scene(task: TaskSpec, small_world: WorldSpec) -> Scene:
    return build_scene(task, small_world)


@pytest.fixture(scope="module")
def cell(scene: Scene) -> Cell:
    cell = Cell(scene, WarpPhysics(scene.model, 2))
    cell.reset(np.arange(2), [np.random.default_rng(0) for _ in range(2)])
    return cell


@pytest.fixture(scope="module")
def warp_renderer(cell: Cell, small_world: WorldSpec) -> Iterator[WarpSceneRenderer]:
    assert isinstance(cell.physics, WarpPhysics)
    renderer = WarpSceneRenderer(
        cell.physics, plan_cameras(cell.scene.model, small_world), depth=True
    )
    yield renderer
    renderer.close()


@pytest.fixture(scope="module")
def cpu_renderer(cell: Cell, small_world: WorldSpec) -> Iterator[SceneRenderer]:
    # MuJoCo's rasterizer over the same Warp worlds, one world at a time.
    renderer = SceneRenderer(cell.physics, small_world, depth=True)
    yield renderer
    renderer.close()


def place_object(cell: Cell, positions: np.ndarray) -> None:
    """Put object 0 at ``positions[w]`` (upright, at rest) in each world ``w``."""
    pose = np.zeros((cell.n, 7))
    pose[:, :3] = positions
    pose[:, 3] = 1.0
    adr = cell.idx.obj_qadr[0] + np.arange(7)
    vadr = cell.idx.obj_vadr[0] + np.arange(6)
    assert isinstance(cell.physics, WarpPhysics)
    cell.physics.write_qpos(np.arange(cell.n), adr, pose, vadr, np.zeros((cell.n, 6)))


def cpu_views(cpu: SceneRenderer) -> dict[str, np.ndarray]:
    """CPU renders {camera: (N, H, W, 3)} of every world."""
    views = cpu.render()
    assert sorted(views) == sorted(CAMERA_NAMES)
    return views


def grey(img: np.ndarray) -> np.ndarray:
    return cv2.cvtColor(img, cv2.COLOR_RGB2GRAY).astype(np.float64)


def centroid(with_obj: np.ndarray, without: np.ndarray) -> np.ndarray | None:
    """Centroid (x, y) of the pixels that placing the object changed; None if too few."""
    diff = np.abs(with_obj.astype(int) - without.astype(int)).max(axis=-1) > CHANGE_LEVELS
    if diff.sum() < MIN_OBJECT_PX:
        return None
    ys, xs = np.nonzero(diff)
    return np.array([xs.mean(), ys.mean()])


def test_batched_render_matches_cpu(
    cell: Cell, warp_renderer: WarpSceneRenderer, cpu_renderer: SceneRenderer
) -> None:
    place_object(cell, np.stack([HIDDEN_POS, HIDDEN_POS]))
    warp_empty, cpu_empty = warp_renderer.render(), cpu_views(cpu_renderer)
    place_object(cell, OBJECT_POS)
    warp_obj, cpu_obj = warp_renderer.render(), cpu_views(cpu_renderer)
    compared = 0
    for cam in CAMERA_NAMES:
        assert warp_obj[cam].shape == (2, *OBS_SIZE[::-1], 3)
        assert warp_obj[cam].dtype == np.uint8
        for w in range(2):
            mad = np.abs(grey(warp_obj[cam][w]) - grey(cpu_obj[cam][w])).mean()
            print(f"{cam} world {w}: grey MAD {mad:.2f}")
            assert mad < GREY_MAD_TOL, (cam, w, mad)
            c_warp = centroid(warp_obj[cam][w], warp_empty[cam][w])
            c_cpu = centroid(cpu_obj[cam][w], cpu_empty[cam][w])
            assert (c_warp is None) == (c_cpu is None), (cam, w, c_warp, c_cpu)
            if c_warp is not None and c_cpu is not None:
                err = float(np.linalg.norm(c_warp - c_cpu))
                print(f"{cam} world {w}: object centroid {c_warp} vs {c_cpu} ({err:.2f} px)")
                assert err < CENTROID_TOL_PX, (cam, w, c_warp, c_cpu)
                compared += 1
    # The object is in both worlds' head views, at clearly different places.
    head = [centroid(warp_obj["head"][w], warp_empty["head"][w]) for w in range(2)]
    assert head[0] is not None and head[1] is not None
    assert np.linalg.norm(head[0] - head[1]) > 5 * CENTROID_TOL_PX
    assert not np.array_equal(warp_obj["head"][0], warp_obj["head"][1])
    assert compared >= 2


def test_depth_matches_cpu(
    cell: Cell, warp_renderer: WarpSceneRenderer, cpu_renderer: SceneRenderer
) -> None:
    place_object(cell, OBJECT_POS)
    depth = warp_renderer.render_depth()
    assert depth.shape == (2, *OBS_SIZE[::-1]) and depth.dtype == np.float32
    refs = cpu_renderer.render_depth()
    for w in range(2):
        ref = refs[w]
        hit = depth[w] > 0
        assert hit.mean() > 0.9
        # Depth buffers agree to float precision except at a few silhouette pixels.
        assert np.median(np.abs(depth[w][hit] - ref[hit])) < 1e-3


def test_per_world_appearance(
    cell: Cell, warp_renderer: WarpSceneRenderer, cpu_renderer: SceneRenderer
) -> None:
    place_object(cell, OBJECT_POS)
    model = cell.scene.model
    drawn = Appearance(cell.scene, randomize=True, num_worlds=2)
    nominal = Appearance(cell.scene, randomize=False, num_worlds=2)
    for w, seed in enumerate((3, 4)):
        drawn.draw(np.random.default_rng(seed), w)
    # Beyond a summed light of about 1 MuJoCo's rasterizer saturates and the ray tracer does
    # not (see KEY_LIGHT_SATURATION); dimmer key lights keep the comparison about appearance.
    drawn.light_diffuse[:] = drawn.base_rgb * np.array([[0.35], [KEY_LIGHT_SATURATION]])
    # The same appearances given to the other world, for the CPU renders to compare against.
    swapped = copy.deepcopy(drawn)
    for field in ("light_diffuse", "light_dir", "obj_rgba", "belt_rgba", "texrepeat"):
        setattr(swapped, field, getattr(drawn, field)[::-1].copy())
    try:
        warp_renderer.set_appearance(drawn)
        views = warp_renderer.render()
        # Each world with its own appearance, and with the other world's.
        cpu_renderer.set_appearance(drawn)
        own_views = cpu_views(cpu_renderer)
        cpu_renderer.set_appearance(swapped)
        other_views = cpu_views(cpu_renderer)
    finally:
        warp_renderer.set_appearance(nominal)
        cpu_renderer.set_appearance(nominal)
        nominal.apply(model, 0)
    for cam in CAMERA_NAMES:
        for w in range(2):
            own = np.abs(grey(views[cam][w]) - grey(own_views[cam][w])).mean()
            other = np.abs(grey(views[cam][w]) - grey(other_views[cam][w])).mean()
            print(f"{cam} world {w}: grey MAD {own:.2f} (other world's appearance {other:.2f})")
            assert own < GREY_MAD_TOL and own < other, (cam, w, own, other)


def test_device_remap_matches_opencv(cell: Cell, small_world: WorldSpec) -> None:
    plans = plan_cameras(cell.scene.model, small_world)
    remap = next(p.remap for p in plans if p.remap is not None)
    assert remap is not None
    rng = np.random.default_rng(0)
    h, w = remap.wide.height, remap.wide.width
    # Noise is the hardest case for interpolation; a gradient checks the geometry.
    noise = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
    ramp = np.zeros((h, w, 3), dtype=np.uint8)
    ramp[..., 0] = np.linspace(0, 255, w, dtype=np.uint8)[None]
    ramp[..., 1] = np.linspace(0, 255, h, dtype=np.uint8)[:, None]
    wide = np.stack([noise, ramp])
    device = DeviceRemap(remap, "cpu")
    for gain in (1.0, 1.3):
        out = device(wide, gain)
        for i in range(2):
            ref = remap(wide[i])
            if gain != 1.0:
                ref = cv2.convertScaleAbs(ref, alpha=gain)
            assert np.abs(out[i].astype(int) - ref.astype(int)).max() <= 1
    assert (out[:, ~remap.valid] == 0).all()


def test_motion_blur_is_refused(cell: Cell, small_world: WorldSpec) -> None:
    plans = plan_cameras(cell.scene.model, small_world)
    plans[1].motion_blur_s = 0.01
    assert isinstance(cell.physics, WarpPhysics)
    with pytest.raises(NotImplementedError, match=plans[1].name):
        WarpSceneRenderer(cell.physics, plans)


def test_vector_env_refuses_motion_blur(small_world: WorldSpec) -> None:
    cams = dict(small_world.cameras)
    cams["head"] = cams["head"].replace(motion_blur_s=0.01)
    blurred = small_world.replace(cameras=cams)
    with pytest.raises(NotImplementedError, match="head"):
        PickSortVectorEnv(num_envs=1, world=blurred, images=True, renderer="mujoco_warp")


def test_vector_env_warp_images(small_world: WorldSpec) -> None:
    env = PickSortVectorEnv(num_envs=2, world=small_world, images=True, renderer="mujoco_warp")
    obs, _ = env.reset(seed=0)
    env.action_space.seed(0)
    obs2, *_ = env.step(env.action_space.sample())
    for o in (obs, obs2):
        for cam in CAMERA_NAMES:
            img = o["images"][cam]
            assert img.shape == (2, *OBS_SIZE[::-1], 3) and img.dtype == np.uint8
            assert img.mean() > 10  # Lit, not blank.
    assert env.observation_space.contains(obs2)
    env.close()


def test_sim_bench_json_has_the_batched_render_figures() -> None:
    """``r2s2r sim bench`` with Warp batch sizes adds batched render rates against the CPU
    renderer on the same worlds (tiny sizes: the figures are checked, not their values)."""
    import json

    from typer.testing import CliRunner

    from r2s2r.cli import app

    args = ["sim", "bench", "--json", "--seconds", "0.2", "--warp-sizes", "1,2"]
    result = CliRunner().invoke(app, [*args, "--warp-render-size", "32,32"])
    assert result.exit_code == 0, result.output
    figures = json.loads(result.stdout)
    assert figures["warp_render_device"] == figures["warp_device"]
    assert figures["warp_render_obs_size"] == "32x32"
    for key in (
        "warp_world_steps_per_s",
        "warp_batched_renders_per_s",
        "warp_render_frame_sets_per_s",
        "cpu_render_frame_sets_per_s",
        "warp_render_over_cpu",
    ):
        assert set(figures[key]) == {"1", "2"}, key
        assert all(v > 0 for v in figures[key].values()), key
    sets = figures["warp_render_frame_sets_per_s"]
    assert sets["2"] == pytest.approx(2 * figures["warp_batched_renders_per_s"]["2"])
    assert figures["warp_render_over_cpu"]["1"] == pytest.approx(
        sets["1"] / figures["cpu_render_frame_sets_per_s"]["1"]
    )


def test_both_renderers_share_one_interface(cell: Cell, small_world: WorldSpec) -> None:
    """The renderers of ``RENDERERS`` over the same Warp worlds: the same cameras, shapes
    and types through the ``Renderer`` protocol."""
    shapes = []
    for name in RENDERERS.names():
        renderer = make_renderer(name, cell.physics, small_world, depth=True)
        assert isinstance(renderer, Renderer)
        renderer.set_appearance(Appearance(cell.scene, randomize=False, num_worlds=2))
        views = renderer.render()
        depth = renderer.render_depth()
        assert all(v.dtype == np.uint8 for v in views.values()) and depth.dtype == np.float32
        shapes.append(({c: v.shape for c, v in views.items()}, depth.shape))
        renderer.close()
    assert shapes[0] == shapes[1]
    assert shapes[0][0] == {c: (2, *OBS_SIZE[::-1], 3) for c in CAMERA_NAMES}
