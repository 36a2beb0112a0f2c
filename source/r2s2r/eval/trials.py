"""An evaluation directory's records: ``eval.json`` (what was evaluated, under which protocol)
and ``trials.jsonl`` (one line per finished trial), as typed, validated values.

The writer appends one trial at a time with ``append_trial`` (flushed and fsynced, so a crash
loses at most the trial being written); the readers turn every malformed line into a
``TrialLogError`` that names the file, the line and the field. The one exception is a torn
last line (no newline, not JSON): the trace of a crash mid-write, skipped with a warning.
"""

from __future__ import annotations

import json
import logging
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from r2s2r.eval.funnel import NO_STAGE, STAGES

# What an evaluation's trials are against the policy's training data (``r2s2r.eval.instances``).
INSTANCE_KINDS = ("train", "unseen")

log = logging.getLogger("r2s2r.eval")

EVAL_JSON = "eval.json"
TRIALS_JSONL = "trials.jsonl"

# The conditions of the protocol, in the order of the reference's Table 2.
CONDITIONS = ("nominal", "red_light", "fast_belt", "novel_objects", "all_shifts")
# How a trial ends; only "sorted" (the object in its assigned bin) is a success.
OUTCOMES = ("sorted", "wrong_bin", "dropped", "timeout", "unstable", "safety_stop", "failed")
SUCCESS_OUTCOME = "sorted"
RIGS = ("twin", "hardware")
POLICY_KINDS = ("learned", "remote", "scripted", "planned")
# The grounding levels of a policy's simulated training data (None: no simulated data).
WORLD_LEVELS = ("nominal", "grounded")
BEHAVIOR_LEVELS = ("planned", "adapted")


class TrialLogError(ValueError):
    """An evaluation directory that cannot be read as written: a missing file, a malformed
    line, a value outside the schema, or directories that did not run the same protocol."""


def _get(data: Mapping[str, Any], name: str, kind: type | tuple[type, ...], where: str) -> Any:
    """``data[name]``, checked to be of ``kind`` (a JSON bool is never accepted as a number)."""
    if name not in data:
        raise TrialLogError(f"{where}: field {name!r} is missing")
    value = data[name]
    kinds = kind if isinstance(kind, tuple) else (kind,)
    is_bool = isinstance(value, bool)
    ok = isinstance(value, kinds) and (bool in kinds or not is_bool)
    if not ok:
        names = " or ".join("null" if k is type(None) else k.__name__ for k in kinds)
        raise TrialLogError(f"{where}: field {name!r} is {value!r}, expected {names}")
    return value


def _choice(value: Any, name: str, allowed: Sequence[Any], where: str) -> Any:
    if value not in allowed:
        raise TrialLogError(
            f"{where}: field {name!r} is {value!r}, expected one of "
            + ", ".join("null" if a is None else str(a) for a in allowed)
        )
    return value


def _no_unknown(data: Mapping[str, Any], known: Sequence[str], where: str) -> None:
    unknown = sorted(set(data) - set(known))
    if unknown:
        raise TrialLogError(
            f"{where}: unknown field(s) {', '.join(map(repr, unknown))} (known: {', '.join(known)})"
        )


@dataclass(frozen=True)
class TrialRecord:
    """One finished trial, as one line of ``trials.jsonl``."""

    # Index of the trial in the protocol's list (the same trial for every policy).
    trial: int
    # The twin's seed of the trial (object, pose and belt speed are drawn from it).
    seed: int
    # One of CONDITIONS.
    condition: str
    # The object to sort.
    object: str
    # Belt speed (m/s).
    belt_speed: float
    # One of OUTCOMES.
    outcome: str
    # True exactly when outcome is "sorted".
    success: bool
    duration_s: float
    # Control periods run.
    steps: int
    # What ended the episode (the runtime's ``ended_by``).
    ended_by: str
    # The safety supervisor's events during the trial.
    safety_events: int
    # Median inference latency (ms), None when the policy ran no inference.
    infer_ms_p50: float | None = None
    # The trial's video, relative to the evaluation directory, if one was kept.
    video: str | None = None
    # Chunks the policy produced and how many of them the runtime's checks rejected (None
    # where not recorded: a scripted policy, or a log written before they were counted).
    chunks: int | None = None
    rejected_chunks: int | None = None
    # The furthest funnel stage (``r2s2r.eval.funnel``: none, reached, grasped, lifted,
    # over_bin, sorted) and the nearest a hand came to the object, metres; None where the
    # rig cannot tell (the real cell).
    stage: str | None = None
    min_hand_distance_m: float | None = None

    def __post_init__(self) -> None:
        # The same checks as from_json, so that a record is valid however it was built; the
        # numbers are stored as the types the fields name.
        for name, value in _checked_trial(asdict(self), "trial record").items():
            object.__setattr__(self, name, value)

    @property
    def did_not_act(self) -> bool:
        """The policy produced chunks and the runtime rejected every one: the arms never
        moved on its account, which says nothing of what it learned."""
        return bool(self.chunks) and self.rejected_chunks == self.chunks

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Any, where: str = "trial record") -> TrialRecord:
        """Parse and check one line's object; ``where`` prefixes every error message."""
        return cls(**_checked_trial(data, where))


