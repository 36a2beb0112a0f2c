"""How far an episode has got, read from the simulation's state: where the presented object
is, how near each hand is to it, which parts of each hand touch it, and whether it is over
the bin it belongs in. The evaluation's funnel (``r2s2r.eval.funnel``) judges its stages
from these readings; nothing here decides what counts as a stage.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import mujoco
import numpy as np

from r2s2r.sim.embodiment import Embodiment
from r2s2r.sim.physics import Physics
from r2s2r.sim.scene import OBJECT_PREFIX

# A finger's bodies, after the hand's prefix: "f1_link2" or "finger1_link2".
_FINGER = re.compile(r"f(?:inger)?(\d+)_")


@dataclass(frozen=True)
class ProgressReading:
    """One period's reading of the presented object and the hands."""

    # The object's centre in the cell frame (3,).
    object_pos: np.ndarray
    # Per arm side: the nearest of the hand's geom centres to the object's centre, metres.
    hand_distance_m: np.ndarray
    # Per arm side: how many distinct parts of the hand (palm, each finger) touch the object.
    touching: np.ndarray
    # The object's centre lies inside the footprint of the bin it belongs in.
    over_assigned_bin: bool


class ProgressProbe:
    """Reads ``ProgressReading``s of one world of a compiled cell: each hand's geoms (the
    bodies named ``<side>_hand_...``) grouped into parts (palm, fingers ``f1``...``f5``)."""

    def __init__(self, model: mujoco.MjModel, embodiment: Embodiment) -> None:
        self.model = model
        self.sides = embodiment.sides
        self._hand_geoms: list[np.ndarray] = []
        # Geom id -> (side index, part); -1 side for geoms of no hand.
        self._side_of = np.full(model.ngeom, -1)
        self._part_of = np.full(model.ngeom, -1)
        for s, side in enumerate(self.sides):
            prefix = f"{side}_hand_"
            geoms = []
            for g in range(model.ngeom):
                body = model.body(int(model.geom_bodyid[g])).name
                if not body.startswith(prefix):
                    continue
                # Finger bodies are named f<n>_... or finger<n>_...; every other hand body
                # is the palm.
                finger = _FINGER.match(body[len(prefix) :])
                part = int(finger.group(1)) if finger else 0
                geoms.append(g)
                self._side_of[g], self._part_of[g] = s, part
            if not geoms:
                raise ValueError(f"the cell has no geoms of bodies named {prefix!r}...")
            self._hand_geoms.append(np.array(geoms))

    def hand_parts(self, side: int) -> set[int]:
        """The parts the geoms of hand ``side`` (an index into ``sides``) belong to: 0 the
        palm, 1-5 the fingers."""
        return set(self._part_of[self._hand_geoms[side]].tolist())

    def object_geom(self, name: str) -> int:
        """The geom id of object ``name``."""
        return int(self.model.geom(f"{OBJECT_PREFIX}{name}").id)

    def read(
        self,
        physics: Physics,
        world: int,
        object_geom: int,
        object_pos: np.ndarray,
        bin_centre: np.ndarray,
        bin_inv_rot: np.ndarray,
        bin_half: np.ndarray,
    ) -> ProgressReading:
        """The reading of ``world`` for the object of geom ``object_geom`` at ``object_pos``
        (3,), whose bin has floor centre ``bin_centre`` (3,), world-to-bin rotation
        ``bin_inv_rot`` (3, 3) and half extents ``bin_half`` (3,)."""
        data = physics.mjdata(world)
        pos = np.asarray(object_pos, dtype=float)
        distance = np.array(
            [np.linalg.norm(data.geom_xpos[g] - pos, axis=1).min() for g in self._hand_geoms]
        )
        contacts = physics.contacts(world)
        touching = np.zeros(len(self.sides), dtype=int)
        g1, g2 = np.asarray(contacts.geom1), np.asarray(contacts.geom2)
        other = np.concatenate([g2[g1 == object_geom], g1[g2 == object_geom]])
        sides, parts = self._side_of[other], self._part_of[other]
        for s in range(len(self.sides)):
            touching[s] = len(set(parts[sides == s].tolist()))
        local = bin_inv_rot @ (pos - bin_centre)
        over = bool(abs(local[0]) < bin_half[0] and abs(local[1]) < bin_half[1] and local[2] > 0)
        return ProgressReading(pos.copy(), distance, touching, over)
