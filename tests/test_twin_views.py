"""The twin's fast camera path (``rig/twin/views.py``, ``sim/blur.py``) against the reference one:
the same look, a documented latency (periods from a state to its frame), each camera at its
own frame rate, and worker processes that end cleanly."""

from __future__ import annotations

import copy
import gc
import subprocess
import sys
import time
from pathlib import Path

import cv2
import mujoco
import numpy as np
import pytest

from r2s2r.rig.twin import TwinRig
from r2s2r.rig.twin.truth import CameraEffects
from r2s2r.rig.twin.views import TwinViewsCfg, ViewState, ViewWorkers, shadow_map_for
from r2s2r.sim.physics import MujocoPhysics
from r2s2r.sim.render import CameraPlan, SceneRenderer
from r2s2r.spec import SpecError
from r2s2r.spec.worlds import world_at

PERIOD = 0.02


def _psnr(a: np.ndarray, b: np.ndarray) -> float:
    mse = float(np.mean((a.astype(np.float64) - b) ** 2))
    return 10.0 * np.log10(255.0**2 / max(mse, 1e-12))


def _mad(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.mean(np.abs(a.astype(np.float64) - b)))


def _drive(twin: TwinRig, periods: int) -> None:
    """Both arms moving fast and the belt running: motion in every view."""
    for side, offset in (("left", [0.05, 0.1, -0.1]), ("right", [0.0, -0.1, -0.1])):
        arm = twin.arms[side]
        target = arm.state().tcp_pose.copy()
        target[:3] += offset
        arm.send_tcp_target(target)
    twin.conveyor.set_speed(0.2)
    twin.step(periods)


@pytest.fixture(scope="module")
def moving() -> TwinRig:
    twin = TwinRig(seed=0, views=TwinViewsCfg.reference())
    _drive(twin, 8)
    return twin


@pytest.mark.parametrize("shutter_s", [None, 0.02])
def test_one_render_blur_keeps_the_look(moving: TwinRig, shutter_s: float | None) -> None:
    """The flow blur (one render, displaced along each pixel's motion) matches the reference
    (renders at the shutter's start and end) at the twin's shutter times, and at a long
    shutter it is much closer to the reference than the unblurred render is (a wrong motion,
    or none, is not)."""
    physics = moving.reveal_internals().physics
    world = moving.reveal_truth().world
    ref = SceneRenderer(physics, world, blur="samples")
    fast = SceneRenderer(physics, world, blur="flow")
    try:
        for plan in ref.plans + fast.plans:
            assert plan.motion_blur_s > 0
            if shutter_s is not None:
                plan.motion_blur_s = shutter_s
        data = physics.mjdata(0)
        a, b = ref.render_cameras(data), fast.render_cameras(data)
        for plan in ref.plans:
            raw = ref.render_raw(data, plan)
            sharp = plan.remap(raw) if plan.remap is not None else raw
            name = plan.name
            if shutter_s is None:
                assert _psnr(a[name], b[name]) > 38.0, name
                assert _mad(a[name], b[name]) < 0.6, name
            else:
                assert _mad(a[name], b[name]) < 0.9 * _mad(a[name], sharp), name
                assert _psnr(a[name], b[name]) > 33.0, name
    finally:
        ref.close()
        fast.close()


def _turns(flow: np.ndarray, plan: CameraPlan) -> np.ndarray:
    """The angle (rad) between the rays of each render pixel u and u + flow(u), where the
    delivered image samples the render."""
    p = plan.pinhole
    assert p is not None
    v, u = np.mgrid[0 : p.height, 0 : p.width].astype(np.float64)

    def rays(u: np.ndarray, v: np.ndarray) -> np.ndarray:
        r = np.stack([(u - p.cx) / p.fx, (v - p.cy) / p.fy, np.ones_like(u)], axis=-1)
        return r / np.linalg.norm(r, axis=-1, keepdims=True)

    now, start = rays(u, v), rays(u + flow[..., 0], v + flow[..., 1])
    turns = np.arccos(np.clip(np.sum(now * start, axis=-1), -1.0, 1.0))
    if plan.remap is None:
        return turns.ravel()
    return turns[now[..., 2] > np.cos(np.radians(plan.remap.wide.max_fov_deg / 2))]


