"""System identification recordings: what is captured through a rig, and how it is stored.

An identification run sends an excitation (``sysid_excite.arm_excitation``,
``sysid_excite.hand_excitation``) through the safety supervisor at the control rate and keeps,
for every period ``i``, the reading taken at ``t[i]`` and the command sent right after it.
Row ``i + 1`` therefore shows the effect of the commands up to row ``i``. Recordings are
parquet files (one row per period, vectors as fixed-size lists) with their metadata as JSON
in the schema; the fitting code sees only these and the nominal WorldSpec.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from tqdm import tqdm

from r2s2r.rig.safety import SafetySupervisor
from r2s2r.sim.embodiment import TCP_POSE_DIM

FORMAT_VERSION = 1
_META_KEY = b"r2s2r_sysid"
# Supervisor interventions that mean the arm did not receive what the recording says.
_INTERVENTIONS = ("rejected", "clamped", "limited", "hold", "stop", "estop", "camera_stall")


class SysIdError(ValueError):
    """A recording that cannot be used for identification, and what to record instead."""


# A field's width: None for a scalar per row, a number fixed by the format, or the name of a
# joint count ("arm", "hand"), which is the same for every field that names it and is the
# recorded embodiment's (the fit checks it against the model it identifies).
Width = int | str | None


def _check_rows(source: str, fields: Mapping[str, np.ndarray], widths: Mapping[str, Width]) -> int:
    """Raise unless every field is finite with the same number of rows and its width (a named
    width is taken from the first field that has it)."""
    rows = {name: a.shape[0] for name, a in fields.items()}
    n = rows["t"]
    named: dict[str, tuple[str, int]] = {}
    for name, a in fields.items():
        width = widths.get(name)
        if isinstance(width, str) and a.ndim == 2:
            first, count = named.setdefault(width, (name, a.shape[1]))
            if a.shape[1] != count:
                raise SysIdError(
                    f"{source}: field '{name}' has {a.shape[1]} {width} joints but '{first}' has "
                    f"{count}; every {width} field is one entry per joint of the same {width}"
                )
            width = count
        shape_ok = a.ndim == (1 if width is None else 2) and (width is None or a.shape[1] == width)
        if not shape_ok:
            want = "(T,)" if width is None else f"(T, {width})"
            raise SysIdError(f"{source}: field '{name}' has shape {a.shape}, expected {want}")
        if rows[name] != n:
            raise SysIdError(
                f"{source}: field '{name}' has {rows[name]} rows but 't' has {n}; "
                "every field needs one row per control period (re-record the run)"
            )
        if not np.isfinite(a).all():
            raise SysIdError(f"{source}: field '{name}' contains NaN or infinite values")
    return n


def check_joints(field: str, got: int, want: int, what: str, source: str = "recording") -> None:
    """Refuse a recording made with another embodiment than the model it is fitted to."""
    if got != want:
        raise SysIdError(
            f"{source}: field '{field}' holds {got} {what} joints, the nominal cell's {what} has "
            f"{want}; identify a recording made with this cell's embodiment"
        )


def _check_clock(source: str, t: np.ndarray, hz: float) -> None:
    if len(t) < 2:
        raise SysIdError(f"{source}: {len(t)} samples; record at least a few seconds")
    dt = np.diff(t)
    if np.abs(dt - 1.0 / hz).max() > 0.25 / hz:
        raise SysIdError(
            f"{source}: field 't' is not sampled at {hz:g} Hz (periods {dt.min():.4f} to "
            f"{dt.max():.4f} s); record one row per control period without gaps"
        )


@dataclass(frozen=True)
class ArmRecording:
    """One arm's excitation run at the control rate (row i: reading at t[i], then target[i])."""

    side: str
    hz: float
    t: np.ndarray  # (T,) seconds on the rig's clock
    target: np.ndarray  # (T, 7) commanded TCP pose (x y z qw qx qy qz)
    tcp: np.ndarray  # (T, 7) measured TCP pose
    q: np.ndarray  # (T, arm joints) measured joint positions
    dq: np.ndarray  # (T, arm joints) measured joint velocities
    hand_q: np.ndarray  # (T, hand joints) measured joint positions of the hand on this arm
    meta: dict[str, Any] = field(default_factory=dict)
    source: str = "<memory>"

    def __post_init__(self) -> None:
        fields = {k: np.asarray(getattr(self, k), dtype=float) for k in _ARM_WIDTHS}
        for k, v in fields.items():
            object.__setattr__(self, k, v)
        _check_rows(self.source, fields, _ARM_WIDTHS)
        _check_clock(self.source, self.t, self.hz)

    @property
    def duration_s(self) -> float:
        return float(self.t[-1] - self.t[0])

    def save(self, path: str | Path) -> Path:
        """Write the recording as parquet; returns the path."""
        meta = {"side": self.side, "hz": self.hz, "meta": self.meta}
        return _write(path, "arm", {k: getattr(self, k) for k in _ARM_WIDTHS}, meta)

    @classmethod
    def load(cls, path: str | Path) -> ArmRecording:
        """Read a recording written by ``save``; raises SysIdError on a bad file."""
        cols, meta = _read(path, "arm", _ARM_WIDTHS)
        return cls(side=meta["side"], hz=meta["hz"], meta=meta["meta"], source=str(path), **cols)


