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
        # The drawn geoms (``_drawn``), for the groups and alphas they were found under.
        self._drawn_key: tuple[bytes, bytes] | None = None
        self._drawn_ids = np.zeros(0, np.int64)
        self._drawn_plane = np.zeros(0, bool)
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

    @staticmethod
    def _world_motion(
        now: mujoco.MjData, start: mujoco.MjData, ids: np.ndarray | slice = slice(None)
    ) -> tuple[np.ndarray, np.ndarray]:
        """The rotation M of each geom ``ids`` over the shutter in world coordinates, a point
        x (now) having been at M (x - p) + p0 (p: the geom's position), and its orientation
        now (both (G, 3, 3))."""
        rot = now.geom_xmat[ids].reshape(-1, 3, 3)
        return start.geom_xmat[ids].reshape(-1, 3, 3) @ rot.transpose(0, 2, 1), rot

    def _motions(self, now: mujoco.MjData, start: mujoco.MjData) -> tuple[np.ndarray, np.ndarray]:
        """Each geom's rigid motion over the shutter as one map per geom from the camera frame
        now (OpenCV) to the camera frame at its start: x0 = a[g] x + b[g]."""
        cam = self.cam_id
        rot_now = now.cam_xmat[cam].reshape(3, 3) @ MJ_FROM_CV
        rot_start = start.cam_xmat[cam].reshape(3, 3) @ MJ_FROM_CV
        # World motion of each geom: w0 = M (w - p) + p0 = M w + c.
        motion, _ = self._world_motion(now, start)
        shift = start.geom_xpos - np.einsum("gij,gj->gi", motion, now.geom_xpos)
        a = rot_start.T @ motion @ rot_now
        # Row vectors: v @ R is R^T v.
        b = (motion @ now.cam_xpos[cam] + shift - start.cam_xpos[cam]) @ rot_start
        return a, b

    def _drawn(self) -> np.ndarray:
        """Ids of the geoms the camera's render draws (visible group, not fully transparent);
        kept while the model's groups and alphas stay as they are."""
        model = self.model
        key = (model.geom_group.tobytes(), model.geom_rgba[:, 3].tobytes())
        if self._drawn_key != key:
            shown = self._option.geomgroup[np.clip(model.geom_group, 0, 5)] != 0
            self._drawn_ids = np.flatnonzero(shown & (model.geom_rgba[:, 3] > 0))
            plane = model.geom_type[self._drawn_ids] == int(mujoco.mjtGeom.mjGEOM_PLANE)
            self._drawn_plane = plane
            self._drawn_key = key
        return self._drawn_ids

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
        the near clipping plane.

        Computed in world coordinates, where the camera's rotations mostly cancel: with the
        geom's world rotation M over the shutter and the camera's orientations C (now) and
        C0 (at the start), trace(a) = sum(M * C0 C^T) and spin = sqrt(3 - trace(a)); |b| =
        |M (e - p) + p0 - e0| (e: the camera's position, p: the geom's, 0: at the start);
        the centre moves by |u - C0 C^T v| (u, v: the centre from the camera at the start
        and now)."""
        drawn = self._drawn()
        if len(drawn) == 0:
            return 0.0
        model, cam = self.model, self.cam_id
        motion, rot = self._world_motion(now, start, drawn)
        pos, pos0 = now.geom_xpos[drawn], start.geom_xpos[drawn]
        eye, eye0 = now.cam_xpos[cam], start.cam_xpos[cam]
        turn = start.cam_xmat[cam].reshape(3, 3) @ now.cam_xmat[cam].reshape(3, 3).T
        spin = np.sqrt(np.clip(3.0 - np.einsum("gij,ij->g", motion, turn), 0.0, 4.0))
        aabb = model.geom_aabb[drawn]
        half = aabb[:, 3:]
        offset = np.einsum("gij,gj->gi", rot, aabb[:, :3])  # The box centre from the geom's origin.
        from_eye = pos + offset - eye  # The box centre from the camera, now.
        # M (x - p) + p0 - e0 for the box centre (u) and the camera's own position (b).
        moved = np.einsum("gij,gjk->gik", motion, np.stack([offset, eye - pos], axis=-1))
        moved += (pos0 - eye0)[..., None]
        b = moved[..., 1]
        u = moved[..., 0] - from_eye @ turn.T
        # The camera in each box's frame, and its distance from the box.
        local = np.abs(np.einsum("gji,gj->gi", rot, from_eye))
        out = np.maximum(local - half, 0.0)
        dist = np.sqrt(np.einsum("gi,gi->g", out, out))
        plane = self._drawn_plane
        dist[plane] = local[plane, 2]
        dist = np.maximum(dist, self._near)
        about_camera = spin + np.sqrt(np.einsum("gi,gi->g", b, b)) / dist
        radius = np.sqrt(np.einsum("gi,gi->g", half, half))
        about_centre = (np.sqrt(np.einsum("gi,gi->g", u, u)) + spin * radius) / dist
        about_centre[plane] = np.inf
        ratio = float(np.minimum(about_camera, about_centre).max())
        return float(np.arcsin(min(ratio, 1.0)))

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