_TRIAL_FIELDS = tuple(TrialRecord.__dataclass_fields__)


def _number(data: Mapping[str, Any], name: str, where: str) -> float:
    value = float(_get(data, name, (int, float), where))
    if not math.isfinite(value) or value < 0:
        raise TrialLogError(f"{where}: field {name!r} is {value}, expected a finite value >= 0")
    return value


def _checked_trial(data: Any, where: str) -> dict[str, Any]:
    """The fields of a trial record, checked against the schema."""
    if not isinstance(data, dict):
        raise TrialLogError(f"{where}: expected a JSON object, got {type(data).__name__}")
    _no_unknown(data, _TRIAL_FIELDS, where)
    values: dict[str, Any] = {}
    for name in ("trial", "steps", "safety_events"):
        values[name] = _get(data, name, int, where)
        if values[name] < 0:
            raise TrialLogError(f"{where}: field {name!r} is {values[name]}, expected >= 0")
    values["seed"] = _get(data, "seed", int, where)
    for name in ("object", "ended_by"):
        values[name] = _get(data, name, str, where)
    condition = _choice(_get(data, "condition", str, where), "condition", CONDITIONS, where)
    outcome = _choice(_get(data, "outcome", str, where), "outcome", OUTCOMES, where)
    success = _get(data, "success", bool, where)
    if success != (outcome == SUCCESS_OUTCOME):
        raise TrialLogError(
            f"{where}: field 'success' is {str(success).lower()} but outcome is "
            f"{outcome!r} (only {SUCCESS_OUTCOME!r} is a success)"
        )
    values.update(condition=condition, outcome=outcome, success=success)
    values["belt_speed"] = _number(data, "belt_speed", where)
    values["duration_s"] = _number(data, "duration_s", where)
    present = {name: data.get(name) is not None for name in ("infer_ms_p50", "video")}
    values["infer_ms_p50"] = (
        _number(data, "infer_ms_p50", where) if present["infer_ms_p50"] else None
    )
    values["video"] = _get(data, "video", str, where) if present["video"] else None
    for name in ("chunks", "rejected_chunks"):
        values[name] = None
        if data.get(name) is not None:
            values[name] = _get(data, name, int, where)
            if values[name] < 0:
                raise TrialLogError(f"{where}: field {name!r} is {values[name]}, expected >= 0")
    if (values["chunks"] is None) != (values["rejected_chunks"] is None):
        raise TrialLogError(f"{where}: fields 'chunks' and 'rejected_chunks' go together")
    if values["chunks"] is not None and values["rejected_chunks"] > values["chunks"]:
        raise TrialLogError(
            f"{where}: field 'rejected_chunks' is {values['rejected_chunks']}, more than the "
            f"{values['chunks']} chunks"
        )
    stage = data.get("stage")
    values["stage"] = None if stage is None else _choice(stage, "stage", (NO_STAGE, *STAGES), where)
    if values["stage"] is not None and (values["stage"] == "sorted") != success:
        raise TrialLogError(
            f"{where}: field 'stage' is {values['stage']!r} but outcome is {outcome!r} (only a "
            "sorted trial reaches the 'sorted' stage)"
        )
    distance = data.get("min_hand_distance_m")
    values["min_hand_distance_m"] = None
    if distance is not None:
        value = float(_get(data, "min_hand_distance_m", (int, float), where))
        if not (math.isfinite(value) and value >= 0):
            raise TrialLogError(
                f"{where}: field 'min_hand_distance_m' is {value}, expected a distance >= 0"
            )
        values["min_hand_distance_m"] = value
    return values


@dataclass(frozen=True)
class PolicyInfo:
    """The evaluated policy, as ``eval.json``'s ``policy``."""

    name: str
    kind: str
    # The training run the policy came from (None for scripted or remote policies).
    run: str | None = None
    # Trained on real demonstrations only (the baseline of the gains).
    real_only: bool = False
    # Grounding of the simulated training data: world "nominal" or "grounded", behavior
    # "planned" (ungrounded) or "adapted" (grounded); both None without simulated data.
    world: str | None = None
    behavior: str | None = None
    # A learned policy's flow noise: None, one fixed draw for every chunk of every trial;
    # N, trial k's chunks start from a draw of its own (``trial_noise_seed(N, k)``).
    noise_seed: int | None = None

    def __post_init__(self) -> None:
        _checked_policy(asdict(self), "policy")

    @classmethod
    def from_json(cls, data: Any, where: str) -> PolicyInfo:
        return cls(**_checked_policy(data, where))