_ARM_WIDTHS: dict[str, Width] = {
    "t": None,
    "target": TCP_POSE_DIM,
    "tcp": TCP_POSE_DIM,
    "q": "arm",
    "dq": "arm",
    "hand_q": "hand",
}


@dataclass(frozen=True)
class HandRecording:
    """Hand excitation episodes on one hand with its arm held still.

    Every episode starts at rest (its first target held before recording) and has the same
    number of periods T; row i of an episode is the reading at t[e, i], then target[e, i].
    """

    side: str
    hz: float
    t: np.ndarray  # (E, T) seconds on the rig's clock
    target: np.ndarray  # (E, T, hand joints) commanded joint positions
    q: np.ndarray  # (E, T, hand joints) measured joint positions
    arm_q: np.ndarray  # (E, T, arm joints) measured joint positions of the arm holding the hand
    meta: dict[str, Any] = field(default_factory=dict)
    source: str = "<memory>"

    def __post_init__(self) -> None:
        arrays = {k: np.asarray(getattr(self, k), dtype=float) for k in _HAND_WIDTHS}
        for k, v in arrays.items():
            object.__setattr__(self, k, v)
        t = arrays["t"]
        if t.ndim != 2 or t.shape[0] == 0:
            raise SysIdError(f"{self.source}: field 't' has shape {t.shape}, expected (E, T)")
        for k, v in arrays.items():
            if v.shape[0] != t.shape[0]:
                raise SysIdError(
                    f"{self.source}: field '{k}' has {v.shape[0]} episodes, 't' has {t.shape[0]}"
                )
        for e in range(t.shape[0]):
            where = f"{self.source} episode {e}"
            _check_rows(where, {k: v[e] for k, v in arrays.items()}, _HAND_WIDTHS)
            _check_clock(where, t[e], self.hz)

    @property
    def episodes(self) -> int:
        return int(self.t.shape[0])

    def save(self, path: str | Path) -> Path:
        """Write all episodes as parquet (an ``episode`` column tells them apart)."""
        e, n = self.t.shape
        cols = {
            "episode": np.repeat(np.arange(e), n),
            "t": self.t.reshape(-1),
            "target": self.target.reshape(-1, self.target.shape[-1]),
            "q": self.q.reshape(-1, self.q.shape[-1]),
            "arm_q": self.arm_q.reshape(-1, self.arm_q.shape[-1]),
        }
        meta = {"side": self.side, "hz": self.hz, "meta": self.meta}
        return _write(path, "hand", cols, meta)

    @classmethod
    def load(cls, path: str | Path) -> HandRecording:
        """Read episodes written by ``save``; raises SysIdError on a bad file."""
        cols, meta = _read(path, "hand", {"episode": None, **_HAND_WIDTHS})
        episode = cols.pop("episode").astype(int)
        counts = np.bincount(episode) if len(episode) else np.zeros(0, int)
        if len(counts) == 0 or (counts != counts[0]).any():
            raise SysIdError(
                f"{path}: episodes have different lengths {counts.tolist()}; "
                "record every episode with the same number of periods"
            )
        order = np.argsort(episode, kind="stable")
        e = len(counts)
        arrays = {k: v[order].reshape(e, counts[0], *v.shape[1:]) for k, v in cols.items()}
        return cls(side=meta["side"], hz=meta["hz"], meta=meta["meta"], source=str(path), **arrays)


_HAND_WIDTHS: dict[str, Width] = {"t": None, "target": "hand", "q": "hand", "arm_q": "arm"}


# ------------------------------------------------------------------ parquet


def _write(path: str | Path, kind: str, cols: Mapping[str, np.ndarray], meta: dict) -> Path:
    path = Path(path)
    arrays = {}
    for name, a in cols.items():
        a = np.asarray(a)
        if a.ndim == 2:
            flat = pa.array(np.ascontiguousarray(a, dtype=np.float64).reshape(-1))
            arrays[name] = pa.FixedSizeListArray.from_arrays(flat, a.shape[1])
        else:
            arrays[name] = pa.array(a)
    info = {"kind": kind, "version": FORMAT_VERSION, **meta}
    table = pa.table(arrays).replace_schema_metadata({_META_KEY: json.dumps(info).encode()})
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path)
    return path


