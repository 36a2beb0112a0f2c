"""Re-rendering a dataset's recorded states into a new dataset, as a service.

The reference study's split: physics in MuJoCo (Warp), images from Isaac Sim's RTX renderer.
A generated (or recorded) dataset holds, per frame, the arms' and hands' joint positions and
the presented object's pose; ``StateReplay`` poses the cell's MuJoCo model from them and
hands each frame to a ``FrameRenderer`` as a ``SceneFrame``: the full qpos, every body's
world pose and every camera's world pose, with ``CameraView`` saying how each camera is
rendered (size and ideal pinhole intrinsics, from the WorldSpec as ``r2s2r.sim.render``
plans them). A renderer returns those pinhole views; ``StateReplay.finish`` remaps the
fisheye cameras through their distortion model and applies exposure, and ``render_dataset``
writes the frames with the recorded states and actions through ``r2s2r.data``'s writer.

Two renderers sit behind the seam: ``MujocoFrameRenderer`` (MuJoCo's rasterizer, this
module) and the Isaac Sim one in ``tasks/render_isaac.py``, which writes the body and camera
poses into the cell's USD stage and reads RTX frames. Nothing here imports Kit.

An instance's object size is not in the dataset's frames: a generated dataset's attempt log
(``DIR/generation/attempts.jsonl``, the episode's ``seed`` is its attempt) gives each kept
episode's scale; other datasets' objects are drawn at their spec size (the twin presents them
so). What the dataset does not record is not reproduced: the belt's position is its speed
times the time, wrapped by a texture period as the cell does (the phase of its texture
differs), and the appearance is the model's own (not the randomized one generation drew).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import mujoco
import numpy as np

from r2s2r.app.jobs import Cancel, ProgressFn, RequestError, report
from r2s2r.data import CameraCfg, Dataset, DatasetCfg, DatasetWriter, VideoCfg
from r2s2r.data.config import ACTION_KEY, ENV_STATE_KEY, EPISODE_META_FIELDS, STATE_KEY
from r2s2r.sim.camera import FisheyeRemap, Intrinsics
from r2s2r.sim.env import PickSortEnv
from r2s2r.sim.physics import make_physics
from r2s2r.sim.render import plan_cameras
from r2s2r.sim.replay import StateRenderer
from r2s2r.sim.scene import OBJECT_PREFIX
from r2s2r.spec import Spec
from r2s2r.spec.base import PosInt
from r2s2r.spec.worlds import load_task, world_at

# The job's arguments, kept beside the dataset so that a rerun continues the same job.
JOB_FILE = "render/job.json"


class RenderRequest(Spec):
    """Which dataset to re-render, in which world's cameras, into which folder."""

    source: Path
    out: Path
    # The WorldSpec whose cameras (intrinsics, distortion, poses) and cell render the views.
    world: str | Path = "nominal"
    task: str | Path = "pick_sort"
    # Views, px (square, as the generator writes them).
    image_size: PosInt = 256
    # Source episodes to render (default: all), in this order.
    episodes: tuple[int, ...] | None = None
    lossless: bool = False


@dataclass(frozen=True)
class CameraView:
    """How one camera is rendered: an ideal pinhole image of ``pinhole``'s size, remapped to
    the camera's own model (``remap``) where it is a fisheye or distorted."""

    name: str
    pinhole: Intrinsics
    remap: FisheyeRemap | None
    exposure: float

    @property
    def size(self) -> tuple[int, int]:
        """(width, height) of the pinhole render."""
        return self.pinhole.width, self.pinhole.height


@dataclass(frozen=True)
class SceneFrame:
    """One instant of the cell: MuJoCo's qpos (nq,), every body's world pose (``body_pos``
    (nbody, 3), ``body_quat`` (nbody, 4) wxyz, in the order of ``StateReplay.body_names``) and
    every camera's (``camera_pos`` (3,), ``camera_rot`` (3, 3): columns are the camera's x
    right, y up and z backwards axes, MuJoCo's and USD's camera convention)."""

    qpos: np.ndarray
    body_pos: np.ndarray
    body_quat: np.ndarray
    camera_pos: dict[str, np.ndarray]
    camera_rot: dict[str, np.ndarray]
    # Every body's size factor (nbody,): 1 but for a scaled object.
    body_scale: np.ndarray


class FrameRenderer(Protocol):
    """Renders the cameras of ``StateReplay.views`` for one ``SceneFrame``."""

    def render(self, frame: SceneFrame) -> dict[str, np.ndarray]:
        """{camera: (height, width, 3) uint8} ideal pinhole views at each ``CameraView.size``."""
        ...

    def close(self) -> None: ...


