"""The twin rig behind the rig interfaces, its hidden truth, and the safety supervisor with
faults injected."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from scipy.spatial.transform import Rotation

from r2s2r.rig import interfaces
from r2s2r.rig.hardware import HardwareRig
from r2s2r.rig.hardware.drivers.manual import ManualConveyor, OperatorPresenter
from r2s2r.rig.interfaces import Frame, Rig
from r2s2r.rig.safety import SafetyLimits, SafetySupervisor
from r2s2r.rig.twin import TwinCfg, TwinRig
from r2s2r.sim.camera import Intrinsics
from r2s2r.spec import SpecError


@pytest.fixture(scope="module")
def rig() -> TwinRig:
    return TwinRig(seed=3)


def test_twin_implements_the_interfaces(rig: TwinRig) -> None:
    assert isinstance(rig.arms["left"], interfaces.Arm)
    assert isinstance(rig.hands["right"], interfaces.Hand)
    assert isinstance(rig.cameras["head"], interfaces.DepthCamera)
    assert isinstance(rig.conveyor, interfaces.Conveyor)
    assert isinstance(rig.presenter, interfaces.ObjectPresenter)
    frame = rig.cameras["left_wrist"].read()
    assert frame.image.shape == (256, 256, 3) and frame.image.dtype == np.uint8
    assert rig.cameras["head"].read_depth().image.dtype == np.float32
    with pytest.raises(ValueError, match="only the head camera"):
        rig.cameras["left_wrist"].read_depth()


def test_twin_is_built_from_its_config() -> None:
    """``TwinRig.from_cfg`` builds the twin its ``TwinCfg`` describes, the same one as the
    config's fields as keywords; the config is checked like every spec."""
    cfg = TwinCfg(seed=4, cell=2, condition="fast_belt", ideal=True)
    built = TwinRig.from_cfg(cfg)
    keywords = TwinRig(seed=4, cell=2, condition="fast_belt", ideal=True)
    for twin in (built, keywords):
        twin.step(3)
    assert built.cfg == keywords.cfg == cfg and built.cell == 2
    assert repr(built.reveal_truth()) == repr(keywords.reveal_truth())
    np.testing.assert_array_equal(built.arms["left"].state().q, keywords.arms["left"].state().q)
    assert cfg.replace(cell=None).cell_seed == 4
    with pytest.raises(SpecError, match="sed: unknown key"):
        TwinCfg.from_dict({"sed": 3})
    with pytest.raises(ValueError, match="seed"):
        TwinCfg(seed=-1)


def test_both_rigs_are_rigs(rig: TwinRig) -> None:
    """The twin and the real cell (here without devices, its operator answering "mug")
    implement the ``Rig`` protocol; mypy checks the same through ``r2s2r.rig.kinds``,
    whose registry opens either as a ``Rig``."""
    prompt = lambda question: "mug"  # noqa: E731
    presenter = OperatorPresenter(["mug"], prompt)
    hardware = HardwareRig({}, {}, {}, ManualConveyor(prompt), presenter, rig.embodiment)
    for each in (rig, hardware):
        assert isinstance(each, Rig)
    assert rig.trackers == {} and hardware.trackers == {}
    assert rig.depth_camera() is rig.cameras["head"]
    assert rig.depth_camera().read_depth().image.dtype == np.float32
    with pytest.raises(RuntimeError, match="no head camera"):
        hardware.depth_camera()
    assert hardware.present() == "mug"
    hardware.close()
    # A camera that is RGB only is not a depth camera.
    rgb_only = HardwareRig(
        {},
        {},
        {"head": _FrozenCamera(rig.cameras["left_wrist"], rig.now, 0.0)},
        ManualConveyor(prompt),
        OperatorPresenter(["mug"], prompt),
        rig.embodiment,
    )
    with pytest.raises(RuntimeError, match="RGB-only head camera"):
        rgb_only.depth_camera()


