"""Render the cell's three cameras as the WorldSpec describes them.

``Renderer`` is what every renderer offers: the views of every world of one physics backend.
``RENDERERS`` names them: ``mujoco`` (``SceneRenderer``: MuJoCo's rasterizer, one world at a
time from each world's CPU state, on any backend) and ``mujoco_warp`` (``WarpSceneRenderer``:
MuJoCo Warp's batched ray tracer, on the ``mujoco_warp`` backend only).

An ideal pinhole camera is rendered directly at the observation size, with MuJoCo's camera
intrinsics set from the (scaled) calibration. A fisheye or distorted camera is rendered as a
wide pinhole view and remapped through its Kannala–Brandt / OpenCV model (``camera.py``).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import cv2
import mujoco
import numpy as np

from r2s2r.sim.appearance import Appearance
from r2s2r.sim.blur import MotionFlow
from r2s2r.sim.camera import (
    FisheyeRemap,
    Intrinsics,
    WideRender,
    pixels_per_radian,
    plan_wide_render,
)
from r2s2r.sim.physics import Physics
from r2s2r.spec.registry import Registry
from r2s2r.spec.world import CAMERA_NAMES, WorldSpec

# Renders averaged over the shutter time of a camera with motion blur (the shutter's start
# and end; shutter times of a few milliseconds move the image by a pixel or two at most).
MOTION_BLUR_SAMPLES = 2
# How a camera with a shutter time is blurred: ``samples`` renders it at each sample time and
# averages (the reference); ``flow`` renders it once and averages that render displaced along
# each pixel's image-space motion over the shutter, which a small pass of geom ids and depths
# gives (``MotionFlow``).
BLUR_MODES = ("samples", "flow")
# Sensor size scale for MuJoCo's intrinsic camera mode: one pixel is this many length units.
_PIXEL = 1e-3


@dataclass
class CameraPlan:
    """How one camera is rendered: directly, or wide and remapped."""

    name: str
    cam_id: int
    render_size: tuple[int, int]  # (width, height) of the MuJoCo render
    remap: FisheyeRemap | None
    exposure: float
    motion_blur_s: float = 0.0
    # The ideal pinhole MuJoCo renders (the camera itself, or the wide view that is remapped).
    pinhole: Intrinsics | None = None

    def deliver(self, image: np.ndarray) -> np.ndarray:
        """MuJoCo's render ``image`` (render_size) as the camera delivers it: remapped through
        its model where it is a fisheye or distorted, scaled by its exposure."""
        if self.remap is not None:
            image = self.remap(image)
        if self.exposure != 1.0:
            image = cv2.convertScaleAbs(image, alpha=self.exposure)
        return image


@runtime_checkable
class Renderer(Protocol):
    """The cameras of every world of the physics it was built over, as the WorldSpec says."""

    def render(self) -> dict[str, np.ndarray]:
        """RGB views {camera name: (N, H, W, 3) uint8} of every world's current state."""
        ...

    def render_depth(self) -> np.ndarray:
        """Head depth (N, H, W) float32 in metres along the optical axis (needs ``depth``)."""
        ...

    def set_appearance(self, appearance: Appearance) -> None:
        """Render each world with its lighting and colours in ``appearance`` (its values now:
        call again after drawing new ones); without one, the model's own."""
        ...

    def close(self) -> None:
        """Release the renderer's contexts and buffers."""
        ...


class RendererFactory(Protocol):
    """Builds a renderer over ``physics`` for ``world``'s cameras, with head ``depth``, at the
    observation size or each camera's own resolution (``native``)."""

    def __call__(
        self, physics: Physics, world: WorldSpec, depth: bool, native: bool
    ) -> Renderer: ...


def set_pinhole_intrinsics(model: mujoco.MjModel, cam_id: int, intr: Intrinsics) -> None:
    """Make MuJoCo render camera ``cam_id`` with an ideal pinhole ``intr`` (any fx, fy, cx, cy).

    MuJoCo takes intrinsics in length units on a sensor; its principal offset is measured from
    the sensor centre with the opposite sign of OpenCV's pixel coordinates.
    """
    w, h = intr.width, intr.height
    model.cam_resolution[cam_id] = [w, h]
    model.cam_sensorsize[cam_id] = [w * _PIXEL, h * _PIXEL]
    model.cam_intrinsic[cam_id] = [
        intr.fx * _PIXEL,
        intr.fy * _PIXEL,
        (w / 2 - intr.cx - 0.5) * _PIXEL,
        (h / 2 - intr.cy - 0.5) * _PIXEL,
    ]


