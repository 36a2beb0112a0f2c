"""The twin's scripted operator as a policy, so that a person's behavior and a learned
policy run through the same loop (and the evaluation harness can be checked against the
operator's own success rate)."""

from __future__ import annotations

from typing import Any

import numpy as np

from r2s2r.policy.base import PolicyMetadata
from r2s2r.rig.teleop import TeleopMapper, TrackerCalibration
from r2s2r.rig.teleop.operator import ScriptedOperator, TwinEyes
from r2s2r.rig.twin import TwinRig
from r2s2r.runtime.episode import EpisodeStart
from r2s2r.sim.embodiment import Embodiment


class OperatorPolicy:
    """A ``ScriptedOperator`` wearing its glove, mapped to actions the way teleoperation maps
    a person's hand (``TeleopMapper``: calibration and retargeting), one action per period
    (horizon 1: it reacts to every period, as a person does). It reads the cell with its own
    eyes (``TwinEyes``), not the observation; ``begin`` tells it which object to sort."""

    def __init__(
        self, operator: ScriptedOperator, mapper: TeleopMapper, embodiment: Embodiment
    ) -> None:
        self.operator, self.mapper = operator, mapper
        self._metadata = PolicyMetadata(
            embodiment.name,
            "tcp",
            embodiment.action_dim("tcp"),
            1,
            50.0,
            state_dim=embodiment.state_dim,
        )

    @classmethod
    def for_twin(cls, twin: TwinRig, seed: int) -> OperatorPolicy:
        """The operator the twin's recordings use (``r2s2r record --rig twin``), seeded."""
        calibration = TrackerCalibration.twin()
        operator = ScriptedOperator(seed, TwinEyes(twin), twin.task, twin.nominal, calibration)
        emb = twin.embodiment
        mapper = TeleopMapper(calibration, emb.hand_dof, open_hand=emb.hand_open)
        return cls(operator, mapper, twin.embodiment)

    @property
    def metadata(self) -> PolicyMetadata:
        return self._metadata

    def reset(self) -> None:
        """Nothing to forget: ``begin`` starts each episode."""

    def begin(self, start: EpisodeStart) -> None:
        self.operator.begin(start.object_name, start.arm)
        self.mapper.begin(start.arm, start.tcp_poses)

    def infer(self, observation: dict[str, Any]) -> np.ndarray:
        """This period's action (1, action_dim); a frame the mapping rejects keeps the arm
        where it is and the hand at its last target."""
        tcp, q = self.mapper.map(self.operator.read())
        if q is None or not np.isfinite(tcp).all():
            side = self.mapper.active
            tcp = np.asarray(observation["tcp_pose"])[("left", "right").index(side)]
        return self.mapper.action(tcp)[None]