def test_the_motion_bound_holds_without_a_render_and_is_close(moving: TwinRig) -> None:
    """``MotionFlow.largest_turn`` (geom poses only) is at least the largest turn of any
    pixel's ray over the shutter that the id pass finds, and within three times it, in each
    view of both arms moving fast and the belt running, at the twin's shutter and longer."""
    physics = moving.reveal_internals().physics
    renderer = SceneRenderer(physics, moving.reveal_truth().world, blur="flow")
    data = physics.mjdata(0)
    start = mujoco.MjData(physics.model)
    start.mocap_pos[:], start.mocap_quat[:] = data.mocap_pos, data.mocap_quat
    try:
        for plan in renderer.plans:
            for shutter_s in (plan.motion_blur_s, 0.02):
                renderer._integrate_back(data, start, shutter_s)
                flow = renderer._flow(plan)
                seen = float(_turns(flow.flow(data, start), plan).max())
                bound = flow.largest_turn(data, start)
                assert seen > 1e-4, plan.name
                # 1.2-1.9 times when written.
                assert seen <= bound < 3.0 * seen, (plan.name, shutter_s, seen, bound)
    finally:
        renderer.close()


def test_a_view_that_hardly_moves_is_left_unblurred(moving: TwinRig) -> None:
    """With ``still_px`` the flow renderer skips the blur (and its id pass) where the bound
    says nothing moves that far: a still state's views are the sharp renders, as are the
    moving state's under a huge threshold; with none, the moving views are blurred; with a
    threshold between the views' bounds, those under it are sharp and the others blurred."""
    physics = moving.reveal_internals().physics
    world = moving.reveal_truth().world
    data = physics.mjdata(0)
    still = copy.copy(data)
    still.qvel[:] = 0.0
    skip = SceneRenderer(physics, world, blur="flow", still_px=0.1)
    always = SceneRenderer(physics, world, blur="flow")
    never = SceneRenderer(physics, world, blur="flow", still_px=1e9)
    renderers = [skip, always, never]
    try:
        # Each view's bound on its motion, in its delivered pixels.
        start = mujoco.MjData(physics.model)
        start.mocap_pos[:], start.mocap_quat[:] = data.mocap_pos, data.mocap_quat
        bound_px = {}
        for plan in always.plans:
            always._integrate_back(data, start, plan.motion_blur_s)
            turn = always._flow(plan).largest_turn(data, start)
            bound_px[plan.name] = turn * always._per_radian(plan)
        low, high = min(bound_px.values()), max(bound_px.values())
        assert high > 1.05 * low  # 0.61 and 0.78 px when written.
        threshold = (low + high) / 2.0
        between = SceneRenderer(physics, world, blur="flow", still_px=threshold)
        renderers.append(between)
        calm, moved = skip.render_cameras(still), always.render_cameras(data)
        huge, some = never.render_cameras(data), between.render_cameras(data)
        for plan in skip.plans:
            raw = skip.render_raw(data, plan)
            sharp = plan.remap(raw) if plan.remap is not None else raw
            if plan.exposure != 1.0:
                sharp = cv2.convertScaleAbs(sharp, alpha=plan.exposure)
            np.testing.assert_array_equal(huge[plan.name], sharp, err_msg=plan.name)
            np.testing.assert_array_equal(calm[plan.name], sharp, err_msg=plan.name)
            assert _mad(moved[plan.name], sharp) > 0.05, plan.name
            if bound_px[plan.name] < threshold:
                np.testing.assert_array_equal(some[plan.name], sharp, err_msg=plan.name)
            else:
                np.testing.assert_array_equal(some[plan.name], moved[plan.name], plan.name)
    finally:
        for renderer in renderers:
            renderer.close()
    with pytest.raises(ValueError, match="still_px"):
        SceneRenderer(physics, world, blur="flow", still_px=-1.0)


