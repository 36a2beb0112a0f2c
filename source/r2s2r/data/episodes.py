"""The episodes table (``meta/episodes/...parquet``): one row per saved episode.

It is the dataset's commit record: an episode exists once its row is in this table. Columns
follow LeRobot v3 (index ranges, file locations, per-episode stats) plus this project's
metadata (``EPISODE_META_FIELDS``) and ``success``.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from typing import Any

import numpy as np
import pyarrow as pa

from r2s2r.data import stats as st
from r2s2r.data.config import EPISODE_META_FIELDS, DatasetCfg, DatasetError
from r2s2r.data.layout import PENDING

_TYPES: dict[str, pa.DataType] = {
    "string": pa.string(),
    "float64": pa.float64(),
    "int64": pa.int64(),
    "list<string>": pa.list_(pa.string()),
}


def schema(cfg: DatasetCfg) -> pa.Schema:
    """The table's schema for a dataset with ``cfg``'s cameras."""
    fields: list[tuple[str, pa.DataType]] = [
        ("episode_index", pa.int64()),
        ("tasks", pa.list_(pa.string())),
        ("length", pa.int64()),
        ("dataset_from_index", pa.int64()),
        ("dataset_to_index", pa.int64()),
        ("data/chunk_index", pa.int64()),
        ("data/file_index", pa.int64()),
    ]
    for cam in cfg.cameras:
        fields += [
            (f"videos/{cam.key}/chunk_index", pa.int64()),
            (f"videos/{cam.key}/file_index", pa.int64()),
            (f"videos/{cam.key}/from_timestamp", pa.float64()),
            (f"videos/{cam.key}/to_timestamp", pa.float64()),
        ]
    fields += [("meta/episodes/chunk_index", pa.int64()), ("meta/episodes/file_index", pa.int64())]
    fields += [("success", pa.bool_())]
    fields += [(name, _TYPES[kind]) for name, kind in EPISODE_META_FIELDS.items()]
    for key in (*cfg.vector_keys, *(c.key for c in cfg.cameras)):
        fields += [(f"stats/{key}/{name}", pa.list_(pa.float64())) for name in st.VECTOR_STATS]
    fields += [(f"stats/{c.key}/histogram", pa.list_(pa.int64())) for c in cfg.cameras]
    return pa.schema(fields)


def check_meta(meta: Mapping[str, Any]) -> dict[str, Any]:
    """``meta`` with every known field present (absent ones as None); unknown keys raise."""
    for key in meta:
        if key not in EPISODE_META_FIELDS:
            close = difflib.get_close_matches(key, EPISODE_META_FIELDS, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise DatasetError(
                f"episode meta: unknown field {key!r}{hint}; known: {list(EPISODE_META_FIELDS)}"
            )
    out: dict[str, Any] = {}
    for key, kind in EPISODE_META_FIELDS.items():
        value = meta.get(key)
        if value is not None:
            try:
                if kind == "string":
                    value = str(value)
                elif kind == "float64":
                    value = float(value)
                elif kind == "int64":
                    value = int(value)
                else:
                    value = [str(v) for v in value]
            except (TypeError, ValueError) as err:
                raise DatasetError(f"episode meta: {key!r} must be {kind}, got {value!r}") from err
        out[key] = value
    return out


def make_row(
    cfg: DatasetCfg,
    episode_index: int,
    task: str,
    length: int,
    from_index: int,
    success: bool,
    meta: dict[str, Any],
    vector_stats: dict[str, st.Stats],
    histograms: dict[str, np.ndarray],
) -> dict[str, Any]:
    """One row of the table, of a pending episode (``layout.PENDING`` as its chunk and file
    index: its files are in ``layout.pending_dir``)."""
    row: dict[str, Any] = {
        "episode_index": episode_index,
        "tasks": [task],
        "length": length,
        "dataset_from_index": from_index,
        "dataset_to_index": from_index + length,
        "data/chunk_index": PENDING,
        "data/file_index": PENDING,
    }
    for cam in cfg.cameras:
        row[f"videos/{cam.key}/chunk_index"] = PENDING
        row[f"videos/{cam.key}/file_index"] = PENDING
        row[f"videos/{cam.key}/from_timestamp"] = 0.0
        row[f"videos/{cam.key}/to_timestamp"] = length / cfg.fps
    row["meta/episodes/chunk_index"] = 0
    row["meta/episodes/file_index"] = 0
    row["success"] = bool(success)
    row.update(meta)
    all_stats = dict(vector_stats)
    for key, hist in histograms.items():
        all_stats[key] = st.histogram_stats(hist, length)
        row[f"stats/{key}/histogram"] = hist.ravel().tolist()
    for key, s in all_stats.items():
        for name in st.VECTOR_STATS:
            row[f"stats/{key}/{name}"] = np.ravel(s[name]).tolist()
    return row


def grouped(
    cfg: DatasetCfg, row: dict[str, Any], chunk: int, file: int, starts: dict[str, float]
) -> dict[str, Any]:
    """``row`` pointing at group files (``chunk``, ``file``), its frames starting at
    ``starts[key]`` seconds in each camera's video."""
    out = {**row, "data/chunk_index": chunk, "data/file_index": file}
    span = row["length"] / cfg.fps
    for cam in cfg.cameras:
        out[f"videos/{cam.key}/chunk_index"] = chunk
        out[f"videos/{cam.key}/file_index"] = file
        out[f"videos/{cam.key}/from_timestamp"] = starts[cam.key]
        out[f"videos/{cam.key}/to_timestamp"] = starts[cam.key] + span
    return out


def dataset_stats(cfg: DatasetCfg, rows: list[dict[str, Any]]) -> dict[str, st.Stats]:
    """The dataset's stats from the rows' per-episode stats."""
    out: dict[str, st.Stats] = {}
    if not rows:
        return out
    for key in cfg.vector_keys:
        parts = [
            {name: np.asarray(r[f"stats/{key}/{name}"]) for name in st.VECTOR_STATS} for r in rows
        ]
        out[key] = st.aggregate_vector_stats(parts)
    for cam in cfg.cameras:
        hist = sum(np.asarray(r[f"stats/{cam.key}/histogram"]).reshape(3, 256) for r in rows)
        out[cam.key] = st.histogram_stats(np.asarray(hist), sum(r["length"] for r in rows))
    return out