def _checked_policy(data: Any, where: str) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise TrialLogError(f"{where}: expected a JSON object, got {type(data).__name__}")
    _no_unknown(data, tuple(PolicyInfo.__dataclass_fields__), where)
    world = _choice(data.get("world"), "world", (*WORLD_LEVELS, None), where)
    behavior = _choice(data.get("behavior"), "behavior", (*BEHAVIOR_LEVELS, None), where)
    real_only = _get(data, "real_only", bool, where)
    if (world is None) != (behavior is None):
        raise TrialLogError(
            f"{where}: world is {world!r} and behavior is {behavior!r}: a policy's "
            "simulated data has both grounding levels or neither"
        )
    if real_only and world is not None:
        raise TrialLogError(
            f"{where}: real_only is true but world/behavior are {world!r}/{behavior!r}"
        )
    run = data.get("run")
    kind = _choice(_get(data, "kind", str, where), "kind", POLICY_KINDS, where)
    # Logs from before the field: one fixed noise draw.
    noise = data.get("noise_seed")
    if noise is not None and (_get(data, "noise_seed", int, where) < 0 or kind != "learned"):
        raise TrialLogError(
            f"{where}: noise_seed is {noise!r} for a {kind} policy: expected null, or a seed "
            ">= 0 of a learned policy"
        )
    return {
        "name": _get(data, "name", str, where),
        "kind": kind,
        "run": None if run is None else _get(data, "run", str, where),
        "real_only": real_only,
        "world": world,
        "behavior": behavior,
        "noise_seed": noise,
    }


@dataclass(frozen=True)
class EvalInfo:
    """``eval.json``: the protocol, the rig and the policy of one evaluation."""

    protocol: str
    protocol_seed: int
    rig: str
    trials_planned: int
    policy: PolicyInfo
    # The runtime's RuntimeCfg as JSON (kept as written; the runtime layer owns its schema).
    runtime: dict[str, Any] = field(default_factory=dict)
    version: str = ""
    # The twin's hidden cell, where one cell hosts every trial (None: each trial seed's own).
    cell: int | None = None
    # The trials against the policy's training data: "train" (its own training instances),
    # "unseen" (none of them), None (not checked).
    instances: str | None = None

    def __post_init__(self) -> None:
        _checked_info(self.to_json(), "eval info")

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Any, where: str = EVAL_JSON) -> EvalInfo:
        values = _checked_info(data, where)
        return cls(**{**values, "policy": PolicyInfo(**values["policy"])})


def _checked_info(data: Any, where: str) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise TrialLogError(f"{where}: expected a JSON object, got {type(data).__name__}")
    _no_unknown(data, tuple(EvalInfo.__dataclass_fields__), where)
    planned = _get(data, "trials_planned", int, where)
    if planned <= 0:
        raise TrialLogError(f"{where}: field 'trials_planned' is {planned}, expected > 0")
    return {
        "protocol": _get(data, "protocol", str, where),
        "protocol_seed": _get(data, "protocol_seed", int, where),
        "rig": _choice(_get(data, "rig", str, where), "rig", RIGS, where),
        "trials_planned": planned,
        "policy": _checked_policy(_get(data, "policy", dict, where), f"{where}: policy"),
        "runtime": dict(_get(data, "runtime", dict, where)),
        "version": _get(data, "version", str, where),
        # Logs from before the field: each trial on its seed's own cell.
        "cell": _get(data, "cell", (int, type(None)), where) if "cell" in data else None,
        "instances": _choice(data.get("instances"), "instances", (*INSTANCE_KINDS, None), where),
    }


@dataclass(frozen=True)
class TrialLog:
    """One evaluation directory, read and checked."""

    dir: Path
    info: EvalInfo
    # The finished trials in the order they were logged.
    records: tuple[TrialRecord, ...]
    # records[i] is line line_numbers[i] (1-based) of trials.jsonl.
    line_numbers: tuple[int, ...]

    @property
    def path(self) -> Path:
        """The trial log these records came from."""
        return self.dir / TRIALS_JSONL