@pytest.mark.parametrize("latency", [1, 2])
def test_fast_twin_shows_what_the_reference_shows_latency_periods_later(latency: int) -> None:
    """The default twin (worker process, 30 frames/s, flow blur, matched shadow map, meshed
    primitives) and the reference twin, driven alike: a frame read after step k is of the
    state after step k - latency or earlier (its stamp says so), every frame taken arrives
    exactly ``latency`` periods after its state, and it looks like the reference's frame of
    that state (they differ by the camera noise, drawn independently)."""
    fast = TwinRig(seed=2, views=TwinViewsCfg(latency=latency))
    ref = TwinRig(seed=2, views=TwinViewsCfg.reference())
    try:
        assert fast.views_cfg.worker and fast.views_cfg.lean_geoms
        first = {n: c.read() for n, c in fast.cameras.items()}
        assert all(f.stamp == 0.0 for f in first.values())
        reference = {}
        compared = 0
        arrived: dict[str, set[int]] = {n: set() for n in fast.cameras}
        for k in range(1, 16):
            for twin in (fast, ref):
                _drive(twin, 1)
            reference[k] = {n: c.read() for n, c in ref.cameras.items()}
            for name, cam in fast.cameras.items():
                frame = cam.read()
                shown = round(frame.stamp / PERIOD)
                assert shown == 0 or shown <= k - latency, (k, name, shown)
                if shown == k - latency:
                    arrived[name].add(shown)
                if shown == k - latency and shown in reference:
                    expect = reference[shown][name].image
                    assert _psnr(frame.image, expect) > 30.0, (k, name)
                    assert _mad(frame.image, expect) < 5.0, (k, name)
                    compared += 1
        # At 30 frames/s a camera takes a frame in 3 of every 5 periods: each one of the
        # 15 - latency periods that took one was shown exactly latency periods later.
        for name in fast.cameras:
            assert len(arrived[name]) >= (15 - latency) * 3 // 5 - 1, name
        assert compared >= 15
        # Several periods in one call: the frames then show the state latency periods back.
        fast.step(10)
        for cam in fast.cameras.values():
            assert cam.read().stamp == pytest.approx(fast.now() - latency * PERIOD)
    finally:
        fast.close()
        ref.close()


def test_cameras_take_frames_at_their_own_rate() -> None:
    """At 30 frames/s against the 50 Hz control period a camera takes a new frame in 3 of
    every 5 periods and holds its last one between them; the reference takes one every
    period; a presented object or a moved board is never shown stale."""
    twin = TwinRig(seed=4)
    try:
        head = twin.cameras["head"]
        head.read()
        stamps = []
        for _ in range(50):
            twin.step()
            stamps.append(head.read().stamp)
        taken = sorted(set(stamps))
        assert 28 <= len(taken) <= 31
        gaps = np.diff(taken)
        assert gaps.min() >= PERIOD - 1e-9 and gaps.max() <= 2 * PERIOD + 1e-9
        assert np.all(np.diff(stamps) >= 0)
        before = head.read().image
        twin.presenter.place_board(0)
        shown = head.read()
        assert shown.stamp == twin.now() and _mad(shown.image, before) > 1.0
        twin.presenter.present()
        assert twin.now() == 0.0 and head.read().stamp == 0.0
    finally:
        twin.close()
    every = TwinRig(seed=4, views=TwinViewsCfg(fps=None, worker=False))
    every.cameras["head"].read()
    seen = set()
    for _ in range(10):
        every.step()
        seen.add(every.cameras["head"].read().stamp)
    assert len(seen) == 10
    every.close()


def test_several_workers_render_the_same_frames_side_by_side() -> None:
    """By default (``workers=3``) each camera has a worker process of its own; the frames are
    of the same states, with the same stamps, as one worker's (they differ by the noise
    draw), and closing the twin ends every worker."""
    one = TwinRig(seed=3, views=TwinViewsCfg(workers=1))
    three = TwinRig(seed=3)
    try:
        for twin in (one, three):
            for cam in twin.cameras.values():
                cam.read()
        pool = three.reveal_internals().views.worker
        assert isinstance(pool, ViewWorkers) and len(pool.members) == 3
        assert len({w.process.pid for w in pool.members}) == 3
        for _ in range(6):
            for twin in (one, three):
                _drive(twin, 1)
            a = {n: c.read() for n, c in one.cameras.items()}
            b = {n: c.read() for n, c in three.cameras.items()}
            for name in a:
                assert a[name].stamp == b[name].stamp, name
                assert _psnr(a[name].image, b[name].image) > 30.0, name
        assert pool.cpu_s > 0.0
    finally:
        one.close()
        three.close()
    for worker in pool.members:
        assert not worker.process.is_alive()
    with pytest.raises(ValueError, match="workers"):
        TwinViewsCfg(workers=0)


