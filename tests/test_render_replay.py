"""Re-rendering a dataset's recorded states (``r2s2r.app.render``, the Kit-free part of
``tasks/render_isaac.py``): the replayed states pose the cell as recorded, the camera poses and
USD intrinsics handed to a renderer put the object where MuJoCo's renderer draws it, and the
whole job writes a verified dataset, cancels and resumes, with MuJoCo's rasterizer at the
renderer seam."""

from __future__ import annotations

from pathlib import Path

import mujoco
import numpy as np
import pytest

from r2s2r.app.jobs import Cancel, Cancelled, Progress, RequestError
from r2s2r.app.render import (
    MujocoFrameRenderer,
    RenderRequest,
    StateReplay,
    project_usd,
    render_dataset,
    usd_camera,
    usd_matrix,
)
from r2s2r.data import Dataset, DatasetCfg, DatasetWriter, verify
from r2s2r.data.config import ACTION_KEY, ENV_STATE_KEY, STATE_KEY
from r2s2r.sim.camera import Intrinsics


@pytest.fixture(scope="module")
def replay() -> StateReplay:
    r = StateReplay("nominal", size=128)
    yield r
    r.close()


def recorded_qpos(replay: StateReplay, ds: Dataset, e: int, k: int) -> np.ndarray:
    row, arrays = ds.episode(e), ds.episode_arrays(e)
    return replay.qpos(
        arrays[STATE_KEY][k],
        arrays[ENV_STATE_KEY][k],
        row["object_ids"][0],
        float(arrays["timestamp"][k]),
        float(row["belt_speed"]),
    )


def test_replayed_states_pose_the_cell_as_recorded(
    replay: StateReplay, recorded_demos: Path
) -> None:
    """The recorded joints give back the recorded TCP poses through the nominal cell's
    kinematics (within 1 mm: the twin's hidden cell is not the nominal one), and the object
    body sits at its recorded pose."""
    ds = Dataset(recorded_demos)
    idx = replay.cell.idx
    names = [o.name for o in replay.cell.objects]
    for e in range(ds.num_episodes):
        arrays = ds.episode_arrays(e)
        obj = ds.episode(e)["object_ids"][0]
        for k in range(0, len(arrays["timestamp"]), 15):
            frame = replay.frame(recorded_qpos(replay, ds, e, k))
            tcp = replay._data.site_xpos[idx.tcp_sites]
            recorded = replay.contract.split_state(arrays[STATE_KEY][k])["tcp_pose"]
            np.testing.assert_allclose(tcp, recorded[:, :3], atol=1e-3)
            adr = idx.obj_qadr[names.index(obj)]
            np.testing.assert_allclose(frame.qpos[adr : adr + 7], arrays[ENV_STATE_KEY][k])
    with pytest.raises(RequestError, match="'teapot' is not in the task"):
        replay.qpos(arrays[STATE_KEY][0], arrays[ENV_STATE_KEY][0], "teapot", 0.0, 0.1)


def test_usd_camera_attributes_project_like_the_intrinsics() -> None:
    """USD's frustum with ``usd_camera``'s apertures and offsets maps camera-frame points to
    the pixels OpenCV's pinhole model gives, for an off-centre, non-square-pixel camera and
    any stage unit; ``usd_matrix`` is a row-vector transform."""
    from r2s2r.app.render import CameraView

    intr = Intrinsics("pinhole", 160, 120, 150.0, 140.0, 83.2, 57.9, (0.0,) * 5)
    view = CameraView("c", intr, None, 1.0)
    rng = np.random.default_rng(0)
    pts_cv = np.column_stack([rng.uniform(-0.3, 0.3, (20, 2)), rng.uniform(0.5, 2.0, 20)])
    want = intr.project(pts_cv)
    for mpu in (1.0, 0.01):
        attrs = usd_camera(view, mpu)
        # OpenCV camera (x right, y down, z forward) -> USD camera (x right, y up, -z forward).
        got = np.array([project_usd(attrs, p * [1, -1, -1], (160, 120)) for p in pts_cv])
        np.testing.assert_allclose(got, want, atol=1e-9)
    rot = mujoco_rotation(0.3, [1, 2, 3])
    m = usd_matrix(np.array([0.1, 0.2, 0.3]), rot, 0.01)
    p = np.array([0.5, -0.2, 0.7])
    # A point given in metres in the posed frame, in stage units (centimetres) both sides.
    want_world = (rot @ p + [0.1, 0.2, 0.3]) / 0.01
    np.testing.assert_allclose(np.append(p / 0.01, 1) @ m, np.append(want_world, 1))


