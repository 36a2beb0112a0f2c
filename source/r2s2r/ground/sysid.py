"""System identification for world grounding: record excitations through a rig, fit the arm
controller and the hand actuators to them, and report held-out figures for the fitted and
the nominal models.

Typical use on a rig (twin or hardware)::

    sup = SafetySupervisor(rig.arms, rig.hands, rig.now, rig.embodiment)
    recs = record_sysid(sup, rig.step, SysIdCfg())
    recs.save("captures/sysid")
    report = identify(recs, nominal_world)
    grounded = report.world(nominal_world)

The fit sees only the recordings and the nominal WorldSpec.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from pydantic import Field, field_validator

from r2s2r.ground.sysid_arm import ARM_PARAMS, ArmFit, evaluate_arm, fit_arm
from r2s2r.ground.sysid_data import (
    ArmRecording,
    HandRecording,
    SysIdError,
    record_arms,
    record_hands,
)
from r2s2r.ground.sysid_excite import arm_excitation, hand_excitation
from r2s2r.ground.sysid_hand import HandFit, evaluate_hand, fit_hand
from r2s2r.rig.safety import SafetySupervisor
from r2s2r.spec import Spec, WorldSpec
from r2s2r.spec.base import NonNegInt, Pos, PosInt
from r2s2r.spec.world import ArmControllerSpec

__all__ = [
    "ARM_PARAMS",
    "ArmFit",
    "ArmRecording",
    "HandFit",
    "HandRecording",
    "SysIdCfg",
    "SysIdError",
    "SysIdRecordings",
    "SysIdReport",
    "arm_excitation",
    "evaluate_arm",
    "evaluate_hand",
    "fit_arm",
    "fit_hand",
    "hand_excitation",
    "identify",
    "record_arms",
    "record_hands",
    "record_sysid",
]


class SysIdCfg(Spec):
    """How much to record and how to fit (defaults follow the reference study)."""

    # Arm excitation for fitting and a separate held-out one (another seed), seconds.
    arm_train_s: Pos = 80.0
    arm_held_out_s: Pos = 15.0
    arm_seed: NonNegInt = 0
    # Hand episodes per hand; both hands play at once, so two hands give twice as many.
    hand_train_episodes: PosInt = 6
    hand_val_episodes: PosInt = 3
    hand_episode_s: Pos = 4.0
    hand_seed: NonNegInt = 0
    hz: Pos = 50.0
    # Arm fit: multiple-shooting windows, started every stride_s from recorded states.
    window_s: Pos = 1.0
    stride_s: Pos = 1.0
    arm_params: tuple[str, ...] = Field(default=ARM_PARAMS, min_length=1)
    arm_max_iter: PosInt = 20
    hand_max_iter: PosInt = 8

    @field_validator("arm_params")
    @classmethod
    def _known_params(cls, params: tuple[str, ...]) -> tuple[str, ...]:
        unknown = [p for p in params if p not in ArmControllerSpec.model_fields]
        if unknown:
            raise ValueError(f"{unknown} are not ArmControllerSpec fields (fit e.g. {ARM_PARAMS})")
        return params


DEFAULT_SYSID = SysIdCfg()
_SETS = ("arm_train", "arm_held_out", "hand_train", "hand_val")


@dataclass(frozen=True)
class SysIdRecordings:
    """Everything an identification fits to or is judged on, one recording per arm/hand."""

    arm_train: list[ArmRecording]
    arm_held_out: list[ArmRecording]
    hand_train: list[HandRecording]
    hand_val: list[HandRecording]

    def save(self, folder: str | Path) -> list[Path]:
        """Write ``<set>_<side>.parquet`` files into ``folder``."""
        folder = Path(folder)
        return [
            rec.save(folder / f"{name}_{rec.side}.parquet")
            for name in _SETS
            for rec in getattr(self, name)
        ]

    @classmethod
    def load(cls, folder: str | Path) -> SysIdRecordings:
        """Read the files ``save`` wrote; raises SysIdError naming what is missing."""
        folder = Path(folder)
        sets: dict[str, list] = {}
        for name in _SETS:
            files = sorted(folder.glob(f"{name}_*.parquet"))
            if not files:
                raise SysIdError(
                    f"{folder}: no {name}_<side>.parquet recordings; record them with record_sysid"
                )
            kind = ArmRecording if name.startswith("arm") else HandRecording
            sets[name] = [kind.load(f) for f in files]
        return cls(**sets)


def record_sysid(
    sup: SafetySupervisor,
    step: Callable[[], None],
    config: SysIdCfg = DEFAULT_SYSID,
    sides: Sequence[str] = ("left", "right"),
    progress: bool = True,
) -> SysIdRecordings:
    """Record the arm runs (training, then held-out) and the hand episodes (training, then
    validation) on the arms/hands ``sides`` of the supervisor, around the arms' current
    poses; ``step`` advances one control period."""
    c = config
    start = {s: sup.arm(s).state().tcp_pose for s in sides}

    def arm_run(duration: float, seed: int, kind: str) -> list[ArmRecording]:
        targets = {
            s: arm_excitation(start[s], duration, seed=seed + i, hz=c.hz, limits=sup.limits)
            for i, s in enumerate(sides)
        }
        meta = {"set": kind, "seed": seed, "duration_s": duration}
        return list(record_arms(sup, targets, step, c.hz, meta=meta, progress=progress).values())

    def hand_run(episodes: int, seed: int, kind: str) -> list[HandRecording]:
        eps = {
            s: hand_excitation(
                episodes, sup.hand_ranges, c.hand_episode_s, seed=seed + i, hz=c.hz, side=s
            )
            for i, s in enumerate(sides)
        }
        meta = {"set": kind, "seed": seed, "episode_s": c.hand_episode_s}
        return list(record_hands(sup, eps, step, c.hz, meta=meta, progress=progress).values())

    return SysIdRecordings(
        arm_train=arm_run(c.arm_train_s, c.arm_seed, "train"),
        arm_held_out=arm_run(c.arm_held_out_s, c.arm_seed + 1000, "held_out"),
        hand_train=hand_run(c.hand_train_episodes, c.hand_seed, "train"),
        hand_val=hand_run(c.hand_val_episodes, c.hand_seed + 1000, "validation"),
    )


@dataclass(frozen=True)
class SysIdReport:
    """Fitted arm controller and hand actuators with held-out / validation figures."""

    arm: ArmFit
    hand: HandFit
    fit_s: float

    def world(self, nominal: WorldSpec) -> WorldSpec:
        """``nominal`` with the fitted controller and hand actuators."""
        return nominal.replace(controller=self.arm.controller, hand=self.hand.hand)

    def summary(self) -> dict[str, float]:
        """The headline figures, fitted and nominal."""
        a, h = self.arm, self.hand
        return {
            "tcp_rms_mm": a.tcp_rms_mm,
            "tcp_rms_deg": a.tcp_rms_deg,
            "nominal_tcp_rms_mm": a.nominal_tcp_rms_mm,
            "nominal_tcp_rms_deg": a.nominal_tcp_rms_deg,
            "fingertip_rms_mm": h.fingertip_rms_mm,
            "nominal_fingertip_rms_mm": h.nominal_fingertip_rms_mm,
            "fit_s": self.fit_s,
        }


def identify(
    recordings: SysIdRecordings,
    nominal: WorldSpec,
    config: SysIdCfg = DEFAULT_SYSID,
    progress: bool = True,
) -> SysIdReport:
    """Fit the arm controller and hand actuators to the training recordings and judge both
    on the held-out / validation recordings against the nominal model."""
    start = time.perf_counter()
    controller = fit_arm(
        recordings.arm_train,
        nominal,
        params=config.arm_params,
        window_s=config.window_s,
        stride_s=config.stride_s,
        max_iter=config.arm_max_iter,
        progress=progress,
    )
    hand = fit_hand(
        recordings.hand_train, nominal, max_iter=config.hand_max_iter, progress=progress
    )
    return SysIdReport(
        arm=evaluate_arm(recordings.arm_held_out, nominal, controller),
        hand=evaluate_hand(recordings.hand_val, nominal, hand),
        fit_s=time.perf_counter() - start,
    )