def test_a_dropped_twin_stops_its_worker() -> None:
    """A twin that is never closed does not leave its worker behind once it is collected."""
    twin = TwinRig(seed=1)
    twin.cameras["left_wrist"].read()
    pool = twin.reveal_internals().views.worker
    assert pool is not None
    process = pool.members[0].process
    assert process.is_alive()
    del twin, pool
    gc.collect()
    process.join(10.0)
    assert not process.is_alive()


def test_closing_a_twin_with_views_out_ends_its_workers_without_terminating_them() -> None:
    """Views still out when the twin closes (latency 2: two requests per worker, more than
    its pipe's buffer holds once rendered) do not keep a worker from ending: each one
    exits by itself (code 0) instead of waiting out the join and being terminated."""
    twin = TwinRig(seed=1)
    for cam in twin.cameras.values():
        cam.read()
    for _ in range(10):
        twin.step()
    pool = twin.reveal_internals().views.worker
    assert pool is not None and all(len(w.pending) == 2 for w in pool.members)
    processes = [w.process for w in pool.members]
    twin.close()
    assert [p.exitcode for p in processes] == [0] * len(processes)


def test_an_episode_start_skips_the_views_still_out_and_changes_no_later_frame() -> None:
    """Views asked for before ``present()`` are skipped by the workers that have not begun
    them (nobody reads them), and the frames after it are the same to the bit whether the
    old views were skipped or rendered: each frame's noise depends on its request alone."""
    twins = [TwinRig(seed=2), TwinRig(seed=2)]
    try:
        frames = []
        for k, twin in enumerate(twins):
            for cam in twin.cameras.values():
                cam.read()
            _drive(twin, 3)
            sim = twin.reveal_internals()
            pool = sim.views.worker
            assert isinstance(pool, ViewWorkers)
            for _ in range(5):  # More than a worker renders before the restart below.
                pool.submit(sim.physics, sim.views.names, twin.now(), 10**6)
            if k == 1:
                pool.collect(None, wait=True)  # The second twin renders every view out.
            twin.present()
            _drive(twin, 4)
            frames.append({n: c.read() for n, c in twin.cameras.items()})
        skipped = [
            sum(w.skipped for w in twin.reveal_internals().views.worker.members) for twin in twins
        ]
        assert skipped[0] >= 3 * 3 and skipped[1] == 0
        for name in frames[0]:
            assert frames[0][name].stamp == frames[1][name].stamp
            np.testing.assert_array_equal(frames[0][name].image, frames[1][name].image, name)
    finally:
        for twin in twins:
            twin.close()


def test_the_twins_views_take_their_detail_and_still_threshold_from_the_config() -> None:
    """A 64 px twin's view workers draw the arms and hands with fewer vertices than at full
    detail (``match_detail``), and the boxes and floor with fewer quads and grid cells; its
    renderers leave frames unblurred under the config's
    ``still_px`` (the views a worker makes are built from the same config)."""
    small = world_at(64)
    vertices, quality, floor = {}, {}, {}
    for detail in (True, False):
        twin = TwinRig(seed=0, world=small, views=TwinViewsCfg(match_detail=detail))
        try:
            model = twin.reveal_internals().views.render_model()
            vertices[detail] = model.nmeshvert
            q = model.vis.quality
            quality[detail] = (q.numslices, q.numstacks, q.numquads)
            floor[detail] = float(model.geom_size[model.geom("floor").id, 2])
            # A state with the twin's shapes (as an episode start sends it) keeps the render
            # model's floor grid and takes every other size.
            physics = MujocoPhysics(model)
            simulated = twin.reveal_internals().physics
            ViewState.of(simulated, True).write(physics)
            sizes = simulated.model.geom_size
            own = physics.model.geom_size[: len(sizes)]
            plane = simulated.model.geom_type == int(mujoco.mjtGeom.mjGEOM_PLANE)
            np.testing.assert_array_equal(own[~plane], sizes[~plane])
            assert own[plane][0, 2] == floor[detail]
        finally:
            twin.close()
    assert vertices[True] < 0.6 * vertices[False]
    # What MuJoCo draws from its own lists too (``match_quality``).
    assert quality == {True: (12, 8, 2), False: (12, 8, 4)}
    assert floor[True] == pytest.approx(2.0 * floor[False])
    twin = TwinRig(seed=0, world=small, views=TwinViewsCfg(worker=False, still_px=0.3))
    try:
        assert twin.reveal_internals().views.local().renderer.still_px == 0.3
    finally:
        twin.close()