def set_wide_fov(model: mujoco.MjModel, cam_id: int, wide: WideRender) -> None:
    """Make MuJoCo render camera ``cam_id`` as the centred square-pixel ``wide`` view."""
    model.cam_sensorsize[cam_id] = [0.0, 0.0]
    model.cam_fovy[cam_id] = wide.fovy_deg


def plan_cameras(model: mujoco.MjModel, world: WorldSpec, native: bool = False) -> list[CameraPlan]:
    """Configure ``model``'s cameras for ``world`` and return how to render each one: at the
    observation size, or with ``native`` at each camera's own resolution (as its driver
    delivers it)."""
    plans = []
    for name in CAMERA_NAMES:
        cam = world.cameras[name]
        size = (cam.width, cam.height) if native else world.render.obs_size
        cam_id = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_CAMERA, name)
        intr = Intrinsics.from_spec(cam).scaled(*size)
        if intr.is_ideal_pinhole:
            set_pinhole_intrinsics(model, cam_id, intr)
            plans.append(
                CameraPlan(name, cam_id, size, None, cam.exposure, cam.motion_blur_s, intr)
            )
        else:
            wide = plan_wide_render(
                intr,
                max_fov_deg=world.render.fisheye_max_fov_deg,
                oversample=world.render.fisheye_oversample,
                max_size=min(model.vis.global_.offwidth, model.vis.global_.offheight),
            )
            set_wide_fov(model, cam_id, wide)
            plans.append(
                CameraPlan(
                    name,
                    cam_id,
                    (wide.width, wide.height),
                    FisheyeRemap(intr, wide),
                    cam.exposure,
                    cam.motion_blur_s,
                    wide.intrinsics(),
                )
            )
    return plans


def _make_renderer(model: mujoco.MjModel, width: int, height: int) -> mujoco.Renderer:
    try:
        return mujoco.Renderer(model, height=height, width=width)
    except mujoco.FatalError as err:
        raise RuntimeError(
            f"MuJoCo could not create an OpenGL context ({err}). On a machine without a "
            "display, set MUJOCO_GL=egl before anything imports mujoco (the r2s2r command "
            "does this), and install EGL (apt install libegl1 libgl1-mesa-dri)."
        ) from None


