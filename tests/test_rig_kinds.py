"""The rig registry (``r2s2r.rig.kinds``): both kinds, what each can do, the refusals."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from r2s2r.cli.choices import RigKind as RigChoice
from r2s2r.rig.hardware import HardwareRig
from r2s2r.rig.kinds import RIGS, RigError, RigOptions, open_rig
from r2s2r.rig.safety import SafetySupervisor
from r2s2r.rig.twin import TwinRig
from r2s2r.spec.registry import RegistryError
from r2s2r.spec.worlds import load_task, load_world


def test_the_registry_lists_both_kinds_and_the_cli_offers_them() -> None:
    assert RIGS.names() == ("twin", "hardware")
    assert tuple(RigChoice) == RIGS.names()
    assert all(RIGS.get(name).name == name for name in RIGS)


def test_what_each_kind_can_do() -> None:
    """The capabilities the services branch on, per kind: (truth, operator, simulated,
    realtime, parallel, the world its recordings name)."""
    table = {
        name: (k.truth, k.operator, k.simulated, k.realtime, k.parallel, k.world)
        for name, k in ((n, RIGS.get(n)) for n in RIGS)
    }
    assert table == {
        "twin": (True, False, True, False, True, "twin"),
        "hardware": (False, True, False, True, False, "real"),
    }


def test_an_unknown_kind_names_the_known_ones() -> None:
    with pytest.raises(RegistryError, match=r"unknown rig 'lab' \(known: hardware, twin\)"):
        open_rig("lab")
    with pytest.raises(RegistryError, match="did you mean 'twin'"):
        open_rig("twni")


def test_the_real_cell_is_refused_before_anything_opens(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(RigError, match="--rig hardware needs --config PATH"):
        open_rig("hardware")
    RIGS.get("twin").check(RigOptions())  # The twin opens with anything.
    monkeypatch.setitem(sys.modules, "r2s2r.rig.hardware", None)
    with pytest.raises(RigError, match="the hardware rig is not available"):
        open_rig("hardware", RigOptions(config=tmp_path / "cell.yaml"))


def test_each_kind_opens_supervises_and_sets_up_through_the_registry(tmp_path: Path) -> None:
    twin_kind, cell_kind = RIGS.get("twin"), RIGS.get("hardware")
    options = RigOptions(seed=4, cell=2, condition="red_light", ideal=True)
    with open_rig("twin", options) as twin:
        assert isinstance(twin, TwinRig)
        assert (twin.cell, twin.condition, twin.ideal) == (2, "red_light", True)
        assert twin_kind.setting(twin) == (twin.task, twin.nominal)
        assert isinstance(twin_kind.supervise(twin), SafetySupervisor)
    # The real cell with no devices (its YAML names none), its operator pressing Enter.
    config = tmp_path / "cell.yaml"
    config.write_text("arms: {}\n")
    with open_rig("hardware", RigOptions(config=config, prompt=lambda q: "")) as cell:
        assert isinstance(cell, HardwareRig) and cell.present("green_can") == "green_can"
        assert cell_kind.setting(cell) == (load_task("pick_sort"), load_world("nominal"))
        assert isinstance(cell_kind.supervise(cell), SafetySupervisor)
    with pytest.raises(RigError, match="expected the real cell"):
        cell_kind.supervise(twin)