RendererFactory = Callable[["StateReplay"], FrameRenderer]


class StateReplay:
    """The cell of ``world`` and how a dataset's recorded states pose it."""

    def __init__(
        self, world: str | Path = "nominal", task: str | Path = "pick_sort", size: int = 256
    ):
        spec = world_at(size, world)
        self.world = spec
        self._env = PickSortEnv(world=spec, task=load_task(task), images=False)
        self.model: mujoco.MjModel = self._env.model
        self.cell = self._env.cell
        self.contract = self._env.contract
        # Configures the model's cameras as MuJoCo renders them (MujocoFrameRenderer).
        plans = plan_cameras(self.model, spec)
        self.views = tuple(
            CameraView(p.name, p.pinhole, p.remap, p.exposure)
            for p in plans
            if p.pinhole is not None
        )
        self._plans = {p.name: p for p in plans}
        self.size = size
        self.body_names = tuple(self.model.body(i).name for i in range(self.model.nbody))
        self._cam_ids = {v.name: self.model.camera(v.name).id for v in self.views}
        self._object_names = [o.name for o in self.cell.objects]
        self._data = mujoco.MjData(self.model)
        self._scale = np.ones(self.model.nbody)

    def start_episode(self, obj: str, scale: float = 1.0) -> None:
        """Present ``obj`` at ``scale`` times its spec size (the model's geometry changes, so
        MuJoCo renders it so too; ``SceneFrame.body_scale`` carries it to other renderers)."""
        if obj not in self._object_names:
            raise RequestError(f"object {obj!r} is not in the task (it has {self._object_names})")
        slots = len(self.cell.spawn_time)
        self._env.reset(seed=0, options={"objects": [obj] * slots, "scales": np.full(slots, scale)})
        self._scale = np.ones(self.model.nbody)
        self._scale[self.model.body(f"{OBJECT_PREFIX}{obj}").id] = scale

    def qpos(
        self, state: np.ndarray, env_state: np.ndarray, obj: str, t: float, belt_speed: float
    ) -> np.ndarray:
        """The qpos (nq,) of one recorded frame: its proprio ``state`` (the contract's
        layout), the pose ``env_state`` (7,) of object ``obj``, the belt at ``t`` s."""
        if obj not in self._object_names:
            raise RequestError(f"object {obj!r} is not in the task (it has {self._object_names})")
        idx = self.cell.idx
        parts = self.contract.split_state(np.asarray(state, dtype=np.float64))
        qpos = self.cell.home_qpos
        qpos[idx.arm_qadr] = parts["arm_joints"]
        qpos[idx.hand_qadr] = parts["hand_joints"]
        adr = idx.obj_qadr[self._object_names.index(obj)]
        qpos[adr : adr + 7] = env_state
        half = self.world.layout.belt.texture_period / 2
        # The cell shifts the belt back by a period whenever it passes half of one.
        qpos[idx.belt_qadr] = (belt_speed * t + half) % (2 * half) - half
        return qpos

    def frame(self, qpos: np.ndarray) -> SceneFrame:
        """Body and camera poses of ``qpos`` (MuJoCo's forward kinematics)."""
        data = self._data
        data.qpos[:] = qpos
        mujoco.mj_kinematics(self.model, data)
        mujoco.mj_comPos(self.model, data)
        mujoco.mj_camlight(self.model, data)
        return SceneFrame(
            qpos=data.qpos.copy(),
            body_pos=data.xpos.copy(),
            body_quat=data.xquat.copy(),
            camera_pos={n: data.cam_xpos[i].copy() for n, i in self._cam_ids.items()},
            camera_rot={n: data.cam_xmat[i].reshape(3, 3).copy() for n, i in self._cam_ids.items()},
            body_scale=self._scale.copy(),
        )

    def finish(self, raw: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The pinhole renders ``raw`` as the cameras see them: remapped where a camera is a
        fisheye (or distorted), scaled by its exposure; (size, size, 3) uint8 each."""
        out = {}
        for view in self.views:
            if view.name not in raw:
                raise RuntimeError(f"the renderer returned no view of camera {view.name!r}")
            img = raw[view.name]
            w, h = view.size
            if img.shape != (h, w, 3) or img.dtype != np.uint8:
                raise RuntimeError(
                    f"camera {view.name!r}: expected a ({h}, {w}, 3) uint8 render, got "
                    f"{img.shape} {img.dtype}"
                )
            out[view.name] = self._plans[view.name].deliver(img)
        return out

    def close(self) -> None:
        self._env.close()


class MujocoFrameRenderer:
    """MuJoCo's rasterizer behind ``FrameRenderer``: each frame's qpos rendered in the replay's
    model, whose cameras ``StateReplay`` configured, by ``r2s2r.sim.replay.StateRenderer``."""

    def __init__(self, replay: StateReplay) -> None:
        self.model = replay.model
        self.views = replay.views
        # A physics of its own: the frame's qpos at rest, nothing else of the replay's episode.
        self._states = StateRenderer(make_physics("mujoco", self.model), replay.world)

    def render(self, frame: SceneFrame) -> dict[str, np.ndarray]:
        return self._states.pinhole(frame.qpos)

    def close(self) -> None:
        self._states.close()


@dataclass(frozen=True)
class RenderResult:
    out: Path
    episodes: int
    frames: int
    # Episodes already in ``out`` from an earlier, stopped run (not rendered again), and the
    # frames this run rendered.
    resumed: int
    rendered: int


def render_dataset(
    request: RenderRequest,
    renderer: RendererFactory = MujocoFrameRenderer,
    progress: ProgressFn | None = None,
    cancel: Cancel | None = None,
) -> RenderResult:
    """Render every requested episode of ``request.source`` from its recorded states into
    ``request.out`` (states, actions and object poses copied). Rerunning continues a stopped
    job; cancelling discards the episode in progress."""
    source = Dataset(request.source)
    replay = StateReplay(request.world, request.task, request.image_size)
    try:
        _check_source(source, replay, request.source)
        episodes = (
            list(request.episodes)
            if request.episodes is not None
            else list(range(source.num_episodes))
        )
        bad = [e for e in episodes if not 0 <= e < source.num_episodes]
        if bad:
            raise RequestError(
                f"episodes {bad} are not in {request.source} ({source.num_episodes} episodes)"
            )
        cfg = DatasetCfg(
            fps=source.fps,
            cameras=tuple(
                CameraCfg(name=v.name, height=request.image_size, width=request.image_size)
                for v in replay.views
            ),
            embodiment=source.contract.embodiment,
            action_mode=source.contract.action_mode,
            video=VideoCfg(lossless=request.lossless),
            env_state=True,
        )
        total = sum(int(source.episode(e)["length"]) for e in episodes)
        scales = generation_scales(request.source)
        frames = 0
        with DatasetWriter(request.out, cfg) as writer:
            _check_job(request, episodes)
            resumed = writer.num_episodes
            if resumed > len(episodes):
                raise RequestError(
                    f"{request.out} holds {resumed} episodes, more than the {len(episodes)} "
                    "requested: choose another --out"
                )
            frames = before = sum(int(source.episode(e)["length"]) for e in episodes[:resumed])
            report(progress, "render", frames, total)
            backend = renderer(replay)
            try:
                for e in episodes[resumed:]:
                    row = source.episode(e)
                    scale = scales.get(int(row["seed"])) if row.get("seed") is not None else None
                    frames = _render_episode(
                        source,
                        e,
                        replay,
                        backend,
                        writer,
                        frames,
                        total,
                        progress,
                        cancel,
                        scale or 1.0,
                    )
            finally:
                backend.close()
        return RenderResult(request.out, len(episodes), frames, resumed, frames - before)
    finally:
        replay.close()
        source.close()


def _check_job(request: RenderRequest, episodes: list[int]) -> None:
    """Refuse to continue a render job in ``out`` that was started with other arguments
    (its saved episodes would not be the ones asked for); record a new job's."""
    job = {
        "source": str(Path(request.source).resolve()),
        "world": str(request.world),
        "task": str(request.task),
        "image_size": request.image_size,
        "episodes": episodes,
    }
    path = Path(request.out) / JOB_FILE
    if path.is_file():
        before = json.loads(path.read_text())
        changed = sorted(k for k in job if before.get(k) != job[k])
        if changed:
            detail = ", ".join(f"{k}: {before.get(k)!r} -> {job[k]!r}" for k in changed)
            raise RequestError(
                f"{request.out} holds a render job started with other arguments ({detail}); "
                "continue it with the same ones or choose another --out"
            )
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(job, indent=2) + "\n")


