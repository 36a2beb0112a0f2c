"""Base class and YAML loading for the validated, immutable specs."""

from __future__ import annotations

from collections.abc import Mapping
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Annotated, Any, Self

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

# Constrained numbers shared by the specs and the configs built on them.
Pos = Annotated[float, Field(gt=0)]
NonNeg = Annotated[float, Field(ge=0)]
Unit = Annotated[float, Field(ge=0, le=1)]
# A share of something: above 0, at most all of it.
Share = Annotated[float, Field(gt=0, le=1)]
PosInt = Annotated[int, Field(gt=0)]
NonNegInt = Annotated[int, Field(ge=0)]


class SpecError(ValueError):
    """A spec file (or dict) failed validation; the message names file, key and reason."""


class Spec(BaseModel):
    """Frozen, strict config record: unknown keys and invalid values are rejected."""

    model_config = ConfigDict(frozen=True, extra="forbid", validate_default=True)

    @classmethod
    def from_dict(cls, data: dict[str, Any], source: str = "<dict>") -> Self:
        """Validate ``data``; errors name ``source``, the dotted key and what was expected."""
        try:
            return cls.model_validate(data)
        except ValidationError as err:
            raise SpecError(format_validation_error(err, source, cls.__name__)) from None

    @classmethod
    def load(cls, path: str | Path | Traversable) -> Self:
        """Load from a YAML file (a path, or a packaged preset's resource)."""
        if isinstance(path, str):
            path = Path(path)
        if not path.is_file():
            raise SpecError(
                f"{path}: no such {cls.__name__} file (it does not exist or is a folder)"
            )
        try:
            data = yaml.safe_load(path.read_text())
        except yaml.YAMLError as err:
            raise SpecError(f"{path}: not valid YAML: {err}") from None
        if not isinstance(data, dict):
            raise SpecError(f"{path}: expected a mapping of {cls.__name__} fields at the top level")
        return cls.from_dict(data, source=str(path))

    def save(self, path: str | Path) -> None:
        """Write as YAML (atomically: a crash leaves the old file intact)."""
        path = Path(path)
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_text(yaml.safe_dump(self.model_dump(mode="json"), sort_keys=False))
        tmp.replace(path)

    def replace(self, **changes: Any) -> Self:
        """A validated copy with ``changes`` applied; the only way specs are copied with
        changes (``model_copy(update=...)`` would skip validation).

        A mapping given for a field that holds a spec changes only the keys it names, at any
        depth: ``world.replace(render={"obs_size": (64, 64)})`` keeps the other render
        settings. Any other value (a spec, a dict of specs, a number) replaces the field."""
        return type(self).from_dict(_merged(self, changes), source=f"{type(self).__name__}.replace")


def _merged(spec: Spec, changes: Mapping[str, Any]) -> dict[str, Any]:
    """``spec``'s fields as data with ``changes`` applied (mappings merge into nested specs)."""
    data = spec.model_dump()
    for key, value in changes.items():
        current = getattr(spec, key) if key in type(spec).model_fields else None
        if isinstance(current, Spec) and isinstance(value, Mapping):
            data[key] = _merged(current, value)
        else:
            # An unknown key goes through too, for validation to name it.
            data[key] = value
    return data


def format_validation_error(err: ValidationError, source: str, what: str) -> str:
    lines = [f"{source}: invalid {what}:"]
    for e in err.errors():
        key = ".".join(str(p) for p in e["loc"]) or "<top level>"
        if e["type"] == "extra_forbidden":
            lines.append(f"  {key}: unknown key (not a field of {what}; check the spelling)")
        elif e["type"] == "missing":
            lines.append(f"  {key}: required key is missing")
        else:
            lines.append(f"  {key}: {e['msg']} (got {e.get('input')!r})")
    return "\n".join(lines)
