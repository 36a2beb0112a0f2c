"""Motion blur from one render: each pixel averaged along its own image-space motion.

The reference blur (``SceneRenderer`` with ``blur="samples"``) renders a camera at the start
and the end of its shutter and averages the two. ``MotionFlow`` renders it once, at the end,
and finds where the surface seen at each pixel was at the shutter's start: a small pass of
geom ids and depths (a quarter of the render's size, no lighting, no shadows) gives each
pixel's surface point and the geom it lies on; that point moves with its geom's pose and is
seen from the camera's pose at the shutter's start. The render, displaced along that motion,
stands in for the earlier renders. It is exact to first order in the motion for every rigid
geom, a moving camera included (a wrist camera's own hand, which moves with it, stays sharp);
what it cannot show is what the motion uncovers (a pixel or two at a moving edge).
"""

from __future__ import annotations

import cv2
import mujoco
import numpy as np

from r2s2r.sim.camera import MJ_FROM_CV, Intrinsics

# The id-and-depth pass renders at this fraction of the camera's render size (the motion is
# smooth within a geom; at its edges the upsampled motion blends the two sides').
FLOW_SCALE = 0.25


class _IdDepthPass:
    """One small render of a camera giving, per pixel, the model geom it sees (-1 for none)
    and its depth along the optical axis (m), both read from the same frame."""

    def __init__(
        self,
        model: mujoco.MjModel,
        cam_id: int,
        width: int,
        height: int,
        option: mujoco.MjvOption | None = None,
    ) -> None:
        self.model, self.width, self.height = model, width, height
        self._gl = mujoco.GLContext(width, height)
        self._gl.make_current()
        self._con = mujoco.MjrContext(model, mujoco.mjtFontScale.mjFONTSCALE_150)
        mujoco.mjr_setBuffer(mujoco.mjtFramebuffer.mjFB_OFFSCREEN, self._con)
        self._con.readDepthMap = mujoco.mjtDepthMap.mjDEPTH_ZEROFAR
        self._scene = mujoco.MjvScene(model, maxgeom=10000)
        self._option = option if option is not None else mujoco.MjvOption()
        self._camera = mujoco.MjvCamera()
        self._camera.type = mujoco.mjtCamera.mjCAMERA_FIXED
        self._camera.fixedcamid = cam_id
        self._rect = mujoco.MjrRect(0, 0, width, height)
        self._rgb = np.empty((height, width, 3), np.uint8)
        self._depth = np.empty((height, width), np.float32)
        extent = model.stat.extent
        self._near = float(model.vis.map.znear * extent)
        self._far = float(model.vis.map.zfar * extent)

    def __call__(self, data: mujoco.MjData) -> tuple[np.ndarray, np.ndarray]:
        """(geom ids (h, w) int, depths (h, w) float64) of ``data``."""
        self._gl.make_current()
        scene = self._scene
        mujoco.mjv_updateScene(
            self.model,
            data,
            self._option,
            None,
            self._camera,
            mujoco.mjtCatBit.mjCAT_ALL,
            scene,
        )
        scene.flags[mujoco.mjtRndFlag.mjRND_SEGMENT] = True
        scene.flags[mujoco.mjtRndFlag.mjRND_IDCOLOR] = True
        mujoco.mjr_render(self._rect, scene, self._con)
        mujoco.mjr_readPixels(self._rgb, self._depth, self._rect, self._con)
        # The colour of a pixel is its scene geom's segid + 1 (0: nothing drawn there).
        rgb = self._rgb[::-1].astype(np.int64)
        segid = rgb[..., 0] + (rgb[..., 1] << 8) + (rgb[..., 2] << 16)
        lookup = np.full(scene.ngeom + 1, -1, np.int64)
        for geom in scene.geoms[: scene.ngeom]:
            if geom.segid >= 0 and geom.objtype == mujoco.mjtObj.mjOBJ_GEOM:
                lookup[geom.segid + 1] = geom.objid
        ids = lookup[np.clip(segid, 0, scene.ngeom)]
        # Reversed-Z perspective depth (1 at the near plane, 0 at the far one) to metres.
        n, f = self._near, self._far
        zbuf = self._depth[::-1].astype(np.float64)
        depth = n * f / (n + zbuf * (f - n))
        return ids, depth

    def close(self) -> None:
        self._con.free()
        self._gl.free()


