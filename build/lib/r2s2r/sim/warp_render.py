"""Batched rendering of every world's cameras with MuJoCo Warp's ray tracer.

``WarpSceneRenderer`` renders the three views of all ``WarpPhysics`` worlds in one call, from
the same ``CameraPlan`` list as the CPU ``SceneRenderer``: an ideal pinhole camera is traced
directly with MuJoCo's sensor-mode intrinsics, and a fisheye camera is traced as a wide
pinhole view and remapped on the device (``DeviceRemap``), so that only observation-size
images come back to the host.

MuJoCo Warp 4.0 facts this relies on (read from its source):

- ``create_render_context`` precomputes every camera's rays from the host ``MjModel``'s
  ``cam_fovy``, ``cam_sensorsize`` and ``cam_intrinsic`` with the same frustum rule as
  MuJoCo's rasterizer, so ``plan_cameras`` must have configured the host model first. The
  device model's camera fields are only read when rays are not precomputed; they are synced
  here anyway so that both agree.
- ``cam_res`` takes one (width, height) per active camera; each camera has its own slice of
  the packed output buffers.
- The render kernel reads ``geom_rgba``, ``mat_rgba``, ``mat_texrepeat`` and ``light_*`` with
  an optional leading world dimension, and ``camlight`` reads a batched ``light_dir``, so the
  per-world appearance is supported (``set_appearance``).
- ``render`` neither updates kinematics nor refits the scene BVH; ``_prepare`` does both.
"""

from __future__ import annotations

import mujoco
import numpy as np

from r2s2r.sim.appearance import Appearance
from r2s2r.sim.camera import FisheyeRemap
from r2s2r.sim.render import CameraPlan
from r2s2r.sim.warp_physics import WarpPhysics, mjw, wp

__all__ = ["DeviceRemap", "WarpSceneRenderer", "pack_rgb"]

# OpenCV's remap quantizes map coordinates to 1/32 px (INTER_TAB_SIZE); doing the same keeps
# the device remap within one intensity level of ``FisheyeRemap.__call__``.
_REMAP_SUBPIXELS = 32.0
# Camera and light modes that track a centre of mass and so need ``com_pos`` first.
_COM_MODES = (
    int(mujoco.mjtCamLight.mjCAMLIGHT_TRACKCOM),
    int(mujoco.mjtCamLight.mjCAMLIGHT_TARGETBODYCOM),
)


# Warp kernel code is typed by Warp, not by mypy; the kernels below carry ignores accordingly.
@wp.func
def _texel(
    rgb: wp.array2d[wp.uint32], world: int, adr: int, width: int, height: int, x: int, y: int
) -> wp.vec3:
    """Pixel (x, y) of a packed render as 0..255 floats; black outside the image."""
    if x < 0 or y < 0 or x >= width or y >= height:
        return wp.vec3(0.0, 0.0, 0.0)
    val = rgb[world, adr + y * width + x]  # type: ignore[index]
    r = float((val >> wp.uint32(16)) & wp.uint32(0xFF))
    g = float((val >> wp.uint32(8)) & wp.uint32(0xFF))
    b = float(val & wp.uint32(0xFF))
    return wp.vec3(r, g, b)


@wp.func
def _store(out: wp.array4d[wp.uint8], world: int, y: int, x: int, c: wp.vec3, gain: float):
    """Round ``c`` to 8 bits, apply the exposure gain (as ``cv2.convertScaleAbs``), store it.

    Bilinear sums of 1/32 px weights are exact in float32; rounding them half up reproduces
    OpenCV's fixed-point remap, and the gain is rounded half to even as OpenCV does.
    """
    for k in range(3):
        v = wp.floor(c[k] + 0.5)
        if gain != 1.0:
            v = wp.rint(v * gain)
        out[world, y, x, k] = wp.uint8(wp.clamp(v, 0.0, 255.0))  # type: ignore[index]


@wp.kernel
def _copy_rgb(rgb: wp.array2d[wp.uint32], adr: int, gain: float, out: wp.array4d[wp.uint8]):
    """Unpack one camera's render into ``out`` (N, H, W, 3)."""
    world, y, x = wp.tid()  # type: ignore[misc]
    w = out.shape[2]  # type: ignore[attr-defined]
    h = out.shape[1]  # type: ignore[attr-defined]
    _store(out, world, y, x, _texel(rgb, world, adr, w, h, x, y), gain)