class SceneRenderer:
    """MuJoCo's rasterizer (``mujoco``): renders each world of ``physics`` from its CPU state
    (``Physics.mjdata``), RGB views and head depth, the way the WorldSpec says."""

    def __init__(
        self,
        physics: Physics,
        world: WorldSpec,
        depth: bool = False,
        native: bool = False,
        blur: str = "samples",
        sites: bool = True,
        cameras: tuple[str, ...] | None = None,
        still_px: float = 0.0,
    ) -> None:
        """``cameras``: the cameras it renders (default all); only theirs get contexts.
        ``still_px`` (``flow`` blur): leave a view unblurred when its motion over the shutter
        is bounded under that many pixels of the image it delivers (0: always blur)."""
        if blur not in BLUR_MODES:
            raise ValueError(f"blur must be one of {BLUR_MODES}, got {blur!r}")
        if not (np.isfinite(still_px) and still_px >= 0):
            raise ValueError(f"still_px must be a finite number >= 0, got {still_px!r}")
        unknown = sorted(set(cameras or ()) - set(CAMERA_NAMES))
        if unknown:
            raise ValueError(f"unknown cameras {unknown}; the cell's are {list(CAMERA_NAMES)}")
        model = physics.model
        self.physics = physics
        self.model = model
        self.blur, self.still_px = blur, float(still_px)
        # Pixels per radian of each camera's delivered image (``pixels_per_radian``).
        self._pixels_per_radian: dict[str, float] = {}
        # What is drawn: the model's visible geom groups, and its sites unless ``sites`` is
        # off (markers no real camera sees; each costs a draw in every pass).
        self.option = mujoco.MjvOption()
        if not sites:
            self.option.sitegroup[:] = 0
        plans = plan_cameras(model, world, native)
        self.plans = [p for p in plans if cameras is None or p.name in cameras]
        self._flows: dict[str, MotionFlow] = {}
        self._renderers: dict[tuple[int, int], mujoco.Renderer] = {}
        for plan in self.plans:
            w, h = plan.render_size
            if (w, h) not in self._renderers:
                self._renderers[(w, h)] = _make_renderer(model, w, h)
        self._depth: mujoco.Renderer | None = None
        self._depth_plan = plans[CAMERA_NAMES.index("head")]
        if depth:
            w, h = self._depth_plan.render_size
            self._depth = _make_renderer(model, w, h)
            self._depth.enable_depth_rendering()
        self._scratch: mujoco.MjData | None = None
        self._appearance: Appearance | None = None

    def render(self) -> dict[str, np.ndarray]:
        """RGB views {camera name: (N, H, W, 3) uint8} of every world's current state."""
        views = [self._render_data(self._world(w)) for w in range(self.physics.num_worlds)]
        if len(views) == 1:
            return {name: img[None] for name, img in views[0].items()}
        return {name: np.stack([v[name] for v in views]) for name in views[0]}

    def render_depth(self) -> np.ndarray:
        """Head depth (N, H, W) float32 in metres along the optical axis."""
        depths = [self._depth_data(self._world(w)) for w in range(self.physics.num_worlds)]
        return depths[0][None] if len(depths) == 1 else np.stack(depths)

    def set_appearance(self, appearance: Appearance) -> None:
        n = appearance.obj_rgba.shape[0]
        if n != self.physics.num_worlds:
            raise ValueError(
                f"appearance has {n} worlds, the renderer has {self.physics.num_worlds}"
            )
        self._appearance = copy.deepcopy(appearance)

    def _world(self, w: int) -> mujoco.MjData:
        """World ``w``'s state, its appearance written into the model to render it."""
        if self._appearance is not None:
            self._appearance.apply(self.model, w)
        return self.physics.mjdata(w)

    def render_raw(self, data: mujoco.MjData, plan: CameraPlan) -> np.ndarray:
        """The MuJoCo render of one camera of ``data``, before any remap."""
        renderer = self._renderers[plan.render_size]
        renderer.update_scene(data, camera=plan.cam_id, scene_option=self.option)
        return renderer.render()

    def render_cameras(
        self, data: mujoco.MjData, names: tuple[str, ...] | None = None
    ) -> dict[str, np.ndarray]:
        """RGB views {camera name: (H, W, 3) uint8} of ``data`` (kinematics computed, as
        ``Physics.mjdata`` gives it) for the cameras ``names`` (default all), at the planned
        sizes."""
        return self._render_data(data, names)

    def _render_data(
        self, data: mujoco.MjData, names: tuple[str, ...] | None = None
    ) -> dict[str, np.ndarray]:
        """RGB views {camera name: (H, W, 3) uint8} of ``data`` at the planned sizes."""
        out = {}
        for plan in self.plans:
            if names is not None and plan.name not in names:
                continue
            if plan.motion_blur_s > 0:
                img = self._blurred(data, plan)
            else:
                img = self.render_raw(data, plan)
            out[plan.name] = plan.deliver(img)
        return out

    def _blurred(self, data: mujoco.MjData, plan: CameraPlan) -> np.ndarray:
        """Average of renders over the shutter time before ``data``'s instant.

        The earlier states are the current one integrated back along the current velocity,
        which is exact for the constant velocities a camera sees within a few milliseconds.
        """
        model = self.model
        if self._scratch is None:
            self._scratch = mujoco.MjData(model)
        scratch = self._scratch
        acc = None
        # Mocap bodies (props the twin holds still) are where ``data`` has them.
        scratch.mocap_pos[:] = data.mocap_pos
        scratch.mocap_quat[:] = data.mocap_quat
        if self.blur == "flow":
            # One render now; the state at the shutter's start only moves the pixels.
            self._integrate_back(data, scratch, plan.motion_blur_s)
            flow = self._flow(plan)
            image = self.render_raw(data, plan)
            # Where nothing moves far enough to show: no id pass, no blur.
            if self.still_px > 0 and self._moves_less(data, scratch, plan, flow):
                return image
            return flow.blur(image, flow.flow(data, scratch), MOTION_BLUR_SAMPLES)
        for k in range(MOTION_BLUR_SAMPLES):
            back = plan.motion_blur_s * k / (MOTION_BLUR_SAMPLES - 1)
            self._integrate_back(data, scratch, back)
            img = self.render_raw(scratch, plan).astype(np.float32)
            acc = img if acc is None else acc + img
        assert acc is not None
        return np.round(acc / MOTION_BLUR_SAMPLES).astype(np.uint8)

    def _integrate_back(self, data: mujoco.MjData, scratch: mujoco.MjData, back_s: float) -> None:
        """``scratch`` becomes ``data``'s state ``back_s`` seconds earlier (along the current
        velocity), with its kinematics, cameras and lights computed."""
        model = self.model
        scratch.qpos[:] = data.qpos
        mujoco.mj_integratePos(model, scratch.qpos, data.qvel, -back_s)
        mujoco.mj_kinematics(model, scratch)
        mujoco.mj_comPos(model, scratch)
        mujoco.mj_camlight(model, scratch)

    def _moves_less(
        self, data: mujoco.MjData, start: mujoco.MjData, plan: CameraPlan, flow: MotionFlow
    ) -> bool:
        """Whether nothing drawn moves by ``still_px`` pixels of the delivered image between
        ``start`` and ``data`` (a bound, ``MotionFlow.largest_turn``)."""
        return flow.largest_turn(data, start) * self._per_radian(plan) < self.still_px

    def _per_radian(self, plan: CameraPlan) -> float:
        """The most pixels of ``plan``'s delivered image that a radian of motion spans."""
        value = self._pixels_per_radian.get(plan.name)
        if value is None:
            if plan.remap is None:
                assert plan.pinhole is not None
                value = pixels_per_radian(plan.pinhole)
            else:
                value = pixels_per_radian(plan.remap.intr_out, plan.remap.wide.max_fov_deg)
            self._pixels_per_radian[plan.name] = value
        return value

    def _flow(self, plan: CameraPlan) -> MotionFlow:
        flow = self._flows.get(plan.name)
        if flow is None:
            assert plan.pinhole is not None
            flow = self._flows[plan.name] = MotionFlow(
                self.model, plan.cam_id, plan.pinhole, self.option
            )
        return flow

    def _depth_data(self, data: mujoco.MjData) -> np.ndarray:
        """Head depth (H, W) float32 in metres along the optical axis of ``data``."""
        if self._depth is None:
            raise RuntimeError("depth rendering was not requested (pass depth=True)")
        plan = self._depth_plan
        self._depth.update_scene(data, camera=plan.cam_id, scene_option=self.option)
        depth = self._depth.render().astype(np.float32)
        if plan.remap is not None:
            depth = plan.remap.remap_depth(depth)
        return depth

    def close(self) -> None:
        for r in self._renderers.values():
            r.close()
        for flow in self._flows.values():
            flow.close()
        self._flows.clear()
        if self._depth is not None:
            self._depth.close()
        self._renderers.clear()
        self._depth = None


def _warp_renderer(physics: Physics, world: WorldSpec, depth: bool, native: bool) -> Renderer:
    # Imported on use: MuJoCo Warp is the optional 'warp' extra.
    from r2s2r.sim.warp_physics import warp_backend
    from r2s2r.sim.warp_render import WarpSceneRenderer

    plans = plan_cameras(physics.model, world, native)
    return WarpSceneRenderer(warp_backend(physics, "the mujoco_warp renderer"), plans, depth)


# The renderers by name.
RENDERERS: Registry[RendererFactory] = Registry("renderer")
RENDERERS.register("mujoco", SceneRenderer)
RENDERERS.register("mujoco_warp", _warp_renderer)


def make_renderer(
    name: str, physics: Physics, world: WorldSpec, depth: bool = False, native: bool = False
) -> Renderer:
    """The renderer ``name`` over ``physics`` (see ``RENDERERS``)."""
    return RENDERERS.get(name)(physics, world, depth, native)