def _check_source(source: Dataset, replay: StateReplay, path: Path) -> None:
    if ENV_STATE_KEY not in source.features:
        raise RequestError(
            f"{path} records no {ENV_STATE_KEY} (the object's pose): its states cannot be "
            "replayed (datasets from `r2s2r generate` and twin recordings have it)"
        )
    replay.contract.check_compatible(source.contract, f"dataset {path}", "the cell", "ignore")


def _render_episode(
    source: Dataset,
    e: int,
    replay: StateReplay,
    backend: FrameRenderer,
    writer: DatasetWriter,
    frames: int,
    total: int,
    progress: ProgressFn | None,
    cancel: Cancel | None,
    scale: float,
) -> int:
    row = source.episode(e)
    arrays = source.episode_arrays(e)
    objects = row.get("object_ids") or []
    if not objects:
        raise RequestError(f"{source.root}: episode {e} names no object (object_ids)")
    replay.start_episode(objects[0], scale)
    speed = float(row.get("belt_speed") or 0.0)
    try:
        for k, t in enumerate(arrays["timestamp"]):
            if cancel is not None:
                cancel.check("rendering")
            qpos = replay.qpos(
                arrays[STATE_KEY][k], arrays[ENV_STATE_KEY][k], objects[0], float(t), speed
            )
            views = replay.finish(backend.render(replay.frame(qpos)))
            writer.add_frame(
                views,
                arrays[STATE_KEY][k],
                arrays[ACTION_KEY][k],
                env_state=arrays[ENV_STATE_KEY][k],
            )
            frames += 1
            if frames % 10 == 0 or k == len(arrays["timestamp"]) - 1:
                report(progress, "render", frames, total, f"episode {e}")
    except BaseException:
        writer.discard_episode()
        raise
    meta: dict[str, Any] = {k: row[k] for k in EPISODE_META_FIELDS if row.get(k) is not None}
    writer.save_episode(row["tasks"][0], bool(row["success"]), meta)
    return frames


