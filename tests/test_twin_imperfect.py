"""The twin is as imperfect as a real cell, and its ideal form is the cell it was before.

Each imperfection is checked by what it does to what the rest of the system sees: noisy and
quantized readings that stay put within a period, hand backlash, belt ripple, the flange
payload's sag, dropped frames, and the lens residual, defocus and compression of the views.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from r2s2r.rig.safety import SafetySupervisor
from r2s2r.rig.twin import TwinRig
from r2s2r.rig.twin.imperfect import Backlash, Imperfections, ReadingNoise, Unmodelled
from r2s2r.rig.twin.truth import CameraEffects
from r2s2r.rig.twin.views import TwinViewsCfg


def test_the_ideal_twin_is_the_same_hidden_world_without_the_imperfections() -> None:
    ideal, real = TwinRig(seed=4, ideal=True), TwinRig(seed=4)
    assert ideal.reveal_truth().world == real.reveal_truth().world
    assert ideal.reveal_truth().imperfections.ideal
    flaws = real.reveal_truth().imperfections
    assert not flaws.ideal and len(flaws.dynamics.arm_friction_nm) == 7
    fx = real.reveal_truth().camera_effects["left_wrist"]
    assert fx.prism_px > 0 and fx.jpeg_quality >= 85 and fx.native_width > 0
    assert ideal.reveal_truth().camera_effects["left_wrist"].prism_px == 0
    # The model carries the unmodelled dynamics; the ideal one does not.
    m, m0 = real.reveal_internals().cell.scene.model, ideal.reveal_internals().cell.scene.model
    dof, dof0 = m.joint("left_j1").dofadr[0], m0.joint("left_j1").dofadr[0]
    assert m.dof_frictionloss[dof] > 0 and m0.dof_frictionloss[dof0] == 0
    assert m.body("left_cable_payload").mass[0] == pytest.approx(flaws.dynamics.payload_kg[0])


def test_the_cell_is_drawn_apart_from_the_seed() -> None:
    # One hidden cell (truth, flaws, optics) hosts episodes of any seed, as a real cell does.
    own, hosted, other = TwinRig(seed=5), TwinRig(seed=1, cell=5), TwinRig(seed=1)
    assert hosted.cell == 5 and other.cell == 1
    assert hosted.reveal_truth() == own.reveal_truth()
    assert hosted.reveal_truth().world != other.reveal_truth().world


def test_readings_are_noisy_quantized_and_fixed_within_a_period() -> None:
    twin = TwinRig(seed=2)
    r = twin.reveal_truth().imperfections.readings
    arm, hand = twin.arms["left"], twin.hands["right"]
    first, again = arm.state(), arm.state()
    assert np.array_equal(first.q, again.q) and first.stamp == again.stamp
    qs, tcps, hands, stamps = [], [], [], []
    for _ in range(200):
        twin.step()
        s = arm.state()
        qs.append(s.q)
        tcps.append(s.tcp_pose[:3])
        hands.append(hand.state().q)
        stamps.append(s.stamp - twin.now())
    # The arms hold still at home: what varies is the reading.
    spread = np.std(np.diff(qs, axis=0), axis=0) / np.sqrt(2)
    assert np.median(spread) == pytest.approx(r.joint_rad, rel=0.35)
    tcp_spread = np.std(np.diff(tcps, axis=0), axis=0) / np.sqrt(2)
    assert np.median(tcp_spread) == pytest.approx(r.tcp_m, rel=0.35)
    steps = np.asarray(hands) / r.hand_lsb_rad
    np.testing.assert_allclose(steps, np.round(steps), atol=1e-6)
    assert np.std(stamps) == pytest.approx(r.stamp_s, rel=0.35)
    assert np.abs(stamps).max() < 0.005  # Inside the sysid clock check's quarter period.


def test_hand_backlash_lags_the_reading_on_each_reversal() -> None:
    play = Backlash(0.01, np.zeros(1))
    up = [play.update(np.array([x]))[0] for x in np.linspace(0.0, 0.1, 11)]
    down = [play.update(np.array([x]))[0] for x in np.linspace(0.1, 0.05, 6)]
    assert up[-1] == pytest.approx(0.095) and down[1] == pytest.approx(0.095)
    assert down[-1] == pytest.approx(0.055)
    # On the twin: the reading trails the joint by half the play in the way it moved.
    flaws = Imperfections(ReadingNoise(hand_backlash_rad=0.02), Unmodelled())
    twin = TwinRig(seed=1, imperfections=flaws)
    hand = twin.hands["left"]
    target = np.zeros(20)
    for k in range(60):
        target[5] = min(0.6, 0.02 * k)
        hand.send_joint_targets(target)
        twin.step()
    sim = twin.reveal_internals()
    true_q = sim.physics.state()[0][0, sim.cell.idx.hand_qadr[0]]
    assert hand.state().q[5] - true_q[5] == pytest.approx(-0.01, abs=1e-3)


def test_belt_ripple_and_the_payload_sag_are_physical() -> None:
    ripple = Imperfections(
        ReadingNoise(), Unmodelled(belt_ripple=0.05, belt_ripple_hz=2.0, payload_kg=(0.2, 0.2))
    )
    twin, ideal = TwinRig(seed=0, imperfections=ripple), TwinRig(seed=0, ideal=True)
    sim = twin.reveal_internals()
    belt = sim.cell.scene.model.joint("belt").dofadr[0]
    speeds = []
    for _ in range(100):
        twin.step()
        ideal.step()
        speeds.append(sim.physics.state()[1][0, belt])
    speeds = np.asarray(speeds[25:])
    nominal = twin.conveyor.speed()
    assert speeds.max() > nominal * 1.03 and speeds.min() < nominal * 0.97
    # 0.2 kg the controller does not know of pulls the TCP down by about m g / kp.
    sag = ideal.arms["left"].state().tcp_pose[2] - twin.arms["left"].state().tcp_pose[2]
    kp = twin.reveal_truth().world.controller.kp_pos
    assert sag == pytest.approx(0.2 * 9.81 / kp, rel=0.5)


def test_dropped_frames_repeat_the_last_one_without_stalling_the_supervisor() -> None:
    flaws = Imperfections(ReadingNoise(frame_drop=0.3), Unmodelled())
    # A frame every period (the reference views), so that a repeat is a drop.
    twin = TwinRig(seed=5, imperfections=flaws, views=TwinViewsCfg.reference())
    sup = SafetySupervisor(twin.arms, twin.hands, twin.now, twin.embodiment)  # type: ignore[arg-type]
    sup.watch_camera(twin.cameras["head"])
    stamps = []
    for _ in range(40):
        twin.step()
        sup.tick()
        stamps.append(twin.cameras["head"].read().stamp)
    repeats = sum(a == b for a, b in zip(stamps, stamps[1:], strict=False))
    assert 4 <= repeats <= 22
    assert not any(e.kind == "camera_stall" for e in sup.events)


def test_the_lens_residual_defocus_and_compression_change_the_view() -> None:
    plain = CameraEffects(1.0, (1.0, 1.0, 1.0), 0.0, 0.0, 1.0)
    image = np.zeros((200, 200, 3), np.uint8)
    image[5:9, 5:9] = 255  # A dot near a corner.
    image[98:102, 98:102] = 255  # And one at the centre.
    rng = np.random.default_rng(0)
    assert np.array_equal(plain.apply(image, rng), image)
    # 2 px at the corners of a 400 px camera is 1 px in this 200 px view, along +x.
    prism = dataclasses.replace(plain, prism_px=2.0, native_width=400)
    out = prism.apply(image, rng).astype(float)[..., 0]

    def centroid(img: np.ndarray, rows: slice, cols: slice) -> np.ndarray:
        patch = img[rows, cols]
        yy, xx = np.mgrid[rows, cols]
        return np.array([(xx * patch).sum(), (yy * patch).sum()]) / patch.sum()

    corner = centroid(out, slice(0, 20), slice(0, 20)) - [6.5, 6.5]
    centre = centroid(out, slice(90, 110), slice(90, 110)) - [99.5, 99.5]
    r2 = 2 * ((6.5 - 99.5) / 100) ** 2
    assert corner[0] == pytest.approx(-1.0 * r2 / 2, abs=0.15) and abs(corner[1]) < 0.05
    assert np.abs(centre).max() < 0.05
    blurred = dataclasses.replace(plain, defocus_px=1.0, native_width=200).apply(image, rng)
    assert blurred[7, 7, 0] < 255 and blurred[4, 7, 0] > 0
    # A camera-like view (smooth shading, one edge) comes back close but not equal.
    ramp = np.linspace(40, 200, 64, dtype=np.float32)
    scene = np.stack(
        [ramp[None, :].repeat(64, 0), ramp[:, None].repeat(64, 1), np.full((64, 64), 90.0)], -1
    )
    scene[20:40, 20:40] = (220, 30, 30)
    scene = scene.astype(np.uint8)
    error = np.abs(dataclasses.replace(plain, jpeg_quality=85).apply(scene, rng) - scene * 1.0)
    assert 0.1 < error.mean() < 4.0
