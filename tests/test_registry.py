"""The explicit registries: duplicates raise, unknown names get the nearest ones."""

from __future__ import annotations

import pytest

from r2s2r.spec.registry import Registry, RegistryError


def test_register_get_and_order() -> None:
    reg: Registry[int] = Registry("behavior")
    reg.register("adapted", 1)

    @reg.add("planned")
    def planned() -> int:
        return 2

    assert reg.get("adapted") == 1 and reg.get("planned") is planned
    assert reg.names() == ("adapted", "planned") and "planned" in reg and len(reg) == 2


def test_duplicate_name_raises() -> None:
    reg: Registry[int] = Registry("planner")
    reg.register("cpu", 1)
    with pytest.raises(RegistryError, match="planner 'cpu' is already registered"):
        reg.register("cpu", 2)
    assert reg.get("cpu") == 1


def test_unknown_name_suggests_the_nearest() -> None:
    reg: Registry[int] = Registry("condition")
    for name in ("nominal", "red_light", "fast_belt"):
        reg.register(name, 0)
    with pytest.raises(RegistryError) as err:
        reg.get("red_lihgt")
    assert str(err.value) == (
        "unknown condition 'red_lihgt'; did you mean 'red_light'? "
        "(known: fast_belt, nominal, red_light)"
    )
    with pytest.raises(RegistryError, match=r"unknown condition 'xyz' \(known: "):
        reg.get("xyz")