@wp.kernel
def _remap_rgb(
    rgb: wp.array2d[wp.uint32],
    adr: int,
    wide_w: int,
    wide_h: int,
    map_x: wp.array2d[float],
    map_y: wp.array2d[float],
    valid: wp.array2d[wp.uint8],
    gain: float,
    out: wp.array4d[wp.uint8],
):
    """Bilinearly sample each world's wide render at the remap coordinates; black if invalid."""
    world, y, x = wp.tid()  # type: ignore[misc]
    c = wp.vec3(0.0, 0.0, 0.0)
    if valid[y, x] != wp.uint8(0):  # type: ignore[index]
        fx = map_x[y, x]  # type: ignore[index]
        fy = map_y[y, x]  # type: ignore[index]
        x0 = int(wp.floor(fx))
        y0 = int(wp.floor(fy))
        ax = fx - float(x0)
        ay = fy - float(y0)
        top = (1.0 - ax) * _texel(rgb, world, adr, wide_w, wide_h, x0, y0) + ax * _texel(
            rgb, world, adr, wide_w, wide_h, x0 + 1, y0
        )
        bottom = (1.0 - ax) * _texel(rgb, world, adr, wide_w, wide_h, x0, y0 + 1) + ax * _texel(
            rgb, world, adr, wide_w, wide_h, x0 + 1, y0 + 1
        )
        c = (1.0 - ay) * top + ay * bottom
    _store(out, world, y, x, c, gain)


@wp.kernel
def _remap_depth(
    depth: wp.array2d[float],
    adr: int,
    wide_w: int,
    wide_h: int,
    map_x: wp.array2d[float],
    map_y: wp.array2d[float],
    valid: wp.array2d[wp.uint8],
    use_map: int,
    out: wp.array3d[float],
):
    """Depth at each output pixel: directly, or the nearest wide pixel (0 where invalid)."""
    world, y, x = wp.tid()  # type: ignore[misc]
    sx = x
    sy = y
    ok = True
    if use_map != 0:
        sx = int(wp.floor(map_x[y, x] + 0.5))  # type: ignore[index]
        sy = int(wp.floor(map_y[y, x] + 0.5))  # type: ignore[index]
        ok = valid[y, x] != wp.uint8(0)  # type: ignore[index]
    ok = ok and sx >= 0 and sy >= 0 and sx < wide_w and sy < wide_h
    d = float(0.0)  # noqa: UP018 - Warp needs a variable, not a constant.
    if ok:
        d = depth[world, adr + sy * wide_w + sx]  # type: ignore[index]
    out[world, y, x] = d  # type: ignore[index]


def pack_rgb(images: np.ndarray) -> np.ndarray:
    """Pack (N, H, W, 3) uint8 images into MuJoCo Warp's (N, H*W) ARGB uint32 layout."""
    img = np.asarray(images, dtype=np.uint32)
    packed = (255 << 24) | (img[..., 0] << 16) | (img[..., 1] << 8) | img[..., 2]
    return packed.reshape(img.shape[0], -1).astype(np.uint32)


class DeviceRemap:
    """A ``FisheyeRemap``'s float maps on the device, applied to packed renders by a kernel."""

    def __init__(self, remap: FisheyeRemap, device: str) -> None:
        self.remap = remap
        self.device = device
        quant = _REMAP_SUBPIXELS
        map_x = np.round(remap.map_x.astype(np.float64) * quant) / quant
        map_y = np.round(remap.map_y.astype(np.float64) * quant) / quant
        self.map_x: wp.array = wp.array(map_x.astype(np.float32), dtype=float, device=device)
        self.map_y: wp.array = wp.array(map_y.astype(np.float32), dtype=float, device=device)
        self.valid: wp.array = wp.array(remap.valid.astype(np.uint8), dtype=wp.uint8, device=device)

    def rgb(self, packed: wp.array, adr: int, gain: float, out: wp.array) -> None:
        """Remap the wide renders at ``packed[:, adr:]`` into ``out`` (N, h, w, 3) uint8."""
        wide = self.remap.wide
        wp.launch(
            _remap_rgb,
            dim=out.shape[:3],
            inputs=[packed, adr, wide.width, wide.height, self.map_x, self.map_y, self.valid, gain],
            outputs=[out],
            device=self.device,
        )

    def __call__(self, wide_images: np.ndarray, gain: float = 1.0) -> np.ndarray:
        """Remap host wide images (N, H, W, 3) uint8 on the device (for tests and tools)."""
        n = wide_images.shape[0]
        packed: wp.array = wp.array(pack_rgb(wide_images), dtype=wp.uint32, device=self.device)
        h, w = self.remap.shape
        out = wp.zeros((n, h, w, 3), dtype=wp.uint8, device=self.device)
        self.rgb(packed, 0, gain, out)
        return out.numpy().copy()