def test_shadow_map_follows_the_delivered_size() -> None:
    assert shadow_map_for((256, 256), 512) == 512
    assert shadow_map_for((64, 64), 512) == 128
    assert shadow_map_for((128, 96), 512) == 256
    assert shadow_map_for((1280, 720), 1024) == 1024
    small = world_at(64)
    twin = TwinRig(seed=0, world=small)
    assert twin.reveal_internals().physics.model.vis.quality.shadowsize == 128
    assert twin.cameras["head"].read().image.shape == (64, 64, 3)
    twin.close()
    native = TwinRig(seed=0, world=small, native_cameras=True)
    assert native.views_cfg == TwinViewsCfg.reference()
    truth = native.reveal_truth().world.render
    assert native.reveal_internals().physics.model.vis.quality.shadowsize == truth.shadow_map == 512


def test_views_config_is_checked() -> None:
    with pytest.raises(ValueError, match="fps"):
        TwinViewsCfg(fps=0.0)
    with pytest.raises(ValueError, match="blur"):
        TwinViewsCfg(blur="smear")
    with pytest.raises(ValueError, match="wide_oversample"):
        TwinViewsCfg(wide_oversample=0.0)
    with pytest.raises(ValueError, match="camera_fps"):
        TwinViewsCfg(camera_fps=(("head", 0.0),))
    with pytest.raises(ValueError, match="twice"):
        TwinViewsCfg(camera_fps=(("head", 10.0), ("head", 20.0)))
    with pytest.raises(ValueError, match="does not have"):
        TwinRig(seed=0, views=TwinViewsCfg(camera_fps=(("belly", 10.0),)))
    for still in (-0.1, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="still_px"):
            TwinViewsCfg(still_px=still)
    for latency in (0, 6, 1.5, True):
        with pytest.raises(ValueError, match="latency"):
            TwinViewsCfg(latency=latency)  # type: ignore[arg-type]
    for threads in (-1, 65, 1.5, True):
        with pytest.raises(ValueError, match="raster_threads"):
            TwinViewsCfg(raster_threads=threads)  # type: ignore[arg-type]
    # A spec like the others: unknown keys are refused, and copies are validated.
    with pytest.raises(SpecError, match="colour: unknown key"):
        TwinViewsCfg.from_dict({"colour": 1})
    with pytest.raises(ValueError, match="latency"):
        TwinViewsCfg().replace(latency=0)
    assert TwinViewsCfg().replace(fps=None) == TwinViewsCfg(fps=None)


def _raster_threads(twin: TwinRig) -> list[int]:
    """How many of Mesa's software rasterizer threads each view worker of ``twin`` runs."""
    pool = twin.reveal_internals().views.worker
    assert pool is not None
    counts = []
    for member in pool.members:
        tasks = Path(f"/proc/{member.process.pid}/task")
        names = [(task / "comm").read_text().strip() for task in tasks.iterdir()]
        counts.append(sum(name.startswith("llvmpipe") for name in names))
    return counts


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="reads /proc")
def test_view_workers_rasterize_in_their_own_thread_unless_asked() -> None:
    """With ``raster_threads=0`` (the default) a worker's renders run in its own thread, no
    rasterizer threads beside it; with None Mesa starts its own (when it renders in
    software, as on this machine)."""
    small = world_at(64)
    counts = {}
    for threads in (0, None):
        twin = TwinRig(seed=0, world=small, views=TwinViewsCfg(raster_threads=threads))
        try:
            for cam in twin.cameras.values():
                cam.read()
            counts[threads] = _raster_threads(twin)
        finally:
            twin.close()
    if not any(counts[None]):
        pytest.skip("the renderer is not Mesa's llvmpipe")
    assert counts[0] == [0, 0, 0] and all(n > 0 for n in counts[None])


