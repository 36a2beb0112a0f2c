"""The twin's hidden truth: a WorldSpec that differs from the nominal (CAD) one the way a real
cell does, and the camera effects that make its images look like a camera's.

Sizes of the offsets follow the reference study (FACTS.md): wrist focal length about 10 %
off nominal with real fisheye distortion, the head camera about 30 mm / 1.7 degrees off, the
belt displaced about 24 / 18 mm and 14 mm lower in the CAD world than in reality, bins a
few millimetres from where they were drawn, a slower,
laggier arm controller, different hand actuators and different lighting.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import cv2
import numpy as np
from scipy.spatial.transform import Rotation

from r2s2r.spec import WorldSpec
from r2s2r.spec.world import CameraSpec, Pose


@dataclass(frozen=True)
class CameraEffects:
    """What a real camera does to light that a renderer does not (per camera, hidden).

    The optical terms after ``gamma`` are the imperfect twin's (``imperfect.py``; 0 turns
    each off, as in the ideal twin). Their sizes are in pixels of the camera's own
    resolution (``native_width``) and scale with the size an image is delivered at."""

    gain: float  # Exposure gain.
    white_balance: tuple[float, float, float]  # Per-channel gains (R, G, B).
    vignetting: float  # Brightness lost at the image corners (0..1).
    noise_std: float  # Sensor noise, in 8-bit levels.
    gamma: float
    # A thin-prism lens residual (no calibrated model has one): the image shifts by up to
    # this much at the corners, along ``prism_angle`` (radians).
    prism_px: float = 0.0
    prism_angle: float = 0.0
    defocus_px: float = 0.0  # Gaussian blur, std dev.
    jpeg_quality: int = 0  # MJPEG stream quality (1-100); 0: no compression.
    native_width: int = 0

    def apply(self, image: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Apply the effects to an (H, W, 3) uint8 render."""
        image = self._optics(image)
        gain = self._gain_map(image.shape[:2])
        lit = cv2.multiply(image, gain, dtype=cv2.CV_8U)
        lit = cv2.LUT(lit, self._gamma_lut())
        # OpenCV's Gaussian generator (a quarter of numpy's time at 256 x 256 x 3, most of
        # this call's), seeded from ``rng`` so that a twin's frames stay reproducible.
        noise = np.empty(image.shape, np.float32)
        cv2.setRNGSeed(int(rng.integers(2**31 - 1)))
        # One channel (a scalar mean and deviation fill only a multi-channel array's first).
        cv2.randn(noise.reshape(image.shape[0], -1), np.zeros(1), np.full(1, self.noise_std))
        out = cv2.add(lit, noise, dtype=cv2.CV_8U)
        if self.jpeg_quality:
            ok, data = cv2.imencode(".jpg", out, [cv2.IMWRITE_JPEG_QUALITY, self.jpeg_quality])
            decoded = cv2.imdecode(data, cv2.IMREAD_COLOR) if ok else None
            if decoded is not None:
                out = decoded
        return np.asarray(out)

    def _optics(self, image: np.ndarray) -> np.ndarray:
        if not (self.prism_px or self.defocus_px):
            return image
        h, w = image.shape[:2]
        scale = w / self.native_width if self.native_width else 1.0
        if self.prism_px:
            maps = self._prism_maps((h, w), scale)
            image = cv2.remap(image, *maps, cv2.INTER_LINEAR, borderMode=cv2.BORDER_REPLICATE)
        sigma = self.defocus_px * scale
        if sigma > 0.05:
            image = cv2.GaussianBlur(image, (0, 0), sigma)
        return image

    def _prism_maps(self, shape: tuple[int, int], scale: float) -> tuple[np.ndarray, np.ndarray]:
        """Source pixel coordinates (two (H, W) float32 maps) of the thin-prism shift: along
        the prism direction, growing with the squared distance from the image centre."""
        key = (self, shape)
        maps = _PRISM_CACHE.get(key)
        if maps is None:
            h, w = shape
            yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
            r2 = ((xx - (w - 1) / 2) / (w / 2)) ** 2 + ((yy - (h - 1) / 2) / (h / 2)) ** 2
            shift = self.prism_px * scale * r2 / 2.0  # r2 is 2 at the corners.
            map_x = xx + shift * np.float32(np.cos(self.prism_angle))
            map_y = yy + shift * np.float32(np.sin(self.prism_angle))
            maps = (map_x.astype(np.float32), map_y.astype(np.float32))
            _PRISM_CACHE[key] = maps
        return maps

    def _gain_map(self, shape: tuple[int, ...]) -> np.ndarray:
        """Exposure x white balance x vignetting per pixel (H, W, 3) float32, cached."""
        cache = _GAIN_CACHE.get((self, shape))
        if cache is None:
            h, w = shape
            yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
            r2 = ((xx - (w - 1) / 2) / (w / 2)) ** 2 + ((yy - (h - 1) / 2) / (h / 2)) ** 2
            falloff = 1.0 - self.vignetting * np.clip(r2 / 2.0, 0.0, 1.0)
            wb = np.asarray(self.white_balance, np.float32)
            cache = (self.gain * falloff[..., None] * wb).astype(np.float32)
            _GAIN_CACHE[(self, shape)] = cache
        return cache

    def _gamma_lut(self) -> np.ndarray:
        levels = np.arange(256, dtype=np.float64) / 255.0
        return np.clip(levels ** (1.0 / self.gamma) * 255.0 + 0.5, 0, 255).astype(np.uint8)


