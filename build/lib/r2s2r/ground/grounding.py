"""The result of world grounding: the grounded world and everything that went into it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from r2s2r.ground.cameras import CameraGrounding
from r2s2r.ground.scene import SceneGrounding
from r2s2r.ground.sysid import SysIdReport
from r2s2r.spec import WorldSpec


@dataclass
class Grounding:
    """A grounded world and everything that went into it."""

    world: WorldSpec
    nominal: WorldSpec
    cameras: dict[str, CameraGrounding]
    scene: SceneGrounding
    sysid: SysIdReport
    # The same commands replayed in each sim against the rig: TCP and head-view differences.
    compare: dict[str, Any]
    seconds: float

    def summary(self) -> dict[str, Any]:
        """Every headline figure, grounded next to nominal (JSON-ready)."""
        reg = self.scene.registration
        objects = [o for f in self.scene.frames.values() for o in f.objects]
        return {
            "cameras": {name: g.summary() for name, g in self.cameras.items()},
            "belt": {
                "pos": [float(v) for v in reg.belt.pos],
                "yaw_deg": reg.belt.yaw_deg,
                "residual_mm": 1e3 * reg.belt.residual,
                "nominal_pos": list(self.nominal.layout.belt.pos),
            },
            "bins": {
                n: {"pos": [float(v) for v in b.pos], "residual_mm": 1e3 * b.residual}
                for n, b in reg.bins.items()
            },
            "objects": [
                {
                    "name": o.name,
                    "iou": o.iou,
                    "accepted": o.accepted,
                    "residual_mm": 1e3 * o.residual,
                }
                for o in objects
            ],
            **self.sysid.summary(),
            "image_diff": self.compare["grounded_image_diff"],
            "nominal_image_diff": self.compare["nominal_image_diff"],
            "replay_tcp_mm": self.compare["grounded_replay_tcp_mm"],
            "replay_tcp_deg": self.compare["grounded_replay_tcp_deg"],
            "nominal_replay_tcp_mm": self.compare["nominal_replay_tcp_mm"],
            "nominal_replay_tcp_deg": self.compare["nominal_replay_tcp_deg"],
            "seconds": self.seconds,
        }