def write_eval_info(directory: Path, info: EvalInfo) -> Path:
    """Write ``directory/eval.json`` atomically (a temporary file renamed into place)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / EVAL_JSON
    tmp = path.with_name(path.name + ".partial")
    with open(tmp, "w") as f:
        json.dump(info.to_json(), f, indent=2)
        f.write("\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    return path


def read_eval_info(directory: Path) -> EvalInfo:
    """``directory/eval.json``, checked."""
    path = Path(directory) / EVAL_JSON
    if not path.is_file():
        raise TrialLogError(
            f"{path}: missing; {directory} is not an evaluation directory "
            "(r2s2r eval --out DIR writes eval.json and trials.jsonl)"
        )
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise TrialLogError(f"{path}: not valid JSON ({err})") from None
    return EvalInfo.from_json(data, str(path))


def _drop_torn_tail(path: Path) -> None:
    """Before appending, end the file with a newline: a complete last line without one gets
    its newline; a torn one (a crash mid-write, not JSON) is cut off with a warning."""
    with open(path, "rb+") as f:
        size = f.seek(0, os.SEEK_END)
        if size == 0:
            return
        f.seek(size - 1)
        if f.read(1) == b"\n":
            return
        f.seek(0)
        data = f.read()
        start = data.rfind(b"\n") + 1
        try:
            json.loads(data[start:])
        except (json.JSONDecodeError, UnicodeDecodeError):
            log.warning("%s: dropping a torn last line (%d bytes)", path, size - start)
            f.truncate(start)
        else:
            f.write(b"\n")


def append_trial(path: Path, record: TrialRecord) -> None:
    """Append ``record`` as one line of the trial log at ``path``, flushed and fsynced."""
    path = Path(path)
    line = json.dumps(record.to_json(), allow_nan=False) + "\n"
    if path.exists():
        _drop_torn_tail(path)
    with open(path, "a") as f:
        f.write(line)
        f.flush()
        os.fsync(f.fileno())


def _parse_lines(path: Path) -> tuple[list[TrialRecord], list[int]]:
    text = path.read_bytes()
    lines = text.split(b"\n")
    # A file ending with a newline splits into a last empty piece; otherwise the last piece
    # is a line that was never finished.
    unfinished = lines.pop()
    records: list[TrialRecord] = []
    numbers: list[int] = []
    seen: dict[int, int] = {}
    pieces = [(i + 1, raw, True) for i, raw in enumerate(lines)]
    if unfinished.strip():
        pieces.append((len(lines) + 1, unfinished, False))
    for number, raw, finished in pieces:
        where = f"{path}:{number}"
        try:
            data = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError) as err:
            if not finished:
                log.warning("%s: ignoring a torn last line (a crash mid-write?)", where)
                continue
            detail = "an empty line" if not raw.strip() else f"not valid JSON ({err})"
            raise TrialLogError(f"{where}: {detail}") from None
        record = TrialRecord.from_json(data, where)
        if record.trial in seen:
            raise TrialLogError(
                f"{where}: trial {record.trial} is logged twice (first on line "
                f"{seen[record.trial]})"
            )
        seen[record.trial] = number
        records.append(record)
        numbers.append(number)
    return records, numbers


def read_trials(directory: Path) -> TrialLog:
    """Read an evaluation directory: its ``eval.json`` and every trial of ``trials.jsonl``
    (none yet when the file does not exist)."""
    directory = Path(directory)
    info = read_eval_info(directory)
    path = directory / TRIALS_JSONL
    records, numbers = _parse_lines(path) if path.exists() else ([], [])
    return TrialLog(directory, info, tuple(records), tuple(numbers))


def check_comparable(logs: Sequence[TrialLog]) -> None:
    """Fail unless the evaluations ran the same protocol, protocol seed and rig, and every
    trial index they share is the same trial (seed, condition, object)."""
    if not logs:
        return
    first = logs[0]
    dirs = [log_.dir.resolve() for log_ in logs]
    for i, d in enumerate(dirs):
        if d in dirs[:i]:
            raise TrialLogError(f"{logs[i].dir}: given twice")
    ref = first.info
    for other in logs[1:]:
        info = other.info
        for name in ("protocol", "protocol_seed", "rig", "cell"):
            a, b = getattr(ref, name), getattr(info, name)
            if a != b:
                raise TrialLogError(
                    f"{other.dir / EVAL_JSON}: {name} is {b!r} but {first.dir / EVAL_JSON} "
                    f"has {a!r}: evaluations compared together must share protocol, "
                    "protocol seed and rig"
                )
    owner: dict[int, tuple[TrialRecord, Path]] = {}
    for log_ in logs:
        for record in log_.records:
            key = (record.seed, record.condition, record.object)
            if record.trial not in owner:
                owner[record.trial] = (record, log_.path)
                continue
            seen, where = owner[record.trial]
            if (seen.seed, seen.condition, seen.object) != key:
                raise TrialLogError(
                    f"{log_.path}: trial {record.trial} is {record.condition}/seed "
                    f"{record.seed}/{record.object} here but {seen.condition}/seed "
                    f"{seen.seed}/{seen.object} in {where}: the evaluations did not run the "
                    "same trial list"
                )