def mujoco_rotation(angle: float, axis: list[float]) -> np.ndarray:
    quat = np.zeros(4)
    mujoco.mju_axisAngle2Quat(quat, np.asarray(axis, float) / np.linalg.norm(axis), angle)
    mat = np.zeros(9)
    mujoco.mju_quat2Mat(mat, quat)
    return mat.reshape(3, 3)


def test_frame_camera_poses_put_the_object_where_mujoco_draws_it(
    replay: StateReplay, recorded_demos: Path
) -> None:
    """What a renderer at the seam is given (each camera's world pose in the frame, its USD
    intrinsics) projects the object's centre onto the object's pixels in MuJoCo's own render
    of the frame (its segmentation), in the head view and the wrist views' wide renders."""
    ds = Dataset(recorded_demos)
    model = replay.model
    renderers = {}
    for view in replay.views:
        renderers[view.name] = r = mujoco.Renderer(model, height=view.size[1], width=view.size[0])
        r.enable_segmentation_rendering()
    data = mujoco.MjData(model)
    checked = 0
    for e in range(ds.num_episodes):
        obj = ds.episode(e)["object_ids"][0]
        body = model.body(f"obj:{obj}").id
        geoms = list(np.flatnonzero(model.geom_bodyid == body))
        for k in range(0, ds.episode(e)["length"], 15):
            frame = replay.frame(recorded_qpos(replay, ds, e, k))
            data.qpos[:] = frame.qpos
            mujoco.mj_forward(model, data)
            for view in replay.views:
                renderer = renderers[view.name]
                renderer.update_scene(data, camera=view.name)
                seg = renderer.render()
                mask = np.isin(seg[..., 0], geoms) & (seg[..., 1] == mujoco.mjtObj.mjOBJ_GEOM)
                if mask.sum() < 30:
                    continue  # Not in view (or barely).
                rot, pos = frame.camera_rot[view.name], frame.camera_pos[view.name]
                centre = rot.T @ (frame.body_pos[body] - pos)  # In the camera frame.
                u, v = project_usd(usd_camera(view), centre, view.size)
                rows, cols = np.nonzero(mask)
                assert mask[int(round(v)), int(round(u))], (view.name, e, k, (u, v))
                assert abs(u - cols.mean()) < 0.25 * (np.ptp(cols) + 2)
                assert abs(v - rows.mean()) < 0.25 * (np.ptp(rows) + 2)
                checked += 1
    for r in renderers.values():
        r.close()
    assert checked >= 30  # 45 of the 45 (frame, camera) pairs checked see the object.


