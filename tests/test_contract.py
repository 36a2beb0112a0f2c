"""Checking a dataset, an env and a rig against one another's contract: what fits passes, and
each kind of difference is named in the message."""

from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from r2s2r.behavior.generate import GenerateCfg, Generator
from r2s2r.data import CameraCfg, Dataset, DatasetCfg, DatasetError, DatasetWriter
from r2s2r.data.record import Recorder
from r2s2r.rig.safety import SafetySupervisor
from r2s2r.rig.teleop import TeleopSession, TrackerCalibration
from r2s2r.rig.teleop.operator import ScriptedOperator, TwinEyes
from r2s2r.rig.twin import TwinRig
from r2s2r.sim.contract import Contract, ContractError
from r2s2r.sim.embodiment import Embodiment
from r2s2r.sim.scene import nominal_embodiment
from r2s2r.spec.world import CAMERA_NAMES

DS = "dataset D"


def _sixteen_fingers(e: Embodiment) -> Embodiment:
    """The same arms with a 16-joint hand."""
    return replace(e, hand_joints=e.hand_joints[:16], hand_range=e.hand_range[:16])


@pytest.fixture(scope="module")
def contract() -> Contract:
    return Contract.of(nominal_embodiment(), "tcp")


def test_a_contract_fits_itself_and_its_own_dataset(contract: Contract, tmp_path: Path) -> None:
    contract.check_compatible(contract, DS, "this env")
    cams = tuple(CameraCfg(name=n, height=64, width=64) for n in CAMERA_NAMES)
    DatasetWriter(tmp_path / "ds", DatasetCfg(cameras=cams)).close()
    stored = Dataset(tmp_path / "ds").contract
    assert stored == contract
    contract.check_compatible(stored, f"dataset {tmp_path / 'ds'}", "this env")


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            lambda c: replace(c, embodiment=_sixteen_fingers(c.embodiment)),
            "dataset D has 2 arms x 16 hand joints, this rig has 2 arms x 20 hand joints; "
            "dataset D has 60 state and 46 action entries, this rig has 68 state and 54",
        ),
        (
            lambda c: replace(
                c, embodiment=replace(c.embodiment, sides=("left",), tcp_sites=("left_tcp",))
            ),
            "dataset D has 1 arm (left), this rig has 2 arms (left, right)",
        ),
        (
            lambda c: replace(
                c,
                embodiment=replace(
                    c.embodiment,
                    arm_joints=c.embodiment.arm_joints[:6],
                    arm_range=c.embodiment.arm_range[:6],
                    arm_velocity=c.embodiment.arm_velocity[:6],
                ),
            ),
            "dataset D has 2 arms x 6 joints, this rig has 2 arms x 7 joints",
        ),
        (
            lambda c: replace(
                c,
                embodiment=replace(c.embodiment, hand_joints=tuple(f"h{i}" for i in range(20))),
            ),
            "dataset D has 2 arms x 20 hand joints (h0, h1,",
        ),
        (
            lambda c: Contract.of(c.embodiment, "joint"),
            "dataset D acts in 'joint' mode, this rig in 'tcp' mode",
        ),
        (
            lambda c: Contract.of(c.embodiment, "tcp", ("head", "left_wrist")),
            "dataset D has cameras (head, left_wrist), this rig has (head, left_wrist, "
            "right_wrist)",
        ),
        (
            lambda c: replace(c, embodiment=replace(c.embodiment, name="ur5_allegro", id=1)),
            "dataset D is embodiment 'ur5_allegro' (id 1), this rig is "
            "'rizon4s_wuji2_bimanual' (id 0)",
        ),
    ],
)
def test_each_difference_is_named(contract: Contract, change, message: str) -> None:  # type: ignore[no-untyped-def]
    other = change(contract)
    with pytest.raises(ContractError, match="dataset D does not fit this rig: ") as err:
        contract.check_compatible(other, DS, "this rig")
    assert message in str(err.value)


def test_views_can_be_a_subset_or_ignored(contract: Contract) -> None:
    fewer = Contract.of(contract.embodiment, "tcp", ("head",))
    contract.check_compatible(fewer, DS, "this rig", views="subset")
    contract.check_compatible(fewer, DS, "this rig", views="ignore")
    with pytest.raises(ContractError, match=r"has cameras \(left_wrist, right_wrist\) that"):
        fewer.check_compatible(contract, DS, "this rig", views="subset")


def test_a_written_dataset_records_its_embodiment_and_is_checked(
    contract: Contract, tmp_path: Path
) -> None:
    root = tmp_path / "ds16"
    other = _sixteen_fingers(contract.embodiment)
    with DatasetWriter(root, DatasetCfg(cameras=(), embodiment=other)) as writer:
        # Frames have the embodiment's sizes: 2 x (7 + 7 + 16) state, 2 x (7 + 16) action.
        with pytest.raises(DatasetError, match=r"observation.state: expected shape \(60,\)"):
            writer.add_frame({}, np.zeros(68), np.zeros(46))
        writer.add_frame({}, np.zeros(60), np.zeros(46))
        writer.save_episode("t", True)
    ds = Dataset(root)
    assert ds.info["robot_type"] == "rizon4s_wuji2_bimanual"
    assert ds.features["observation.state"]["names"][28] == "left_hand_finger1_joint1"
    assert len(ds.features["action"]["names"]) == 46
    assert ds.contract.embodiment == other
    with pytest.raises(ContractError) as err:
        contract.check_compatible(ds.contract, f"dataset {root}", "this env", views="ignore")
    assert f"dataset {root} has 2 arms x 16 hand joints, this env has 2 arms x 20" in str(err.value)


def test_the_recorder_and_generation_refuse_a_dataset_of_another_robot(
    contract: Contract, tmp_path: Path
) -> None:
    logging.getLogger("r2s2r.safety").setLevel(logging.ERROR)
    root = tmp_path / "ds16"
    other = _sixteen_fingers(contract.embodiment)
    DatasetWriter(root, DatasetCfg(cameras=(), embodiment=other, env_state=True)).close()
    rig = TwinRig(seed=0)
    cal = TrackerCalibration.twin()
    teleop = TeleopSession(rig, SafetySupervisor(rig.arms, rig.hands, rig.now, rig.embodiment), cal)
    operator = ScriptedOperator(0, TwinEyes(rig), rig.task, rig.nominal, cal)
    with DatasetWriter(root) as writer, pytest.raises(ContractError) as err:
        Recorder(rig, operator, teleop, writer, rig.task, rig.nominal)
    assert f"dataset {root} has 2 arms x 16 hand joints, this rig has 2 arms x 20" in str(err.value)
    cfg = GenerateCfg(source=root, out=tmp_path / "gen", episodes=1, image_size=0)
    with pytest.raises(ContractError, match=f"dataset {root} does not fit this env"):
        Generator(cfg)