def _wide_sizes(twin: TwinRig) -> dict[str, tuple[int, int]]:
    renderer = twin.reveal_internals().views.local().renderer
    return {p.name: p.render_size for p in renderer.plans if p.remap is not None}


def test_wide_views_follow_the_views_density_and_keep_the_look() -> None:
    """By default the fisheye wrist cameras' wide renders have the views' density (fewer
    pixels than the world's); the reference, and native cameras, keep the world's; the
    delivered views differ from those at the world's density by resampling alone (same
    state, same effects draw)."""
    fast = TwinRig(seed=1, views=TwinViewsCfg(worker=False))
    world = TwinRig(seed=1, views=TwinViewsCfg(worker=False, wide_oversample=None))
    ref = TwinRig(seed=1, views=TwinViewsCfg.reference())
    try:
        small, full = _wide_sizes(fast), _wide_sizes(world)
        assert full == _wide_sizes(ref) and set(small) == {"left_wrist", "right_wrist"}
        for name, (w, h) in small.items():
            fw, fh = full[name]
            assert w * h < 0.6 * fw * fh, name
        for twin in (fast, world):
            _drive(twin, 6)
        a = {n: c.read().image for n, c in fast.cameras.items()}
        b = {n: c.read().image for n, c in world.cameras.items()}
        assert np.array_equal(a["head"], b["head"])
        # Another frame of the same state at the world's density (another noise draw): what
        # a camera's own noise changes from frame to frame (MAD about 2 here).
        again = (
            world.reveal_internals().views.local().render(tuple(small), np.random.default_rng(1))
        )
        for name in small:
            assert a[name].shape == b[name].shape == (256, 256, 3)
            assert _psnr(a[name], b[name]) > 30.0, name
            assert _mad(a[name], b[name]) < 1.5 * _mad(again[name], b[name]), name
    finally:
        for twin in (fast, world, ref):
            twin.close()
    native = TwinRig(seed=1, native_cameras=True, views=TwinViewsCfg(worker=False))
    try:
        renderer = native.reveal_internals().views.local().renderer
        plans = {p.name: p for p in renderer.plans}
        assert plans["head"].render_size == (
            native.nominal.cameras["head"].width,
            native.nominal.cameras["head"].height,
        )
        assert native.reveal_internals().physics.model.vis.quality.shadowsize == 512
        # Native cameras render the world's wide views whatever the views' density.
        world_density = TwinViewsCfg(worker=False, wide_oversample=None)
        native_world = TwinRig(seed=1, native_cameras=True, views=world_density)
        try:
            assert _wide_sizes(native) == _wide_sizes(native_world)
        finally:
            native_world.close()
    finally:
        native.close()


def test_views_leave_the_models_sites_out_unless_asked() -> None:
    """The twin's views draw no site markers (no real camera sees them; the frames then
    differ only where they were); the reference draws them, as before."""
    fast = TwinRig(seed=1, views=TwinViewsCfg(worker=False))
    ref = TwinRig(seed=1, views=TwinViewsCfg(worker=False, sites=True, wide_oversample=None))
    try:
        assert not TwinViewsCfg().sites and TwinViewsCfg.reference().sites
        drawn = {}
        for key, twin in (("fast", fast), ("ref", ref)):
            sim = twin.reveal_internals()
            renderer, data = sim.views.local().renderer, sim.physics.mjdata(0)
            plan = renderer.plans[0]
            renderer.render_raw(data, plan)
            scene = renderer._renderers[plan.render_size].scene
            drawn[key] = sum(
                g.objtype == mujoco.mjtObj.mjOBJ_SITE for g in scene.geoms[: scene.ngeom]
            )
        assert drawn["fast"] == 0 and drawn["ref"] > 0
        a, b = fast.cameras["head"].read().image, ref.cameras["head"].read().image
        assert _psnr(a, b) > 35.0
    finally:
        fast.close()
        ref.close()


