"""What makes the twin's cell imperfect beyond its hidden WorldSpec: the part of a real cell
that no grounded simulation represents exactly.

The hidden world (``truth.py``) is the nominal model with other parameter values, which a
grounding stage can in principle recover. A real cell is more than that, and these are the
effects the twin adds, each drawn per twin seed and hidden with the rest of the truth:

- **Readings.** Arm encoder zero offsets (kinematic calibration), noise and quantization
  (joint positions, velocities), TCP pose noise (the controller's forward kinematics of its
  joint readings), hand joint noise, quantization
  and backlash (the hand's encoders sit before a geared, tendon-driven finger), timestamp
  jitter of a non-real-time control loop, and the occasional dropped camera frame.
- **Dynamics.** Joint friction (Coulomb and viscous) that the arm's torque controller does not
  cancel completely, a cable and mounting payload at each flange that the controller's
  gravity model leaves out, static friction in the hand's joints (hysteresis: a finger stops
  short of its target by friction over stiffness), belt speed ripple, and objects whose
  contact friction differs from the task's (the reference study shares object contact
  parameters between worlds, so this residual is one grounding is not asked to remove).
- **Optics.** A lens residual beyond the calibrated model (a thin-prism term, which neither the
  Kannala-Brandt fisheye nor the pinhole model has), slight defocus, and the compression
  artefacts of a USB camera's MJPEG stream (``truth.CameraEffects``).

Magnitudes are typical of a torque-controlled 7-DoF arm, a small tendon-driven hand and USB
cameras rather than taken from these devices' data sheets (none lists them); they are chosen
so that grounding's residuals land near the reference study's real-cell figures (held-out TCP
1.65 mm, fingertips 0.64 mm, calibration 0.85 px) rather than near zero. ``Imperfections.none()``
is the ideal twin (``TwinRig(ideal=True)``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import mujoco
import numpy as np

from r2s2r.sim.embodiment import Embodiment
from r2s2r.sim.scene import OBJECT_PREFIX


@dataclass(frozen=True)
class ReadingNoise:
    """Noise on what the arms, hands and cameras report (std devs; 0 turns a term off)."""

    # Per arm, per joint: the encoders' zero offsets (a real arm's kinematic calibration is
    # off by a few hundredths of a degree), so the joints and the TCP the controller reports
    # (its kinematics at those joints) are off by a pose-dependent amount.
    joint_offset_rad: tuple[tuple[float, ...], ...] = ()
    joint_rad: float = 0.0  # Arm joint position noise.
    joint_lsb_rad: float = 0.0  # Arm encoder quantization step.
    joint_vel: float = 0.0  # Arm joint velocity noise, rad/s.
    tcp_m: float = 0.0  # TCP position noise.
    tcp_rad: float = 0.0  # TCP orientation noise (rotation vector per axis).
    hand_rad: float = 0.0  # Hand joint position noise.
    hand_lsb_rad: float = 0.0  # Hand encoder quantization step.
    hand_backlash_rad: float = 0.0  # Backlash between a hand encoder and its joint (width).
    stamp_s: float = 0.0  # Jitter of the arms' and hands' reading timestamps.
    frame_drop: float = 0.0  # Probability that a camera delivers no new frame in a period.


@dataclass(frozen=True)
class Unmodelled:
    """Dynamics the grounded surrogate cannot represent exactly (0 or empty: none)."""

    arm_friction_nm: tuple[float, ...] = ()  # Coulomb friction per arm joint, N m.
    arm_viscous: tuple[float, ...] = ()  # Extra viscous damping per arm joint, N m s / rad.
    payload_kg: tuple[float, ...] = ()  # Per arm: cable and mounting mass at the flange.
    hand_friction_nm: float = 0.0  # Static friction in every hand joint, N m.
    belt_ripple: float = 0.0  # Belt speed ripple amplitude, a fraction of the speed.
    belt_ripple_hz: float = 1.0
    belt_ripple_phase: float = 0.0
    # Per object name: its true contact friction over the task's.
    object_friction: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Imperfections:
    """The twin's hidden imperfections (see the module docstring)."""

    readings: ReadingNoise = ReadingNoise()
    dynamics: Unmodelled = Unmodelled()

    @classmethod
    def none(cls) -> Imperfections:
        """The ideal twin: exact readings and the hidden world's dynamics only."""
        return cls()

    @property
    def ideal(self) -> bool:
        return self == Imperfections.none()

    @classmethod
    def draw(
        cls, rng: np.random.Generator, embodiment: Embodiment, objects: list[str]
    ) -> Imperfections:
        """Imperfections of one cell, drawn around typical magnitudes."""
        n = embodiment.arm_dof
        readings = ReadingNoise(
            joint_offset_rad=tuple(
                tuple(float(v) for v in rng.normal(0.0, np.radians(0.01), n))
                for _ in range(embodiment.num_arms)
            ),
            # A 19-bit absolute encoder behind the joint's gear: quantization 12 urad, noise
            # a few times that.
            joint_rad=float(rng.uniform(3e-5, 6e-5)),
            joint_lsb_rad=2 * np.pi / 2**19,
            joint_vel=float(rng.uniform(1e-3, 3e-3)),
            # The TCP the controller reports follows its noisy joints (a 0.7 m reach).
            tcp_m=float(rng.uniform(2e-5, 4e-5)),
            tcp_rad=float(rng.uniform(3e-5, 6e-5)),
            # A 12-bit magnetic encoder per hand joint, and a little gear backlash.
            hand_rad=float(rng.uniform(1e-3, 2e-3)),
            hand_lsb_rad=2 * np.pi / 2**12,
            hand_backlash_rad=float(rng.uniform(0.003, 0.006)),
            stamp_s=float(rng.uniform(2e-4, 5e-4)),
            frame_drop=float(rng.uniform(0.001, 0.004)),
        )
        dynamics = Unmodelled(
            # Residual friction after the torque controller's compensation: larger in the
            # big proximal joints.
            arm_friction_nm=tuple(
                float(v) for v in rng.uniform(0.2, 0.5, n) * np.linspace(1.0, 0.3, n)
            ),
            arm_viscous=tuple(float(v) for v in rng.uniform(0.05, 0.2, n)),
            payload_kg=tuple(float(v) for v in rng.uniform(0.05, 0.15, embodiment.num_arms)),
            hand_friction_nm=float(rng.uniform(0.0015, 0.003)),
            belt_ripple=float(rng.uniform(0.02, 0.04)),
            belt_ripple_hz=float(rng.uniform(0.5, 1.5)),
            belt_ripple_phase=float(rng.uniform(0.0, 2 * np.pi)),
            object_friction={name: float(rng.uniform(0.85, 1.15)) for name in objects},
        )
        return cls(readings, dynamics)

    # ------------------------------------------------------------------ the model
    def edit(self, spec: mujoco.MjSpec, embodiment: Embodiment) -> None:
        """Write the unmodelled dynamics into the twin's model spec before it compiles."""
        d = self.dynamics
        for a, side in enumerate(embodiment.sides):
            for k, name in enumerate(embodiment.arm_joint_names(side)):
                joint = spec.joint(name)
                if d.arm_friction_nm:
                    joint.frictionloss = joint.frictionloss + d.arm_friction_nm[k]
                if d.arm_viscous:
                    damping = np.array(joint.damping, dtype=float).reshape(-1)
                    damping[0] += d.arm_viscous[k]
                    joint.damping = damping if damping.size > 1 else float(damping[0])
            if d.payload_kg and d.payload_kg[a] > 0:
                # A body of its own: the flange's gravity compensation leaves it out.
                flange = spec.site(f"{side}_tcp").parent
                cable = flange.add_body(name=f"{side}_cable_payload", pos=[0.0, -0.04, 0.02])
                cable.add_geom(
                    name=f"{side}_cable_payload",
                    type=mujoco.mjtGeom.mjGEOM_SPHERE,
                    size=[0.01, 0.0, 0.0],
                    mass=d.payload_kg[a],
                    contype=0,
                    conaffinity=0,
                    rgba=[0.1, 0.1, 0.1, 0.0],
                )
            if d.hand_friction_nm:
                for name in embodiment.hand_joint_names(side):
                    joint = spec.joint(name)
                    joint.frictionloss = joint.frictionloss + d.hand_friction_nm
        for name, scale in d.object_friction.items():
            geom = spec.geom(f"{OBJECT_PREFIX}{name}")
            if geom is not None:
                friction = np.array(geom.friction, dtype=float)
                friction[0] *= scale
                geom.friction = friction

    def belt_factor(self, t: float) -> float:
        """The belt's true speed over its commanded one at time ``t``."""
        d = self.dynamics
        return 1.0 + d.belt_ripple * float(
            np.sin(2 * np.pi * d.belt_ripple_hz * t + d.belt_ripple_phase)
        )


class Backlash:
    """A play of ``width`` between a joint and its encoder: the reading follows the joint
    only once the joint has taken up the play in the direction it moves."""

    def __init__(self, width: float, start: np.ndarray) -> None:
        self.half = width / 2.0
        self.reading = np.array(start, dtype=float)

    def update(self, q: np.ndarray) -> np.ndarray:
        if self.half > 0:
            self.reading = np.clip(self.reading, q - self.half, q + self.half)
        else:
            self.reading = np.array(q, dtype=float)
        return self.reading


def quantize(values: np.ndarray, step: float) -> np.ndarray:
    return values if step <= 0 else np.round(values / step) * step