_GAIN_CACHE: dict[tuple[CameraEffects, tuple[int, ...]], np.ndarray] = {}
_PRISM_CACHE: dict[tuple[CameraEffects, tuple[int, int]], tuple[np.ndarray, np.ndarray]] = {}


def _signed(rng: np.random.Generator, lo: float, hi: float) -> float:
    return float(rng.uniform(lo, hi) * rng.choice([-1.0, 1.0]))


def _move_pose(pose: Pose, rng: np.random.Generator, dist_m: float, angle_deg: float) -> Pose:
    direction = rng.normal(size=3)
    direction /= np.linalg.norm(direction)
    axis = rng.normal(size=3)
    axis /= np.linalg.norm(axis)
    rot = Rotation.from_rotvec(axis * np.radians(angle_deg)) * Rotation.from_quat(
        pose.quat, scalar_first=True
    )
    return Pose.from_dict(
        {
            "pos": list(np.asarray(pose.pos) + dist_m * direction),
            "quat": list(rot.as_quat(scalar_first=True)),
        }
    )


def true_world(nominal: WorldSpec, rng: np.random.Generator, hand_dof: int) -> WorldSpec:
    """A hidden 'real' world drawn around ``nominal`` (whose hands have ``hand_dof`` joints)
    with realistic offsets."""
    cams: dict[str, CameraSpec] = {}
    for name, cam in nominal.cameras.items():
        dist: tuple[float, ...]
        if cam.model == "fisheye":
            scale = 1.0 + rng.uniform(0.08, 0.12)
            dist = (
                rng.uniform(-0.04, 0.04),
                rng.uniform(-0.01, 0.01),
                rng.uniform(-0.004, 0.004),
                rng.uniform(-0.001, 0.001),
            )
            pose = _move_pose(cam.pose, rng, rng.uniform(0.002, 0.006), rng.uniform(0.5, 1.5))
        else:
            scale = 1.0 + rng.uniform(-0.02, 0.02)
            dist = cam.dist
            pose = _move_pose(cam.pose, rng, rng.uniform(0.025, 0.035), rng.uniform(1.4, 2.0))
        cams[name] = cam.replace(
            fx=cam.fx * scale,
            fy=cam.fy * scale * (1.0 + rng.uniform(-0.003, 0.003)),
            cx=cam.cx + rng.uniform(-6.0, 6.0),
            cy=cam.cy + rng.uniform(-6.0, 6.0),
            dist=tuple(dist),
            pose=pose,
            motion_blur_s=rng.uniform(0.002, 0.006),
        )
    layout = nominal.layout
    belt = layout.belt.replace(
        pos=(
            layout.belt.pos[0] + _signed(rng, 0.020, 0.028),
            layout.belt.pos[1] + _signed(rng, 0.014, 0.022),
            layout.belt.pos[2] + rng.uniform(0.011, 0.017),
        )
    )
    # Bins stand where they were put down, a few millimetres from their drawing positions.
    bins = {
        name: b.replace(
            pos=(
                b.pos[0] + _signed(rng, 0.004, 0.012),
                b.pos[1] + _signed(rng, 0.004, 0.012),
                b.pos[2],
            )
        )
        for name, b in layout.bins.items()
    }
    ctl = nominal.controller
    controller = ctl.replace(
        kp_pos=ctl.kp_pos * rng.uniform(0.6, 0.85),
        kp_rot=ctl.kp_rot * rng.uniform(0.6, 0.85),
        damping_ratio=ctl.damping_ratio * rng.uniform(0.7, 1.3),
        delay_s=ctl.delay_s + rng.uniform(0.008, 0.02),
        max_lin_vel=ctl.max_lin_vel * rng.uniform(0.7, 0.9),
        max_lin_acc=ctl.max_lin_acc * rng.uniform(0.6, 0.9),
    )
    hand = nominal.hand
    hand_truth = hand.replace(
        kp=tuple(rng.uniform(0.7, 1.3, hand_dof) * hand.kp[0])
        if len(hand.kp) == 1
        else tuple(np.asarray(hand.kp) * rng.uniform(0.7, 1.3, hand_dof)),
        kv=tuple(np.resize(np.asarray(hand.kv), hand_dof) * rng.uniform(0.7, 1.5, hand_dof)),
    )
    light = nominal.lighting
    tint = rng.uniform(0.85, 1.0, 3)
    lighting = light.replace(
        rgb=tuple(tint / tint.max()),
        intensity=light.intensity * rng.uniform(0.75, 1.2),
        direction=tuple(np.asarray(light.direction) + rng.normal(0, 0.25, 3)),
    )
    return nominal.replace(
        name=f"{nominal.name}+twin_truth",
        cameras=cams,
        layout={"belt": belt, "bins": bins},
        controller=controller,
        hand=hand_truth,
        lighting=lighting,
        render={"shadows": True},
    )