class WarpSceneRenderer:
    """RGB views (and head depth) of all worlds of a ``WarpPhysics``, rendered in one batch
    (the ``mujoco_warp`` ``Renderer``).

    ``plans`` must come from ``plan_cameras(physics.model, world)``, which configures the
    host model's cameras that the render context reads. Images match the CPU
    ``SceneRenderer`` in geometry (same sizes, intrinsics and fisheye remap) but not pixel for
    pixel: this is a ray tracer with its own shading. Differences: its lighting does not
    saturate where the rasterizer's does (bright key lights render brighter), it draws no
    sites, and its depth is 0 (not the far plane) where a ray hits nothing. Motion blur is
    not supported. Per-world colours and lighting are set with ``set_appearance``.
    """

    def __init__(self, physics: WarpPhysics, plans: list[CameraPlan], depth: bool = False) -> None:
        for plan in plans:
            if plan.motion_blur_s > 0:
                raise NotImplementedError(
                    f"camera {plan.name!r} has motion_blur_s={plan.motion_blur_s}; the "
                    "mujoco_warp renderer does not support motion blur (use the 'mujoco' renderer)"
                )
        names = [p.name for p in plans]
        if depth and "head" not in names:
            raise ValueError("depth=True needs a 'head' camera plan")
        model = physics.model
        self.physics = physics
        self.plans = list(plans)
        self.depth = depth
        self.device = physics.device
        self._cpu = wp.get_device(self.device).is_cpu
        self._head = names.index("head") if "head" in names else -1
        modes = np.concatenate([model.cam_mode, model.light_mode])
        self._needs_com = bool(np.isin(modes, _COM_MODES).any())
        n = physics.num_worlds
        with wp.ScopedDevice(self.device):
            self._sync_cameras()
            self._rc = mjw.create_render_context(
                model,
                nworld=n,
                cam_res=[tuple(p.render_size) for p in plans],
                cam_active=[int(p.cam_id) for p in plans],
                render_rgb=True,
                render_depth=[depth and i == self._head for i in range(len(plans))],
                render_seg=False,
                use_shadows=bool(model.vis.quality.shadowsize > 0 and model.light_castshadow.any()),
            )
            self._rgb_adr = self._rc.rgb_adr.numpy().astype(int)
            self._depth_adr = self._rc.depth_adr.numpy().astype(int)
            self._remaps = {
                p.name: DeviceRemap(p.remap, self.device) for p in plans if p.remap is not None
            }
            self._out = {
                p.name: wp.zeros((n, *self._out_shape(p), 3), dtype=wp.uint8) for p in plans
            }
            self._depth_out: wp.array | None = None
            if depth:
                shape = self._out_shape(plans[self._head])
                self._depth_out = wp.zeros((n, *shape), dtype=float)

    @staticmethod
    def _out_shape(plan: CameraPlan) -> tuple[int, int]:
        """Output (height, width) of a camera."""
        if plan.remap is not None:
            return plan.remap.shape
        w, h = plan.render_size
        return h, w

    def _sync_cameras(self) -> None:
        """Copy the planned camera fields of the host model to the device model."""
        m = self.physics.device_model
        for field in ("cam_fovy", "cam_sensorsize", "cam_intrinsic"):
            current: wp.array = getattr(m, field)
            host = np.asarray(getattr(self.physics.model, field), dtype=np.float32)
            current.assign(
                np.ascontiguousarray(np.broadcast_to(host, current.shape + host.shape[1:]))
            )

    def _trace(self) -> None:
        """Bring poses up to the current state (a step leaves the pre-step ones) and render."""
        m, d = self.physics.device_model, self.physics.device_data
        with wp.ScopedDevice(self.device):
            mjw.kinematics(m, d)
            if self._needs_com:
                mjw.com_pos(m, d)
            mjw.camlight(m, d)
            mjw.refit_bvh(m, d, self._rc)
            mjw.render(m, d, self._rc)

    def _host(self, arr: wp.array) -> np.ndarray:
        """A host copy of ``arr`` that a later render does not overwrite."""
        out = arr.numpy()
        # On the CPU device ``numpy()`` is a view of the device buffer.
        return out.copy() if self._cpu else out

    def render(self) -> dict[str, np.ndarray]:
        """RGB views {camera name: (N, H, W, 3) uint8} of every world's current state."""
        self._trace()
        rgb = self._rc.rgb_data
        with wp.ScopedDevice(self.device):
            for i, plan in enumerate(self.plans):
                out, adr = self._out[plan.name], int(self._rgb_adr[i])
                remap = self._remaps.get(plan.name)
                if remap is None:
                    wp.launch(
                        _copy_rgb,
                        dim=out.shape[:3],
                        inputs=[rgb, adr, plan.exposure],
                        outputs=[out],
                    )
                else:
                    remap.rgb(rgb, adr, plan.exposure, out)
        return {plan.name: self._host(self._out[plan.name]) for plan in self.plans}

    def render_depth(self) -> np.ndarray:
        """Head depth (N, H, W) float32 in metres along the optical axis (renders again)."""
        if self._depth_out is None:
            raise RuntimeError("depth rendering was not requested (pass depth=True)")
        self._trace()
        plan = self.plans[self._head]
        remap = self._remaps.get(plan.name)
        w, h = plan.render_size
        maps: tuple[wp.array, wp.array, wp.array]
        if remap is None:
            empty = wp.zeros((1, 1), dtype=float, device=self.device)
            maps = (empty, empty, wp.zeros((1, 1), dtype=wp.uint8, device=self.device))
        else:
            maps = (remap.map_x, remap.map_y, remap.valid)
        wp.launch(
            _remap_depth,
            dim=self._depth_out.shape,
            inputs=[
                self._rc.depth_data,
                int(self._depth_adr[self._head]),
                w,
                h,
                *maps,
                int(remap is not None),
            ],
            outputs=[self._depth_out],
            device=self.device,
        )
        return self._host(self._depth_out)

    def set_appearance(self, appearance: Appearance) -> None:
        """Give every world its own lighting and colours from ``appearance`` (per world)."""
        n = self.physics.num_worlds
        if appearance.obj_rgba.shape[0] != n:
            raise ValueError(
                f"appearance has {appearance.obj_rgba.shape[0]} worlds, the renderer has {n}"
            )
        light, belt = [appearance.light_id], [appearance.belt_mat]
        fields: dict[str, tuple[list[int] | np.ndarray, np.ndarray]] = {
            "geom_rgba": (appearance.obj_geoms, appearance.obj_rgba),
            "mat_rgba": (belt, appearance.belt_rgba[:, None]),
            "mat_texrepeat": (belt, appearance.texrepeat[:, None]),
            "light_diffuse": (light, appearance.light_diffuse[:, None]),
            "light_dir": (light, appearance.light_dir[:, None]),
        }
        m = self.physics.device_model
        replaced = False
        for field, (rows, values) in fields.items():
            current: wp.array = getattr(m, field)
            base = current.numpy()
            full = np.array(np.broadcast_to(base, (n, *base.shape[1:])), dtype=np.float32)
            full[:, rows] = values
            if current.shape[0] == n:
                current.assign(full)
                continue
            arr: wp.array = wp.array(full, dtype=current.dtype, device=self.device)
            # Kernels index batched model fields with world % leading size; mark it as such.
            arr._is_batched = True  # type: ignore[attr-defined]
            setattr(m, field, arr)
            replaced = True
        if replaced:
            # CUDA graphs captured by the physics hold the replaced arrays; capture again.
            self.physics.model_arrays_replaced()

    def close(self) -> None:
        """Release the render context and device buffers."""
        self._out.clear()
        self._remaps.clear()
        self._depth_out = None
