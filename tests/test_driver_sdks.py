"""The SDK release each hardware driver was written for, and the check each makes at open.

The helper runs on real version strings and real installed distributions (OpenCV's, which
the core installs); each driver's declared requirement is checked against the extras that
pyproject.toml pins, and the Flexiv driver's list of SDK names against its own code. The real
flexivrdk wheel is checked in tests/flexiv (``make test-flexiv``).
"""

from __future__ import annotations

import ast
import importlib.metadata
import inspect
import re
import tomllib
import types
from pathlib import Path

import cv2
import pytest
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet

from r2s2r.rig.hardware import drivers
from r2s2r.rig.hardware.drivers import flexiv
from r2s2r.rig.hardware.drivers.sdk import (
    SdkRequirement,
    SdkVersionError,
    installed_version,
    require_sdk,
)
from r2s2r.sim.camera import Intrinsics

PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"
# The extra that installs each driver's SDK (the ZED's comes with Stereolabs' installer, the
# OpenCV cameras' with the core).
EXTRAS = {"FlexivArm": "flexiv", "WujiHand": "wuji", "ManusGlove": "teleop", "ViveTracker": "vive"}

RDK = SdkRequirement(
    dist="flexivrdk",
    written_for="2.0.0",
    supported="==2.0.*",
    what="the arm driver",
    install="pip install 'flexivrdk==2.0.0'",
    known_breaks=((">=2.1", "2.1 dropped the Rizon models."),),
)


def test_require_sdk_accepts_the_supported_releases_and_names_both_on_any_other() -> None:
    for accepted in ("2.0.0", "2.0.3", "2.0.0rc1", "2.0.1.post2"):
        assert require_sdk(RDK, types.SimpleNamespace(__version__=accepted)) == accepted
    for refused in ("2.1.0", "1.9.4.1", "3.0", "dev"):
        with pytest.raises(SdkVersionError) as err:
            require_sdk(RDK, types.SimpleNamespace(__version__=refused), "left_arm")
        text = str(err.value)
        assert text.startswith("left_arm: the arm driver was written for flexivrdk 2.0.0")
        assert f"needs flexivrdk==2.0.*; flexivrdk {refused} is installed." in text
        assert text.endswith("Install a supported release: pip install 'flexivrdk==2.0.0'")
        # What is known to break is said where it applies.
        assert ("dropped the Rizon models" in text) == (refused in ("2.1.0", "3.0"))


def test_installed_version_reads_the_module_then_the_distribution() -> None:
    # OpenCV's module knows its release; its distribution's metadata says the same.
    dist = importlib.metadata.version("opencv-python-headless")
    assert installed_version("opencv-python-headless", cv2) == cv2.__version__
    assert dist.startswith(cv2.__version__)
    assert installed_version("opencv-python-headless") == dist
    # A module without __version__ falls back to the distribution.
    assert installed_version("opencv-python-headless", types.SimpleNamespace()) == dist
    assert installed_version("r2s2r-no-such-sdk") is None
    missing = SdkRequirement("r2s2r-no-such-sdk", "1.0", ">=1,<2", "a driver", "pip install it")
    with pytest.raises(SdkVersionError, match="no installed r2s2r-no-such-sdk release was found"):
        require_sdk(missing)


def test_a_requirement_must_accept_the_release_it_was_written_for() -> None:
    with pytest.raises(ValueError, match=r"written for \(2.1.0\) is outside"):
        SdkRequirement("flexivrdk", "2.1.0", "==2.0.*", "x", "y")
    with pytest.raises(ValueError, match="flexivrdk: Invalid specifier"):
        SdkRequirement("flexivrdk", "2.0.0", "2.0", "x", "y")
    # "4.x" is any 4.x release: its first is inside >=4,<5, outside >=4.10.
    assert SdkRequirement("pyzed", "4.x", ">=4,<5", "x", "y").accepts("4.2")
    with pytest.raises(ValueError, match="outside"):
        SdkRequirement("pyzed", "4.x", ">=4.10,<5", "x", "y")


def _extras() -> dict[str, list[Requirement]]:
    project = tomllib.loads(PYPROJECT.read_text())["project"]
    extras = {k: [Requirement(r) for r in v] for k, v in project["optional-dependencies"].items()}
    extras["core"] = [Requirement(r) for r in project["dependencies"]]
    return extras


def _pinned_within(req: Requirement, requirement: SdkRequirement) -> None:
    """The extra installs only releases the driver accepts: an exact pin it accepts, or the
    driver's own range."""
    (spec,) = req.specifier if len(req.specifier) == 1 else (None,)
    if spec is not None and spec.operator == "==" and "*" not in spec.version:
        assert requirement.accepts(spec.version), (req, requirement.supported)
    else:
        assert req.specifier == SpecifierSet(requirement.supported), (req, requirement.supported)