def test_twin_closes_cleanly() -> None:
    """Closing ends the view worker (a real process, which exits by itself) and releases the
    renderers; closing again, or leaving a ``with`` block, is fine."""
    with TwinRig(seed=5) as twin:
        first = twin.cameras["head"].read().image
        pool = twin.reveal_internals().views.worker
        assert pool is not None and pool.members[0].process.is_alive()
    assert twin.reveal_internals().views.worker is None
    assert all(not w.process.is_alive() and w.process.exitcode == 0 for w in pool.members)
    twin.close()
    # The simulation stays readable; a later frame renders again with a new renderer.
    assert twin.arms["left"].state().q.shape == (7,)
    np.testing.assert_array_equal(twin.cameras["head"].read().image.shape, first.shape)
    twin.close()


def test_truth_differs_from_nominal_by_the_intended_amounts() -> None:
    for seed in range(5):
        twin = TwinRig(seed=seed)
        truth, nominal = twin.reveal_truth().world, twin.nominal
        wrist, wrist0 = truth.cameras["left_wrist"], nominal.cameras["left_wrist"]
        assert 0.07 < wrist.fx / wrist0.fx - 1 < 0.13
        assert any(abs(k) > 1e-4 for k in wrist.dist)
        head, head0 = truth.cameras["head"], nominal.cameras["head"]
        shift = np.linalg.norm(np.subtract(head.pose.pos, head0.pose.pos))
        turn = (
            Rotation.from_quat(head.pose.quat, scalar_first=True)
            * Rotation.from_quat(head0.pose.quat, scalar_first=True).inv()
        ).magnitude()
        assert 0.024 < shift < 0.036 and 1.3 < np.degrees(turn) < 2.1
        d = np.subtract(truth.layout.belt.pos, nominal.layout.belt.pos)
        assert 0.019 < abs(d[0]) < 0.029 and 0.013 < abs(d[1]) < 0.023 and 0.01 < d[2] < 0.018
        assert truth.controller.delay_s > nominal.controller.delay_s
        assert truth.controller.kp_pos < nominal.controller.kp_pos
        assert truth.lighting != nominal.lighting
        # A driver reports the nominal intrinsics at the resolution it delivers, as a real
        # one does; bins stand a few millimetres from where they were drawn.
        size = nominal.render.obs_size
        assert twin.cameras["left_wrist"].intrinsics() == Intrinsics.from_spec(wrist0).scaled(*size)
        assert twin.cameras["left_wrist"].read().image.shape == (size[1], size[0], 3)
        for name, b in truth.layout.bins.items():
            off = 1e3 * np.abs(np.subtract(b.pos, nominal.layout.bins[name].pos))
            assert 4.0 <= off[0] <= 12.0 and 4.0 <= off[1] <= 12.0 and off[2] == 0.0
    native = TwinRig(seed=0, native_cameras=True)
    assert native.cameras["left_wrist"].intrinsics().fx == wrist0.fx
    assert native.cameras["head"].read().image.shape == (720, 1280, 3)


def test_twin_is_deterministic_per_seed() -> None:
    runs = []
    for _ in range(2):
        twin = TwinRig(seed=7)
        arm = twin.arms["left"]
        target = arm.state().tcp_pose.copy()
        target[:3] += [0.03, 0.08, -0.05]
        arm.send_tcp_target(target)
        twin.hands["left"].send_joint_targets(np.full(20, 0.3))
        twin.step(30)
        runs.append((arm.state().q, twin.cameras["head"].read().image, twin.reveal_truth().world))
    np.testing.assert_array_equal(runs[0][0], runs[1][0])
    np.testing.assert_array_equal(runs[0][1], runs[1][1])
    assert runs[0][2] == runs[1][2]
    assert TwinRig(seed=8).reveal_truth().world != runs[0][2]