def _read(
    path: str | Path, kind: str, widths: Mapping[str, Width]
) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    path = Path(path)
    what = "sysid_excite.arm_excitation + record_arms" if kind == "arm" else "record_hands"
    if not path.is_file():
        raise SysIdError(f"{path}: no such recording; record one with {what}")
    try:
        table = pq.read_table(path)
    except (pa.ArrowException, OSError) as exc:
        raise SysIdError(
            f"{path}: not a readable parquet recording ({exc}); it may be truncated, "
            f"re-record it with {what}"
        ) from exc
    raw = (table.schema.metadata or {}).get(_META_KEY)
    if raw is None:
        raise SysIdError(f"{path}: no r2s2r sysid metadata; write recordings with .save()")
    info = json.loads(raw)
    if info.get("kind") != kind:
        raise SysIdError(f"{path}: holds a {info.get('kind')!r} recording, expected {kind!r}")
    cols: dict[str, np.ndarray] = {}
    for name, width in widths.items():
        if name not in table.column_names:
            raise SysIdError(f"{path}: missing field '{name}'; re-record with {what}")
        col = table.column(name).combine_chunks()
        if width is None:
            cols[name] = col.to_numpy(zero_copy_only=False)
        else:
            fixed = pa.types.is_fixed_size_list(col.type)
            if not fixed or (isinstance(width, int) and col.type.list_size != width):
                want = f"{width} floats" if isinstance(width, int) else f"a list per {width} joint"
                raise SysIdError(f"{path}: field '{name}' is {col.type}, expected {want}")
            size = col.type.list_size
            cols[name] = col.values.to_numpy(zero_copy_only=False).reshape(-1, size)
    return cols, {k: info[k] for k in ("side", "hz", "meta")}


# ------------------------------------------------------------------ recording


def _check_interventions(sup: SafetySupervisor, since: int, devices: Sequence[str]) -> None:
    bad = [e for e in sup.events[since:] if e.device in devices and e.kind in _INTERVENTIONS]
    if bad:
        first = bad[0]
        raise SysIdError(
            f"the safety supervisor intervened {len(bad)} times during the recording (first: "
            f"{first.device} {first.kind}: {first.detail}); the robot did not receive the "
            "excitation. Keep the excitation inside SafetyLimits (workspace box, target speed)"
        )


def _move_to(
    sup: SafetySupervisor,
    sides: Sequence[str],
    goal: Mapping[str, np.ndarray],
    step: Callable[[], None],
    hz: float,
    settle_s: float,
    speed: float = 0.2,
) -> None:
    """Bring each arm's target to ``goal`` at a gentle speed, then hold it ``settle_s``."""
    start = {s: sup.arm(s).state().tcp_pose for s in sides}
    dist = max(float(np.linalg.norm(goal[s][:3] - start[s][:3])) for s in sides)
    turn = max(_angle(goal[s][3:], start[s][3:]) for s in sides)
    n = int(np.ceil(max(dist / speed, turn / 1.0) * hz))
    for i in range(1, n + 1):
        for s in sides:
            sup.arm(s).send_tcp_target(_interp_pose(start[s], goal[s], i / n))
        sup.tick()
        step()
    for _ in range(int(round(settle_s * hz))):
        for s in sides:
            sup.arm(s).send_tcp_target(goal[s])
        sup.tick()
        step()


def _angle(a: np.ndarray, b: np.ndarray) -> float:
    dot = abs(float(np.dot(a, b)) / float(np.linalg.norm(a) * np.linalg.norm(b)))
    return 2.0 * float(np.arccos(min(1.0, dot)))


def _interp_pose(a: np.ndarray, b: np.ndarray, s: float) -> np.ndarray:
    """Linear position and normalised-lerp orientation between poses a and b."""
    qb = b[3:] if np.dot(a[3:], b[3:]) >= 0 else -b[3:]
    quat = (1 - s) * a[3:] + s * qb
    return np.concatenate([(1 - s) * a[:3] + s * b[:3], quat / np.linalg.norm(quat)])