class MotionFlow:
    """The image-space motion over the shutter of one camera's pinhole render, and the blur
    along it."""

    def __init__(
        self,
        model: mujoco.MjModel,
        cam_id: int,
        pinhole: Intrinsics,
        option: mujoco.MjvOption | None = None,
    ) -> None:
        """``option``: what the camera's render draws (geom and site groups), default all."""
        self.model, self.cam_id, self.pinhole = model, cam_id, pinhole
        self._option = option if option is not None else mujoco.MjvOption()
        self._near = float(model.vis.map.znear * model.stat.extent)
        w, h = pinhole.width, pinhole.height
        sw, sh = max(8, round(w * FLOW_SCALE)), max(8, round(h * FLOW_SCALE))
        self._pass = _IdDepthPass(model, cam_id, sw, sh, option)
        # Full-render pixel coordinates of the small pass's pixel centres (pixel-centre
        # convention: continuous coordinates scale linearly).
        us = (np.arange(sw, dtype=np.float64) + 0.5) * (w / sw) - 0.5
        vs = (np.arange(sh, dtype=np.float64) + 0.5) * (h / sh) - 0.5
        self._u, self._v = np.meshgrid(us, vs)
        # Unit-depth rays (sh, sw, 3) in the OpenCV camera frame.
        self._rays = np.stack(
            [
                (self._u - pinhole.cx) / pinhole.fx,
                (self._v - pinhole.cy) / pinhole.fy,
                np.ones_like(self._u),
            ],
            axis=-1,
        )
        grid_x, grid_y = np.meshgrid(np.arange(w, dtype=np.float32), np.arange(h, dtype=np.float32))
        self._grid = (grid_x, grid_y)

    def _motions(self, now: mujoco.MjData, start: mujoco.MjData) -> tuple[np.ndarray, np.ndarray]:
        """Each geom's rigid motion over the shutter as one map per geom from the camera frame
        now (OpenCV) to the camera frame at its start: x0 = a[g] x + b[g]."""
        cam = self.cam_id
        rot_now = now.cam_xmat[cam].reshape(3, 3) @ MJ_FROM_CV
        rot_start = start.cam_xmat[cam].reshape(3, 3) @ MJ_FROM_CV
        gmat = now.geom_xmat.reshape(-1, 3, 3)
        gmat0 = start.geom_xmat.reshape(-1, 3, 3)
        # World motion of each geom: w0 = R0 R^T (w - p) + p0 = M w + c.
        motion = gmat0 @ gmat.transpose(0, 2, 1)
        shift = start.geom_xpos - np.einsum("gij,gj->gi", motion, now.geom_xpos)
        a = rot_start.T @ motion @ rot_now
        # Row vectors: v @ R is R^T v.
        b = (motion @ now.cam_xpos[cam] + shift - start.cam_xpos[cam]) @ rot_start
        return a, b

    def largest_turn(self, now: mujoco.MjData, start: mujoco.MjData) -> float:
        """An upper bound (radians) on how far the direction from the camera to any point of a
        drawn geom turns between ``start`` and ``now``, found without a render. Times a view's
        pixels per radian (``camera.pixels_per_radian``) it bounds the blur's motion in that
        view's pixels.

        A point x (camera frame now) goes to a x + b (``_motions``), so it moves by at most
        spin |x| + |b|, spin = |a - I| = 2 sin(angle / 2) of the rotation a; or, about the
        centre c of its geom's bounding box (half-diagonal r), by at most |a c + b - c| +
        spin r. The direction to it turns by at most asin(move / |x|), and |x| is at least
        the distance from the camera to that box (a plane's: to its surface), never less than
        the near clipping plane."""
        model = self.model
        drawn = np.flatnonzero(
            (self._option.geomgroup[np.clip(model.geom_group, 0, 5)] != 0)
            & (model.geom_rgba[:, 3] > 0)
        )
        if len(drawn) == 0:
            return 0.0
        a, b = self._motions(now, start)
        a, b = a[drawn], b[drawn]
        cos = np.clip((np.trace(a, axis1=1, axis2=2) - 1.0) / 2.0, -1.0, 1.0)
        spin = 2.0 * np.sin(np.arccos(cos) / 2.0)
        rot = now.geom_xmat.reshape(-1, 3, 3)[drawn]
        box_c, half = model.geom_aabb[drawn, :3], model.geom_aabb[drawn, 3:]
        centre = now.geom_xpos[drawn] + np.einsum("gij,gj->gi", rot, box_c)
        cam_pos = now.cam_xpos[self.cam_id]
        # The camera in each box's frame, and its distance from the box.
        local = np.einsum("gji,gj->gi", rot, cam_pos - centre)
        dist = np.linalg.norm(np.maximum(np.abs(local) - half, 0.0), axis=1)
        plane = model.geom_type[drawn] == int(mujoco.mjtGeom.mjGEOM_PLANE)
        dist[plane] = np.abs(local[plane, 2])
        dist = np.maximum(dist, self._near)
        centre_cv = (centre - cam_pos) @ (now.cam_xmat[self.cam_id].reshape(3, 3) @ MJ_FROM_CV)
        moved = np.einsum("gij,gj->gi", a, centre_cv) + b - centre_cv
        about_camera = spin + np.linalg.norm(b, axis=1) / dist
        about_centre = (np.linalg.norm(moved, axis=1) + spin * np.linalg.norm(half, axis=1)) / dist
        ratio = np.where(plane, about_camera, np.minimum(about_camera, about_centre))
        return float(np.arcsin(min(float(ratio.max()), 1.0)))

    def flow(self, now: mujoco.MjData, start: mujoco.MjData) -> np.ndarray:
        """(H, W, 2) float32: where the surface seen at each render pixel at ``now`` was at
        ``start`` (both with kinematics computed), minus where it is now, in render pixels."""
        ids, depth = self._pass(now)
        on_geom = (ids >= 0) & (depth > 0)
        a, b = self._motions(now, start)
        g = np.where(on_geom, ids, 0)
        points = self._rays * depth[..., None]
        cam0 = np.einsum("...ij,...j->...i", a[g], points) + b[g]
        z0 = np.where(cam0[..., 2] > 1e-6, cam0[..., 2], 1.0)
        p = self.pinhole
        du = np.where(on_geom, p.fx * cam0[..., 0] / z0 + p.cx - self._u, 0.0)
        dv = np.where(on_geom, p.fy * cam0[..., 1] / z0 + p.cy - self._v, 0.0)
        small = np.stack([du, dv], axis=-1).astype(np.float32)
        return cv2.resize(small, (p.width, p.height), interpolation=cv2.INTER_LINEAR)

    def blur(self, image: np.ndarray, flow: np.ndarray, samples: int) -> np.ndarray:
        """The (H, W, 3) uint8 ``image`` averaged over ``samples`` instants from the shutter's
        start (displaced by all of ``flow``) to its end (the image itself)."""
        gx, gy = self._grid
        earlier = []
        for k in range(1, samples):
            # The surface seen at u at an earlier instant is, now, about at u - flow(u).
            frac = k / (samples - 1)
            earlier.append(
                cv2.remap(
                    image,
                    gx - frac * flow[..., 0],
                    gy - frac * flow[..., 1],
                    cv2.INTER_LINEAR,
                    borderMode=cv2.BORDER_REPLICATE,
                )
            )
        if len(earlier) == 1:
            return cv2.addWeighted(image, 0.5, earlier[0], 0.5, 0.0)
        acc = image.astype(np.float32) + sum(e.astype(np.float32) for e in earlier)
        return np.round(acc / samples).astype(np.uint8)

    def close(self) -> None:
        self._pass.close()
