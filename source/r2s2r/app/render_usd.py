"""Posing the cell's USD stage from replayed frames (``r2s2r.app.render``), with USD's own
API (``pxr``, from ``usd-core`` or Isaac Sim) and nothing of Kit.

``UsdPoser`` finds the prim of every MuJoCo body in a stage (by name, as the USD exporter
names them: ``Tf.MakeValidIdentifier`` of the body name, e.g. ``obj:white_puck`` ->
``obj_white_puck``; or from an explicit map), adds one camera prim per camera with the
WorldSpec's pinhole intrinsics (``usd_camera``), and writes each frame's body and camera poses
as transform ops, parents before children, so a prim under another body's prim lands at its
world pose. ``tasks/render_isaac.py`` runs it on Isaac Sim's open stage and renders with RTX.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from r2s2r.app.render import SceneFrame, StateReplay, usd_camera, usd_matrix
from r2s2r.geometry.rotations import quat_to_mat

# Where the render cameras go in the stage.
CAMERA_ROOT = "/R2S2R_Render"
USD_HINT = "USD's Python API (pxr) is missing: pip install usd-core (or run inside Isaac Sim)"


def _pxr() -> Any:
    try:
        import pxr
        from pxr import Gf, Tf, Usd, UsdGeom  # noqa: F401
    except ImportError as err:
        raise RuntimeError(f"{USD_HINT} ({err})") from None
    return pxr


class UsdPoser:
    """Writes replayed frames into ``stage`` (a ``pxr.Usd.Stage``)."""

    def __init__(
        self, stage: Any, replay: StateReplay, prims: Mapping[str, str] | None = None
    ) -> None:
        pxr = _pxr()
        self._gf, usd, geom = pxr.Gf, pxr.Usd, pxr.UsdGeom
        self.stage = stage
        self.mpu = float(geom.GetStageMetersPerUnit(stage))
        by_name: dict[str, Any] = {}
        for prim in stage.Traverse():
            by_name.setdefault(prim.GetName(), prim)
        bodies, missing = [], []
        for i, name in enumerate(replay.body_names):
            if i == 0:
                continue  # MuJoCo's world body.
            path = (prims or {}).get(name)
            prim = (
                stage.GetPrimAtPath(path) if path else by_name.get(pxr.Tf.MakeValidIdentifier(name))
            )
            if prim is None or not prim.IsValid() or not prim.IsA(geom.Xformable):
                missing.append(name)
                continue
            bodies.append((i, geom.Xformable(prim)))
        if missing:
            raise ValueError(
                f"the stage has no transformable prim for the MuJoCo bodies {missing} (looked "
                "up by name, ':' as '_'; pass a body -> prim path map for other names)"
            )
        # Parents before children: a prim's world pose needs its parent's, written first.
        bodies.sort(key=lambda b: b[1].GetPath().pathElementCount)
        self._bodies = [(i, xf, self._single_op(xf)) for i, xf in bodies]
        self._time = usd.TimeCode.Default()
        geom.Scope.Define(stage, CAMERA_ROOT)
        self.cameras: dict[str, Any] = {}
        self._camera_ops: dict[str, Any] = {}
        for view in replay.views:
            cam = geom.Camera.Define(stage, f"{CAMERA_ROOT}/{view.name}")
            for attr, value in usd_camera(view, self.mpu).items():
                cam.GetPrim().GetAttribute(attr).Set(float(value))
            cam.GetClippingRangeAttr().Set(pxr.Gf.Vec2f(0.01 / self.mpu, 50.0 / self.mpu))
            cam.GetProjectionAttr().Set(geom.Tokens.perspective)
            self.cameras[view.name] = cam
            self._camera_ops[view.name] = self._single_op(cam)

    @staticmethod
    def _single_op(xf: Any) -> Any:
        """The prim's transform as one matrix op (replacing whatever ops it had)."""
        xf.ClearXformOpOrder()
        return xf.AddTransformOp()

    def pose(self, frame: SceneFrame) -> None:
        """Every body prim and camera at its pose in ``frame``."""
        gf = self._gf
        for i, xf, op in self._bodies:
            # A scaled object's prim scales with it (its geometry lies below it).
            rot = quat_to_mat(frame.body_quat[i]) * frame.body_scale[i]
            world = gf.Matrix4d(usd_matrix(frame.body_pos[i], rot, self.mpu).tolist())
            parent = xf.ComputeParentToWorldTransform(self._time)
            op.Set(world * parent.GetInverse())
        for name, op in self._camera_ops.items():
            m = usd_matrix(frame.camera_pos[name], frame.camera_rot[name], self.mpu)
            op.Set(gf.Matrix4d(m.tolist()))

    def world_pose(self, prim_path: str) -> np.ndarray:
        """A prim's 4x4 local-to-world transform (row vectors, stage units), as USD computes it."""
        from pxr import Usd, UsdGeom

        xf = UsdGeom.Xformable(self.stage.GetPrimAtPath(prim_path))
        return np.array(xf.ComputeLocalToWorldTransform(Usd.TimeCode.Default()))
