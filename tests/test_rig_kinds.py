"""The rig registry (``r2s2r.rig.kinds``): both kinds, what each can do, the refusals, and
every rig in ``source/`` opened through ``open_rig``."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from r2s2r.app.jobs import RequestError
from r2s2r.app.record import RecordRequest
from r2s2r.app.rigs import rig_kind, rig_kinds
from r2s2r.app.session import RigRequest
from r2s2r.cli.choices import RigKind as RigChoice
from r2s2r.rig.hardware import HardwareRig
from r2s2r.rig.kinds import RIGS, RigError, RigOptions, open_rig
from r2s2r.rig.safety import SafetySupervisor
from r2s2r.rig.twin import TwinRig
from r2s2r.spec.registry import RegistryError
from r2s2r.spec.worlds import load_task, load_world

SOURCE = Path(__file__).resolve().parents[1] / "source"


def test_the_registry_lists_both_kinds_and_the_cli_offers_them() -> None:
    assert RIGS.names() == ("twin", "hardware")
    assert tuple(RigChoice) == RIGS.names() == rig_kinds()
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


def test_an_unknown_kind_names_the_known_ones(tmp_path: Path) -> None:
    with pytest.raises(RegistryError, match=r"unknown rig 'lab' \(known: hardware, twin\)"):
        open_rig("lab")
    with pytest.raises(RegistryError, match="did you mean 'twin'"):
        open_rig("twni")
    with pytest.raises(RequestError, match=r"unknown rig 'lab' \(known: hardware, twin\)"):
        rig_kind("lab")
    # A request naming one fails as it is made, with the same message.
    with pytest.raises(ValueError, match=r"unknown rig 'lab' \(known: hardware, twin\)"):
        RecordRequest(out=tmp_path, rig="lab")
    assert RecordRequest.model_json_schema()["properties"]["rig"]["enum"] == ["twin", "hardware"]


def test_the_real_cell_is_refused_before_anything_opens(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(RigError, match="--rig hardware needs --config PATH"):
        open_rig("hardware")
    with pytest.raises(RequestError, match="--rig hardware needs --config PATH"):
        rig_kind("hardware", RigOptions())
    with pytest.raises(ValueError, match="--rig hardware needs --config PATH"):
        RigRequest(rig="hardware")
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


def test_every_rig_in_source_opens_through_open_rig() -> None:
    """Nothing in ``source/`` builds a rig itself but the registry and each rig's own room
    (``rig/twin/``, ``rig/hardware/``): every path opens one with ``open_rig``."""
    pattern = re.compile(r"\b(?:TwinRig|HardwareRig)(?:\.from_config)?\(|\bbuild_rig\(")
    rooms = ("r2s2r/rig/kinds.py", "r2s2r/rig/twin/", "r2s2r/rig/hardware/")
    offenders = [
        f"{rel}:{text.count(chr(10), 0, m.start()) + 1}"
        for path in sorted(SOURCE.rglob("*.py"))
        for rel in [path.relative_to(SOURCE).as_posix()]
        if not rel.startswith(rooms)
        for text in [path.read_text()]
        for m in pattern.finditer(text)
    ]
    assert len(list(SOURCE.rglob("*.py"))) > 100  # The folder is the one with the code.
    assert offenders == [], f"rigs built outside r2s2r.rig.kinds (use open_rig): {offenders}"


def test_no_service_compares_the_rig_kind_with_a_name() -> None:
    """The services and the commands ask the kind's entry what it can do (``RIGS.get``),
    never compare its name with "twin" or "hardware"."""
    pattern = re.compile(
        r"""[!=]=\s*(?:["'](?:twin|hardware)["']|RigKind\.\w+)|["'](?:twin|hardware)["']\s*[!=]="""
    )
    roots = [SOURCE / "r2s2r", SOURCE.parent / "tools"]
    offenders = [
        f"{path.relative_to(SOURCE.parent)}:{text.count(chr(10), 0, m.start()) + 1}"
        for root in roots
        for path in sorted(root.rglob("*.py"))
        for text in [path.read_text()]
        for m in pattern.finditer(text)
    ]
    assert offenders == [], f"rig kinds compared by name (use RIGS.get): {offenders}"