@pytest.mark.parametrize("driver", sorted(drivers.SDK_REQUIREMENTS))
def test_each_driver_states_its_sdk_and_pyproject_installs_a_release_it_accepts(
    driver: str,
) -> None:
    requirement = drivers.SDK_REQUIREMENTS[driver]
    assert requirement.what and requirement.install
    # The release written for is one of the accepted ones (SdkRequirement refuses otherwise).
    assert requirement.accepts(requirement.written_for.replace(".x", ".0"))
    # Each driver module names its requirement in its docstring's account of the SDK.
    module = inspect.getmodule(getattr(drivers, driver))
    assert module is not None and module.__doc__ is not None
    name = next(k for k, v in vars(module).items() if v is requirement)
    assert f"``{name}``" in module.__doc__
    extras = _extras()
    if driver in EXTRAS:
        for extra in (EXTRAS[driver], "hardware"):
            (req,) = [r for r in extras[extra] if r.name == requirement.dist]
            _pinned_within(req, requirement)
    elif driver == "OpenCVCamera":
        (req,) = [r for r in extras["core"] if r.name == requirement.dist]
        _pinned_within(req, requirement)
    else:  # The ZED: pyzed comes with the ZED SDK's installer, not from PyPI.
        assert driver == "ZedCamera" and extras["zed"] == []
    assert flexiv.FLEXIVRDK.written_for == "2.0.0"


def test_the_opencv_cameras_check_the_real_cv2_at_open(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert require_sdk(drivers.OPENCV, cv2) == cv2.__version__
    # A release the driver was not written for (the installed module reporting OpenCV 5).
    monkeypatch.setattr(cv2, "__version__", "5.0.0")
    intrinsics = Intrinsics("pinhole", 64, 48, 50.0, 50.0, 32.0, 24.0)
    with pytest.raises(SdkVersionError, match=r"camera source .*opencv-python-headless 5\.0\.0"):
        drivers.OpenCVCamera(str(tmp_path / "missing.avi"), intrinsics)


# --------------------------------------------------------------------------- Flexiv
def test_flexiv_serials_are_read_as_the_sdk_reads_them() -> None:
    assert flexiv.serial_model("Rizon4s-123456") == "Rizon4s"
    assert flexiv.serial_model("Rizon 4s-123456") == "Rizon4s"  # flexivrdk drops spaces.
    for bad in ("Rizon4s", "Enlight-L-123456", "-123", "Rizon4s-"):
        with pytest.raises(flexiv.FlexivError, match="not a Flexiv serial number"):
            flexiv.serial_model(bad)


def test_flexiv_refuses_a_model_or_an_sdk_it_was_not_written_for() -> None:
    rdk_2_0 = types.SimpleNamespace(__version__="2.0.0")
    assert flexiv.check_sdk_and_model(rdk_2_0, "Rizon4s-123456") == ("2.0.0", "Rizon4s")
    with pytest.raises(flexiv.FlexivError) as err:
        flexiv.check_sdk_and_model(rdk_2_0, "Moonlight-123456", "left_arm")
    assert re.search(r"left_arm .*model Moonlight .*flexivrdk 2\.0\.0.*Rizon4s", str(err.value))
    # flexivrdk 2.1: the message names the serial's model, the installed and the needed release.
    with pytest.raises(SdkVersionError) as err:
        flexiv.check_sdk_and_model(types.SimpleNamespace(__version__="2.1.0"), "Rizon4s-1", "arm")
    text = str(err.value)
    assert "arm (serial Rizon4s-1, model Rizon4s)" in text
    assert "needs flexivrdk==2.0.*; flexivrdk 2.1.0 is installed" in text
    assert "Product model [Rizon4s] is not supported" in text and "Robot.Enable()" in text


def _sdk_names_in_code() -> set[str]:
    """Every SDK name the Flexiv driver's code takes: attributes of the robot (``robot``,
    ``self.robot``, ``self._robot``), of the module (``sdk``, ``self.sdk``, ``self._sdk``), of its
    ``Mode`` and ``JointGroup``, and of what ``states()`` and ``info()`` return (``states``,
    ``info``), as ``Owner.name``."""
    owners = {"robot": "Robot.", "sdk": "", "states": "RobotStates.", "info": "RobotInfo."}

    def owner(node: ast.expr) -> str | None:
        if isinstance(node, ast.Name):
            return owners.get(node.id)
        if not isinstance(node, ast.Attribute):
            return None
        if isinstance(node.value, ast.Name) and node.value.id == "self":
            member = node.attr.lstrip("_")
            return owners[member] if member in ("robot", "sdk") else None
        if owner(node.value) == "" and node.attr in ("Mode", "JointGroup"):
            return f"{node.attr}."
        return None

    tree = ast.parse(Path(flexiv.__file__).read_text())
    used = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and (prefix := owner(node.value)) is not None:
            used.add(prefix + node.attr)
    return used


def test_the_flexiv_driver_uses_only_the_sdk_names_it_declares() -> None:
    declared = set(flexiv.SDK_CALLS) | set(flexiv.SDK_ATTRIBUTES)
    declared |= {name.split(".")[0] for name in declared}
    used = _sdk_names_in_code()
    # The walk sees the calls it should (a sample, so that a broken walk cannot pass).
    assert {"Robot", "Robot.Enable", "NrtCartesianCmd", "Mode.NRT_CARTESIAN_MOTION_FORCE"} <= used
    assert {"RobotStates.tcp_pose", "RobotInfo.model_name", "JointGroup"} <= used
    assert used <= declared, f"undeclared SDK names: {sorted(used - declared)}"