def test_twin_arm_conveyor_and_presenter_work(rig: TwinRig) -> None:
    name = rig.presenter.present("orange_ball")
    assert name == "orange_ball" and rig.now() == 0.0
    rig.conveyor.set_speed(0.12)
    assert rig.conveyor.speed() == 0.12
    arm = rig.arms["right"]
    start = arm.state().tcp_pose.copy()
    target = start.copy()
    target[:3] += [-0.05, 0.1, 0.0]
    arm.send_tcp_target(target)
    rig.step(75)
    assert np.linalg.norm(arm.state().tcp_pose[:3] - target[:3]) < 0.01
    assert rig.now() == pytest.approx(1.5)
    with pytest.raises(ValueError, match="7 numbers"):
        arm.send_tcp_target(np.zeros(6))


def _supervised(seed: int = 1) -> tuple[TwinRig, SafetySupervisor]:
    twin = TwinRig(seed=seed)
    sup = SafetySupervisor(twin.arms, twin.hands, twin.now, twin.embodiment, SafetyLimits())
    return twin, sup


def _run(twin: TwinRig, sup: SafetySupervisor, periods: int, command=None) -> None:  # type: ignore[no-untyped-def]
    for _ in range(periods):
        if command is not None:
            command()
        sup.tick()
        twin.step()


def test_nan_command_is_rejected_and_the_arm_holds() -> None:
    twin, sup = _supervised()
    arm = sup.arm("left")
    start = arm.state().tcp_pose.copy()
    bad = start.copy()
    bad[0] = np.nan
    _run(twin, sup, 25, lambda: arm.send_tcp_target(bad))
    assert np.linalg.norm(arm.state().tcp_pose[:3] - start[:3]) < 0.005
    assert any(e.kind == "rejected" and "non-finite" in e.detail for e in sup.events)
    hand = sup.hand("left")
    hand.send_joint_targets(np.full(20, np.inf))
    assert sup.events[-1].kind == "rejected"


def test_jump_outside_the_workspace_is_refused_or_clamped() -> None:
    twin, sup = _supervised()
    arm = sup.arm("left")
    start = arm.state().tcp_pose.copy()
    far = start.copy()
    far[2] = 0.2  # Below the table, 0.85 m away.
    _run(twin, sup, 10, lambda: arm.send_tcp_target(far))
    assert np.linalg.norm(arm.state().tcp_pose[:3] - start[:3]) < 0.005
    assert any(e.kind == "rejected" and "jumps" in e.detail for e in sup.events)
    # A small step that crosses the workspace floor is clamped to it.
    lim = sup.limits
    low = arm.state().tcp_pose.copy()
    low[2] = lim.workspace_min[2] + 0.02
    step = [0.0]

    def lower() -> None:
        step[0] = min(step[0] + 0.02, 0.4)
        target = low.copy()
        target[2] = start[2] - step[0]
        arm.send_tcp_target(target)

    _run(twin, sup, 60, lower)
    assert arm.state().tcp_pose[2] > lim.workspace_min[2] - 0.01
    assert any(e.kind == "clamped" for e in sup.events)


def test_stalled_command_stream_holds_then_stops() -> None:
    twin, sup = _supervised()
    arm = sup.arm("right")
    moving = arm.state().tcp_pose.copy()

    def sweep() -> None:
        moving[1] += 0.004  # 0.2 m/s
        arm.send_tcp_target(moving)

    _run(twin, sup, 20, sweep)
    _run(twin, sup, 40)  # The stream stalls for 0.8 s.
    kinds = [e.kind for e in sup.events if e.device == arm.name]
    assert "hold" in kinds and "stop" in kinds and kinds.index("hold") < kinds.index("stop")
    before = arm.state().tcp_pose[:3].copy()
    _run(twin, sup, 10)
    assert np.linalg.norm(arm.state().tcp_pose[:3] - before) < 0.002
    assert np.abs(arm.state().dq).max() < 0.05