def test_named_cameras_take_frames_at_their_own_rate() -> None:
    """``camera_fps`` sets a camera's own rate: the wrists at 15 frames/s take a new frame
    every 3 or 4 periods while the head at 30 takes one in 3 of every 5; each frame is
    stamped with the time of the state it shows."""
    twin = TwinRig(seed=4, views=TwinViewsCfg(camera_fps=(("left_wrist", 15.0),)))
    try:
        assert twin.views_cfg.fps_of("left_wrist") == 15.0
        assert twin.views_cfg.fps_of("head") == 30.0
        for cam in twin.cameras.values():
            cam.read()
        stamps: dict[str, list[float]] = {"head": [], "left_wrist": [], "right_wrist": []}
        for _ in range(50):
            twin.step()
            for name in stamps:
                frame = twin.cameras[name].read()
                assert frame.stamp <= twin.now() - PERIOD + 1e-9
                stamps[name].append(frame.stamp)
        taken = {name: sorted(set(s)) for name, s in stamps.items()}
        assert 28 <= len(taken["head"]) <= 31
        assert 28 <= len(taken["right_wrist"]) <= 31
        assert 14 <= len(taken["left_wrist"]) <= 16
        gaps = np.diff(taken["left_wrist"])
        assert gaps.min() >= 3 * PERIOD - 1e-9 and gaps.max() <= 4 * PERIOD + 1e-9
        # Every stamp is a state the twin went through (a period boundary).
        for s in stamps.values():
            assert np.allclose(np.round(np.array(s) / PERIOD) * PERIOD, s)
    finally:
        twin.close()


def test_camera_noise_is_gaussian_of_its_std_and_reproducible() -> None:
    """The effects' sensor noise (drawn by OpenCV's generator, seeded from the twin's): about
    its standard deviation around the noise-free image, the same for the same generator, new
    in every frame."""
    effects = CameraEffects(1.0, (1.0, 1.0, 1.0), 0.0, 3.0, 1.0)
    quiet = CameraEffects(1.0, (1.0, 1.0, 1.0), 0.0, 0.0, 1.0)
    image = np.full((64, 64, 3), 128, np.uint8)
    clean = quiet.apply(image, np.random.default_rng(0)).astype(np.float64)
    a = effects.apply(image, np.random.default_rng(5))
    b = effects.apply(image, np.random.default_rng(5))
    rng = np.random.default_rng(5)
    first, second = effects.apply(image, rng), effects.apply(image, rng)
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(a, first)
    assert not np.array_equal(first, second)
    residual = a - clean
    assert abs(residual.mean()) < 0.15 and 2.8 < residual.std() < 3.2


@pytest.mark.parametrize("latency", [1, 2])
def test_a_paced_twin_never_waits_for_its_views(
    monkeypatch: pytest.MonkeyPatch, latency: int
) -> None:
    """Paced to the wall clock, a period whose views are not ready goes on without them: the
    physics advances, the cameras hold their frames, the worker is never asked for more
    frames than its latency; once the worker is done the next period takes its views."""
    twin = TwinRig(seed=6, realtime=True, views=TwinViewsCfg(latency=latency))
    try:
        head = twin.cameras["head"]
        head.read()
        pool = twin.reveal_internals().views.worker
        assert pool is not None
        worker = pool.members[0]
        while not worker.pending:
            twin.step()
        held = head.read()
        monkeypatch.setattr(worker, "ready", lambda: False)
        t0 = twin.now()
        twin.step(5)
        assert twin.now() == pytest.approx(t0 + 5 * PERIOD)
        assert head.read() is held and len(worker.pending) == latency
        monkeypatch.undo()
        while not worker.ready():  # The render itself takes what the machine gives it.
            time.sleep(0.01)
        twin.step()
        assert head.read().stamp > held.stamp
    finally:
        twin.close()


def test_a_script_the_view_worker_cannot_import_fails_clearly_instead_of_hanging(
    tmp_path: Path,
) -> None:
    # A twin made by a script read from stdin: the spawned worker cannot import it and ends
    # on start. The twin says why, within seconds (it used to wait forever).
    code = "from r2s2r.rig.twin import TwinRig\nnext(iter(TwinRig(0).cameras.values())).read()\n"
    done = subprocess.run(
        [sys.executable, "-"], input=code, capture_output=True, text=True, timeout=120,
        cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode != 0
    assert "view worker ended on start" in done.stderr, done.stderr[-2000:]
    assert "__main__" in done.stderr