def test_render_dataset_writes_verified_views_cancels_and_resumes(
    recorded_demos: Path, tmp_path: Path
) -> None:
    source = Dataset(recorded_demos)
    out = tmp_path / "rtx"
    request = RenderRequest(
        source=recorded_demos, out=out, image_size=64, episodes=(2, 0), lossless=True
    )
    cancel = Cancel()
    seen: list[Progress] = []

    def stop_midway(p: Progress) -> None:
        seen.append(p)
        if p.done >= source.episode(2)["length"] + 20:
            cancel.cancel()

    with pytest.raises(Cancelled):
        render_dataset(request, MujocoFrameRenderer, stop_midway, cancel)
    # The first episode was saved; the one in progress was discarded.
    assert Dataset(out).num_episodes == 1
    reports: list[Progress] = []
    result = render_dataset(request, MujocoFrameRenderer, reports.append)
    total = source.episode(2)["length"] + source.episode(0)["length"]
    assert (result.episodes, result.resumed, result.frames) == (2, 1, total)
    assert reports[0].done == source.episode(2)["length"] and reports[-1].done == total
    assert verify(out, decode=True).ok
    with pytest.raises(RequestError, match=r"other arguments \(episodes: \[2, 0\] -> \[0\]\)"):
        render_dataset(request.replace(episodes=(0,)), MujocoFrameRenderer)
    ds = Dataset(out)
    assert [c.name for c in ds.cameras] == ["head", "left_wrist", "right_wrist"]
    for new, old in ((0, 2), (1, 0)):
        a, b = ds.episode_arrays(new), source.episode_arrays(old)
        for key in (STATE_KEY, ACTION_KEY, ENV_STATE_KEY):
            np.testing.assert_array_equal(a[key], b[key])
        for field in ("object_ids", "belt_speed", "seed", "success", "tasks"):
            assert ds.episode(new)[field] == source.episode(old)[field]
    # A frame reads back as the replay renders it (lossless video).
    replay = StateReplay("nominal", size=64)
    backend = MujocoFrameRenderer(replay)
    try:
        k = 40
        views = replay.finish(backend.render(replay.frame(recorded_qpos(replay, source, 0, k))))
    finally:
        backend.close()
        replay.close()
    first = ds.episode(1)["dataset_from_index"] + k
    for name, img in views.items():
        np.testing.assert_array_equal(ds.image(f"observation.images.{name}", first), img)
        assert img.std() > 5  # Not a blank frame.


def test_render_dataset_refuses_states_it_cannot_replay(
    recorded_demos: Path, tmp_path: Path
) -> None:
    plain = tmp_path / "plain"
    cfg = DatasetCfg(cameras=())
    with DatasetWriter(plain, cfg) as writer:
        writer.add_frame({}, np.zeros(cfg.contract.state_dim), np.zeros(cfg.contract.action_dim))
        writer.save_episode("t", True)
    with pytest.raises(RequestError, match="records no observation.environment_state"):
        render_dataset(RenderRequest(source=plain, out=tmp_path / "a", image_size=32))
    with pytest.raises(RequestError, match=r"episodes \[7\] are not in"):
        render_dataset(
            RenderRequest(source=recorded_demos, out=tmp_path / "b", image_size=32, episodes=(7,))
        )


def test_usd_poser_puts_every_body_and_camera_at_its_frame_pose(
    replay: StateReplay, recorded_demos: Path
) -> None:
    """On a stage built like the exporter's (a prim per MuJoCo body, nested as the body tree,
    under a transformed root, in centimetres, with transforms of their own), each body prim
    and render camera lands at the frame's world pose, and the cameras carry the views'
    intrinsics; a stage missing a body is refused by name."""
    pytest.importorskip("pxr", reason="usd-core is in the dev extra")
    from pxr import Gf, Tf, Usd, UsdGeom

    from r2s2r.app.render_usd import CAMERA_ROOT, UsdPoser

    model = replay.model

    def build(skip: str | None = None) -> Usd.Stage:
        stage = Usd.Stage.CreateInMemory()
        UsdGeom.SetStageMetersPerUnit(stage, 0.01)
        root = UsdGeom.Xform.Define(stage, "/World")
        root.AddTranslateOp().Set(Gf.Vec3d(12.0, -3.0, 5.0))
        root.AddRotateZOp().Set(30.0)
        paths = {0: "/World"}
        for b in range(1, model.nbody):
            name = Tf.MakeValidIdentifier(model.body(b).name)
            paths[b] = f"{paths[int(model.body_parentid[b])]}/{name}"
            if model.body(b).name == skip:
                continue
            xf = UsdGeom.Xform.Define(stage, paths[b])
            xf.AddTranslateOp().Set(Gf.Vec3d(1.0, 2.0, 3.0))
        return stage

    stage = build()
    poser = UsdPoser(stage, replay)
    ds = Dataset(recorded_demos)
    frame = replay.frame(recorded_qpos(replay, ds, 1, 50))
    poser.pose(frame)
    cache = UsdGeom.XformCache()
    checked = 0
    for prim in stage.Traverse():
        name = prim.GetName()
        bodies = [
            b for b in range(1, model.nbody) if Tf.MakeValidIdentifier(model.body(b).name) == name
        ]
        if not bodies:
            continue
        b = bodies[0]
        m = np.array(cache.GetLocalToWorldTransform(prim))
        np.testing.assert_allclose(m[3, :3], frame.body_pos[b] / 0.01, atol=1e-6)
        rot = m[:3, :3].T  # Row-vector matrix -> rotation.
        np.testing.assert_allclose(rot @ rot.T, np.eye(3), atol=1e-9)
        want = np.zeros(9)
        mujoco.mju_quat2Mat(want, frame.body_quat[b])  # MuJoCo's own conversion.
        want = want.reshape(3, 3)
        np.testing.assert_allclose(rot, want, atol=1e-9)
        checked += 1
    assert checked == model.nbody - 1
    for view in replay.views:
        cam = UsdGeom.Camera(stage.GetPrimAtPath(f"{CAMERA_ROOT}/{view.name}"))
        m = np.array(cache.GetLocalToWorldTransform(cam.GetPrim()))
        np.testing.assert_allclose(m[3, :3], frame.camera_pos[view.name] / 0.01, atol=1e-6)
        np.testing.assert_allclose(m[:3, :3].T, frame.camera_rot[view.name], atol=1e-9)
        attrs = usd_camera(view, 0.01)
        assert cam.GetFocalLengthAttr().Get() == pytest.approx(attrs["focalLength"])
        assert cam.GetHorizontalApertureOffsetAttr().Get() == pytest.approx(
            attrs["horizontalApertureOffset"]
        )
    with pytest.raises(ValueError, match=r"no transformable prim for the MuJoCo bodies \['belt'\]"):
        UsdPoser(build(skip="belt"), replay)