class _FrozenCamera:
    """A camera that stops delivering frames after ``after`` seconds (fault injection)."""

    def __init__(self, inner, clock, after: float) -> None:  # type: ignore[no-untyped-def]
        self.inner, self.clock, self.after, self.name = inner, clock, after, inner.name
        self._last: Frame | None = None

    def intrinsics(self):  # type: ignore[no-untyped-def]
        return self.inner.intrinsics()

    def read(self) -> Frame:
        if self._last is None or self.clock() < self.after:
            self._last = self.inner.read()
        return self._last


def test_camera_stall_holds_the_arms() -> None:
    twin, sup = _supervised()
    sup.watch_camera(_FrozenCamera(twin.cameras["head"], twin.now, after=0.3))
    arm = sup.arm("left")
    moving = arm.state().tcp_pose.copy()

    def sweep() -> None:
        moving[1] += 0.004
        arm.send_tcp_target(moving)

    _run(twin, sup, 40, sweep)
    stalls = [e for e in sup.events if e.kind == "camera_stall"]
    assert stalls and "head" in stalls[0].detail
    assert 0.45 < stalls[0].stamp < 0.6
    # Commands keep coming, but the held arm refuses them while the camera is stalled, and
    # is stopped once the stall outlasts the supervisor's stop limit: the sweep would carry
    # it 0.16 m further; it settles back towards where it was held (within its overshoot).
    before = arm.state().tcp_pose[:3].copy()
    _run(twin, sup, 40, sweep)
    assert np.linalg.norm(arm.state().tcp_pose[:3] - before) < 0.02
    assert any(e.kind == "stop" and "stalled" in e.detail for e in sup.events)
    assert sup.arm("left").mode == "stopped"


def test_emergency_stop_from_another_thread_latches() -> None:
    twin, sup = _supervised()
    arm = sup.arm("left")
    target = arm.state().tcp_pose.copy()
    thread = threading.Thread(target=sup.emergency_stop, args=("button pressed",))
    thread.start()
    thread.join()
    assert sup.estopped
    before = arm.state().tcp_pose[:3].copy()
    target[1] += 0.1
    _run(twin, sup, 25, lambda: arm.send_tcp_target(target))
    assert np.linalg.norm(arm.state().tcp_pose[:3] - before) < 0.003
    assert any(e.kind == "rejected" and "latched" in e.detail for e in sup.events)
    sup.release_estop()
    _run(twin, sup, 75, lambda: arm.send_tcp_target(target))
    assert np.linalg.norm(arm.state().tcp_pose[:3] - target[:3]) < 0.01


def test_only_benchmarks_and_evaluation_can_reach_the_truth() -> None:
    """Grounding and behavior code must never read the twin's hidden world."""
    from pathlib import Path

    import r2s2r

    root = Path(r2s2r.__file__).parent
    # The twin itself, and its builder, which draws the truth.
    allowed = {"rig/twin/rig.py", "rig/twin/build.py"}
    offenders = []
    for path in root.rglob("*.py"):
        rel = path.relative_to(root).as_posix()
        if rel in allowed or rel.startswith("eval/") or path.name.startswith("bench"):
            continue
        text = path.read_text()
        if any(s in text for s in ("reveal_truth", "__truth", "TwinTruth", "reveal_internals")):
            offenders.append(rel)
    assert offenders == [], f"modules that reach the twin's truth: {offenders}"


def test_twin_whose_physics_diverges_ends_the_episode_unjudged() -> None:
    """A fault injected into the twin's simulation (non-finite joint velocities, which MuJoCo
    answers by resetting the state) ends the episode as ``unstable``: not a success, not an
    object status, until the next object is presented."""
    twin = TwinRig(seed=3)
    twin.present("green_can")
    twin.step(5)
    assert twin.episode_outcome() == ("pending", False, False)
    physics = twin.reveal_internals().physics
    qpos, qvel = physics.state()
    physics.set_state(0, qpos[0].copy(), np.full_like(qvel[0], np.nan))
    twin.step()
    assert twin.episode_outcome() == ("unstable", False, True)
    twin.present("green_can")
    twin.step()
    assert twin.episode_outcome() == ("pending", False, False)