def generation_scales(root: Path) -> dict[int, float]:
    """{attempt: object scale} of the kept attempts in a generated dataset's attempt log
    (empty for a dataset without one)."""
    log = Path(root) / "generation" / "attempts.jsonl"
    if not log.is_file():
        return {}
    out = {}
    for line in log.read_text().splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue  # A line cut short by a crash.
        scale = (record.get("instance") or {}).get("scale")
        if record.get("kept") and scale is not None:
            out[int(record["attempt"])] = float(scale)
    return out


def usd_camera(view: CameraView, meters_per_unit: float = 1.0) -> dict[str, float]:
    """USD camera attributes (``UsdGeom.Camera``) for ``view``'s ideal pinhole: apertures
    and focal length in tenths of a scene unit (USD's convention), with the principal point
    as aperture offsets; the film is ``width`` by ``height`` pixels of one pixel pitch."""
    intr = view.pinhole
    # Any pitch gives the same projection; 1/1000 of a scene unit per pixel keeps the numbers
    # near those of a real sensor (a few mm).
    pitch = 1e-3 / meters_per_unit * 10.0
    return {
        "focalLength": intr.fx * pitch,
        "horizontalAperture": intr.width * pitch,
        # A non-square pixel (fy != fx) is a vertical aperture scaled by fx / fy.
        "verticalAperture": intr.height * pitch * intr.fx / intr.fy,
        "horizontalApertureOffset": (intr.width / 2 - intr.cx - 0.5) * pitch,
        "verticalApertureOffset": (intr.cy + 0.5 - intr.height / 2) * pitch * intr.fx / intr.fy,
    }


def usd_matrix(pos: np.ndarray, rot: np.ndarray, meters_per_unit: float = 1.0) -> np.ndarray:
    """The 4x4 USD transform (row vectors: ``[x y z 1] @ M``) of a pose in metres: rotation
    ``rot`` (3, 3), position ``pos`` (3,), in stage units."""
    m = np.eye(4)
    m[:3, :3] = np.asarray(rot).T
    m[3, :3] = np.asarray(pos) / meters_per_unit
    return m


def project_usd(
    attrs: dict[str, float], point_cam: np.ndarray, size: tuple[int, int]
) -> np.ndarray:
    """Pixel (u, v) of ``point_cam`` (in the camera frame: x right, y up, looking along -z)
    through USD camera ``attrs`` on a ``size`` (width, height) image, as USD's frustum
    (``GfCamera``: the aperture window, shifted by its offsets, at the focal length) maps
    it, pixel centres at integer coordinates."""
    x, y, z = point_cam
    f = attrs["focalLength"]
    ha, va = attrs["horizontalAperture"], attrs["verticalAperture"]
    ho, vo = attrs["horizontalApertureOffset"], attrs["verticalApertureOffset"]
    # Where the ray meets the film, in aperture units, relative to the window's lower left.
    fx_film, fy_film = f * x / -z, f * y / -z
    s = (fx_film - (ho - ha / 2)) / ha
    t = (fy_film - (vo - va / 2)) / va
    w, h = size
    return np.array([s * w - 0.5, (1 - t) * h - 0.5])