def test_dataset_render_command_reports_its_throughput(
    recorded_demos: Path, tmp_path: Path
) -> None:
    import json

    from typer.testing import CliRunner

    from r2s2r.cli import app

    out = tmp_path / "cli"
    args = ["dataset", "render", str(recorded_demos), "--out", str(out), "--episodes", "0"]
    result = CliRunner().invoke(app, [*args, "--image-size", "32", "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.output)
    length = Dataset(recorded_demos).episode(0)["length"]
    assert summary["frames"] == summary["rendered_frames"] == length
    assert summary["episodes"] == 1 and summary["frames_per_s"] > 0
    assert Dataset(out).num_episodes == 1
    bad = CliRunner().invoke(app, [*args[:-1], "0,x"])
    assert bad.exit_code != 0 and "episode indices" in bad.output


def test_a_generated_episode_renders_at_its_instance_scale(tmp_path: Path) -> None:
    """A generated dataset's attempt log gives each kept episode's object scale: the replay
    draws the object at it (MuJoCo's geometry, ``SceneFrame.body_scale``, the USD prim)."""
    from r2s2r.app.generate import generate
    from r2s2r.app.render import generation_scales
    from r2s2r.behavior.generate import GenerateCfg

    src = tmp_path / "gen"
    cfg = GenerateCfg(
        source=None, out=src, episodes=1, behavior="planned", image_size=0, max_attempts=2
    )
    assert generate(cfg).kept == 1
    scales = generation_scales(src)
    (seed,) = scales
    scale = scales[seed]
    assert scale != 1.0  # The task draws object sizes.
    out = tmp_path / "views"
    seen: list[float] = []

    class Watch(MujocoFrameRenderer):
        def render(self, frame):  # type: ignore[no-untyped-def]
            body = self.model.body(f"obj:{obj}").id
            seen.append(float(frame.body_scale[body]))
            geom = self.model.geom(f"obj:{obj}").id
            spec = replay_spec_size[geom]
            np.testing.assert_allclose(self.model.geom_size[geom], spec * scale)
            return super().render(frame)

    ds = Dataset(src)
    obj = ds.episode(0)["object_ids"][0]
    probe = StateReplay("nominal", size=32)
    replay_spec_size = probe.model.geom_size.copy()
    probe.close()
    render_dataset(RenderRequest(source=src, out=out, image_size=32), Watch)
    assert seen and set(seen) == {scale}
    assert Dataset(out).num_episodes == 1
