"""The vendor SDK release each hardware driver was written for, checked when its device opens.

Each driver declares one ``SdkRequirement``: the distribution it imports, the release it was
written against and the releases it accepts (a PEP 440 specifier set, the same one its extra
pins in pyproject.toml). ``require_sdk`` reads the installed release when the device opens and
refuses any other with a message that names both, so a wrong SDK fails before it talks to a
device rather than halfway through a bring-up.
"""

from __future__ import annotations

import importlib.metadata
from dataclasses import dataclass
from typing import Any

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version


class SdkVersionError(RuntimeError):
    """The installed SDK is not a release the driver was written for."""


@dataclass(frozen=True)
class SdkRequirement:
    """The SDK one driver imports, the release it was written for and those it accepts."""

    # The distribution's name, as pip and importlib.metadata know it.
    dist: str
    # The release the driver was written and checked against ("4.x": any 4.x release).
    written_for: str
    # The releases the driver accepts, a PEP 440 specifier set (e.g. "==2.0.*").
    supported: str
    # Who needs it, for messages ("the Flexiv arm driver").
    what: str
    # How to install a supported release.
    install: str
    # What is known to break outside the supported range: (specifier, explanation) pairs,
    # the explanation added to the message when the installed release matches the specifier.
    known_breaks: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        try:
            spec = SpecifierSet(self.supported)
            for breaking, _ in self.known_breaks:
                SpecifierSet(breaking)
        except InvalidSpecifier as err:
            raise ValueError(f"{self.dist}: {err}") from None
        if not spec.contains(_as_version(self.written_for), prereleases=True):
            raise ValueError(
                f"{self.dist}: the release written for ({self.written_for}) is outside the "
                f"supported releases ({self.supported})"
            )

    def accepts(self, version: str) -> bool:
        """Whether release ``version`` is one this driver accepts (an unparsable one is not)."""
        try:
            parsed = Version(version)
        except InvalidVersion:
            return False
        return SpecifierSet(self.supported).contains(parsed, prereleases=True)


def _as_version(label: str) -> Version:
    """A release label as a version; "4.x" reads as 4.0, its first release."""
    return Version(label.removesuffix(".x") + (".0" if label.endswith(".x") else ""))


def installed_version(dist: str, module: Any = None) -> str | None:
    """The release of ``module`` (its ``__version__``), else that of the installed distribution
    ``dist`` (importlib.metadata); None when neither is known.

    The module's own version comes first: it is the code that actually runs, and a package such
    as OpenCV's ``cv2`` is installed under several distribution names.
    """
    version = getattr(module, "__version__", None)
    if isinstance(version, str) and version:
        return version
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def require_sdk(requirement: SdkRequirement, module: Any = None, who: str = "") -> str:
    """The installed release of ``requirement``'s SDK (``module`` where it is imported); raises
    ``SdkVersionError`` naming the installed and the needed release when it is not accepted.
    ``who`` (a device, e.g. "left_arm (serial Rizon4s-123456)") starts the message."""
    version = installed_version(requirement.dist, module)
    if version is not None and requirement.accepts(version):
        return version
    prefix = f"{who}: " if who else ""
    installed = (
        f"{requirement.dist} {version} is installed"
        if version is not None
        else f"no installed {requirement.dist} release was found"
    )
    message = (
        f"{prefix}{requirement.what} was written for {requirement.dist} "
        f"{requirement.written_for} and needs {requirement.dist}{requirement.supported}; "
        f"{installed}."
    )
    if version is not None:
        for breaking, why in requirement.known_breaks:
            try:
                if SpecifierSet(breaking).contains(Version(version), prereleases=True):
                    message += f" {why}"
            except InvalidVersion:
                break
    raise SdkVersionError(f"{message} Install a supported release: {requirement.install}")