def record_arms(
    sup: SafetySupervisor,
    targets: Mapping[str, np.ndarray],
    step: Callable[[], None],
    hz: float = 50.0,
    settle_s: float = 1.0,
    meta: Mapping[str, Any] | None = None,
    progress: bool = True,
) -> dict[str, ArmRecording]:
    """Send each arm (supervisor name, e.g. ``left``) its TCP poses (T, 7) through the
    supervisor, one per period, and record what it does; all arms run at the same time.

    The arms first move to their first target and hold it ``settle_s``, so every recording
    starts at rest. ``step`` advances one control period (twin: ``rig.step``; hardware:
    wait for the next period). Raises SysIdError if the supervisor altered any command.
    """
    sides = list(targets)
    lengths = {s: len(targets[s]) for s in sides}
    if len(set(lengths.values())) != 1:
        raise SysIdError(f"targets: every arm needs the same number of periods, got {lengths}")
    for s in sides:
        shape = np.asarray(targets[s]).shape
        if len(shape) != 2 or shape[1] != TCP_POSE_DIM:
            raise SysIdError(f"targets[{s!r}]: expected shape (T, {TCP_POSE_DIM}), got {shape}")
    _move_to(sup, sides, {s: targets[s][0] for s in sides}, step, hz, settle_s)
    names = [sup.arm(s).name for s in sides] + ["all"]
    since = len(sup.events)
    n = lengths[sides[0]]
    rows: dict[str, dict[str, list[np.ndarray]]] = {
        s: {k: [] for k in _ARM_WIDTHS if k != "target"} for s in sides
    }
    for i in tqdm(range(n), desc="record arms", unit="period", disable=not progress):
        for s in sides:
            arm_state, hand_state = sup.arm(s).state(), sup.hand(s).state()
            r = rows[s]
            r["t"].append(np.asarray(arm_state.stamp))
            r["tcp"].append(arm_state.tcp_pose)
            r["q"].append(arm_state.q)
            r["dq"].append(arm_state.dq)
            r["hand_q"].append(hand_state.q)
            sup.arm(s).send_tcp_target(targets[s][i])
        sup.tick()
        step()
    _check_interventions(sup, since, names)
    return {
        s: ArmRecording(
            side=s,
            hz=hz,
            t=np.asarray(rows[s]["t"]),
            target=np.asarray(targets[s], dtype=float),
            tcp=np.asarray(rows[s]["tcp"]),
            q=np.asarray(rows[s]["q"]),
            dq=np.asarray(rows[s]["dq"]),
            hand_q=np.asarray(rows[s]["hand_q"]),
            meta=dict(meta or {}),
        )
        for s in sides
    }


def record_hands(
    sup: SafetySupervisor,
    episodes: Mapping[str, Sequence[np.ndarray]],
    step: Callable[[], None],
    hz: float = 50.0,
    settle_s: float = 1.0,
    meta: Mapping[str, Any] | None = None,
    progress: bool = True,
) -> dict[str, HandRecording]:
    """Play joint-target episodes (each (T, hand joints)) on each hand (supervisor name), all
    hands at once, and record the joints; the arms hold their current pose meanwhile.

    Each episode's first target is held ``settle_s`` before recording, so it starts at rest.
    """
    sides = list(episodes)
    counts = {s: len(episodes[s]) for s in sides}
    if len(set(counts.values())) != 1:
        raise SysIdError(f"episodes: every hand needs the same number of episodes, got {counts}")
    hand_dof, arm_dof = sup.embodiment.hand_dof, sup.embodiment.arm_dof
    shapes = {np.asarray(ep).shape for s in sides for ep in episodes[s]}
    if len(shapes) != 1 or next(iter(shapes))[1:] != (hand_dof,):
        raise SysIdError(
            f"episodes: expected equal (T, {hand_dof}) arrays (one target per joint of the "
            f"{sup.embodiment.name} hand), got shapes {sorted(shapes)}"
        )
    hold = {s: sup.arm(s).state().tcp_pose for s in sides}
    since = len(sup.events)
    n_ep, n = counts[sides[0]], next(iter(shapes))[0]
    t = {s: np.zeros((n_ep, n)) for s in sides}
    q = {s: np.zeros((n_ep, n, hand_dof)) for s in sides}
    arm_q = {s: np.zeros((n_ep, n, arm_dof)) for s in sides}
    settle = int(round(settle_s * hz))
    bar = tqdm(total=n_ep * (n + settle), desc="record hands", unit="period", disable=not progress)
    for e in range(n_ep):
        for i in range(-settle, n):
            for s in sides:
                if i >= 0:
                    state = sup.hand(s).state()
                    t[s][e, i], q[s][e, i] = state.stamp, state.q
                    arm_q[s][e, i] = sup.arm(s).state().q
                sup.hand(s).send_joint_targets(episodes[s][e][max(i, 0)])
                sup.arm(s).send_tcp_target(hold[s])
            sup.tick()
            step()
            bar.update()
    bar.close()
    _check_interventions(sup, since, [sup.hand(s).name for s in sides] + ["all"])
    return {
        s: HandRecording(
            side=s,
            hz=hz,
            t=t[s],
            target=np.asarray(episodes[s], dtype=float),
            q=q[s],
            arm_q=arm_q[s],
            meta=dict(meta or {}),
        )
        for s in sides
    }