def true_camera_effects(rng: np.random.Generator, names: list[str]) -> dict[str, CameraEffects]:
    """Hidden per-camera exposure, white balance, vignetting, noise and gamma."""
    return {
        name: CameraEffects(
            gain=float(rng.uniform(0.9, 1.25)),
            white_balance=(
                float(rng.uniform(0.9, 1.1)),
                float(rng.uniform(0.9, 1.1)),
                float(rng.uniform(0.9, 1.1)),
            ),
            vignetting=float(rng.uniform(0.15, 0.4)),
            noise_std=float(rng.uniform(1.5, 4.0)),
            gamma=float(rng.uniform(0.9, 1.15)),
        )
        for name in names
    }


def imperfect_optics(
    effects: dict[str, CameraEffects], world: WorldSpec, rng: np.random.Generator
) -> dict[str, CameraEffects]:
    """``effects`` with the imperfect twin's optics added: a lens residual of 0.2-0.5 px at
    the corners (what a calibrated lens model typically leaves), defocus of 0.3-0.6 px and
    MJPEG compression at quality 85-95, at each camera's own resolution."""
    out = {}
    for name, fx in effects.items():
        out[name] = dataclasses.replace(
            fx,
            prism_px=float(rng.uniform(0.2, 0.5)),
            prism_angle=float(rng.uniform(0.0, 2 * np.pi)),
            defocus_px=float(rng.uniform(0.3, 0.6)),
            jpeg_quality=int(rng.integers(85, 96)),
            native_width=world.cameras[name].width,
        )
    return out
