"""Checkpoints of a training run, written and read without pickle.

A run folder holds::

    RUN/config.json                     the run's TrainCfg, PolicyCfg, domains, fingerprints
    RUN/metrics.jsonl                   one line per logged step
    RUN/checkpoints/LATEST              the name of the newest complete checkpoint
    RUN/checkpoints/step_000400/
        model.safetensors               every weight of the model
        ema.safetensors                 the EMA of the trainable weights
        optimizer.safetensors           the optimizer's per-parameter tensors
        norm.safetensors                normalization statistics (state, internal action)
        rng.safetensors                 torch's RNG states
        trainer.json                    step, optimizer groups, numpy/python RNG states

A checkpoint is written into a temporary folder and renamed into place, then ``LATEST`` is
replaced atomically: a crash leaves the previous checkpoint as the newest complete one.
Everything is safetensors (tensors) or JSON (the rest); loading never unpickles.
"""

from __future__ import annotations

import json
import os
import random
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from r2s2r.policy.base import PolicyError
from r2s2r.policy.normalize import NormStats

CONFIG_FILE = "config.json"
CHECKPOINTS = "checkpoints"
LATEST = "LATEST"
MODEL_FILE = "model.safetensors"
EMA_FILE = "ema.safetensors"
OPTIMIZER_FILE = "optimizer.safetensors"
NORM_FILE = "norm.safetensors"
RNG_FILE = "rng.safetensors"
TRAINER_FILE = "trainer.json"


def step_dir(run: Path, step: int) -> Path:
    return run / CHECKPOINTS / f"step_{step:06d}"


def write_json(path: Path, data: Any) -> None:
    """Write JSON atomically."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, default=str) + "\n")
    os.replace(tmp, path)


def read_json(path: Path) -> Any:
    if not path.is_file():
        raise PolicyError(f"{path}: missing")
    try:
        return json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise PolicyError(f"{path}: not valid JSON ({err})") from None


def read_tensors(path: Path) -> dict[str, torch.Tensor]:
    """A safetensors file's tensors, or a ``PolicyError`` naming the file."""
    if not path.is_file():
        raise PolicyError(f"{path}: missing (an incomplete or foreign checkpoint)")
    try:
        return load_file(str(path))
    except (SafetensorError, OSError, ValueError) as err:
        raise PolicyError(f"{path}: not a readable safetensors file ({err})") from None


def _contiguous(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {k: v.detach().contiguous().cpu() for k, v in tensors.items()}


# ---------------------------------------------------------------------- optimizer state
def optimizer_tensors(state: dict[str, Any]) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """An optimizer ``state_dict`` as tensors (``state.<param>.<key>``) and the JSON rest."""
    tensors: dict[str, torch.Tensor] = {}
    scalars: dict[str, dict[str, Any]] = {}
    for index, entry in state["state"].items():
        for key, value in entry.items():
            if isinstance(value, torch.Tensor):
                tensors[f"state.{index}.{key}"] = value
            else:
                scalars.setdefault(str(index), {})[key] = value
    return _contiguous(tensors), {"param_groups": state["param_groups"], "scalars": scalars}


def optimizer_state(tensors: dict[str, torch.Tensor], rest: dict[str, Any]) -> dict[str, Any]:
    """The inverse of ``optimizer_tensors``."""
    state: dict[int, dict[str, Any]] = {}
    for name, value in tensors.items():
        _, index, key = name.split(".", 2)
        state.setdefault(int(index), {})[key] = value
    for index, entry in rest.get("scalars", {}).items():
        state.setdefault(int(index), {}).update(entry)
    return {"state": state, "param_groups": rest["param_groups"]}


# ---------------------------------------------------------------------- RNG states
def rng_states() -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """torch's CPU (and CUDA) RNG states as tensors; numpy's and Python's as JSON."""
    tensors = {"torch.cpu": torch.get_rng_state()}
    if torch.cuda.is_available():
        for i, s in enumerate(torch.cuda.get_rng_state_all()):
            tensors[f"torch.cuda.{i}"] = s
    # The legacy global generator: what third-party code (augmentations, libraries) draws from.
    kind, keys, pos, has_gauss, gauss = np.random.get_state()  # noqa: NPY002
    version, pystate, pygauss = random.getstate()
    rest = {
        "numpy": [kind, np.asarray(keys).tolist(), int(pos), int(has_gauss), float(gauss)],
        "python": [version, list(pystate), pygauss],
    }
    return tensors, rest


def set_rng_states(tensors: dict[str, torch.Tensor], rest: dict[str, Any]) -> None:
    torch.set_rng_state(tensors["torch.cpu"])
    cuda = [tensors[k] for k in sorted(tensors) if k.startswith("torch.cuda.")]
    if cuda and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(cuda)
    kind, keys, pos, has_gauss, gauss = rest["numpy"]
    state = (kind, np.asarray(keys, dtype=np.uint32), pos, has_gauss, gauss)
    np.random.set_state(state)  # noqa: NPY002
    version, pystate, pygauss = rest["python"]
    random.setstate((version, tuple(pystate), pygauss))


# ---------------------------------------------------------------------- checkpoints
@dataclass
class Checkpoint:
    """What one checkpoint holds, as read back."""

    path: Path
    step: int
    model: dict[str, torch.Tensor]
    ema: dict[str, torch.Tensor]
    optimizer: dict[str, Any] | None
    norm: NormStats
    trainer: dict[str, Any]
    rng: dict[str, torch.Tensor]


def save_checkpoint(
    run: Path,
    step: int,
    model: dict[str, torch.Tensor],
    ema: dict[str, torch.Tensor],
    optimizer: dict[str, Any],
    norm: NormStats,
    trainer: dict[str, Any],
    keep: int = 2,
) -> Path:
    """Write the checkpoint of ``step`` and make it the newest; keep the last ``keep``."""
    final = step_dir(run, step)
    tmp = final.with_name(final.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    save_file(_contiguous(model), str(tmp / MODEL_FILE))
    save_file(_contiguous(ema), str(tmp / EMA_FILE))
    opt_tensors, opt_rest = optimizer_tensors(optimizer)
    save_file(opt_tensors, str(tmp / OPTIMIZER_FILE))
    norm_arrays = {
        k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in norm.to_arrays().items()
    }
    save_file(norm_arrays, str(tmp / NORM_FILE))
    rng_tensors, rng_rest = rng_states()
    save_file(rng_tensors, str(tmp / RNG_FILE))
    write_json(
        tmp / TRAINER_FILE, {**trainer, "step": step, "optimizer": opt_rest, "rng": rng_rest}
    )
    shutil.rmtree(final, ignore_errors=True)
    os.replace(tmp, final)
    latest = run / CHECKPOINTS / LATEST
    tmp_latest = latest.with_name(LATEST + ".tmp")
    tmp_latest.write_text(final.name + "\n")
    os.replace(tmp_latest, latest)
    old = sorted(p for p in (run / CHECKPOINTS).glob("step_*") if p.is_dir() and p != final)
    for path in old[: max(0, len(old) - (keep - 1))]:
        if not path.name.endswith(".tmp"):
            shutil.rmtree(path, ignore_errors=True)
    return final


def latest_checkpoint(run: Path) -> Path | None:
    """The newest complete checkpoint folder of ``run``, or None."""
    latest = run / CHECKPOINTS / LATEST
    if not latest.is_file():
        return None
    path = run / CHECKPOINTS / latest.read_text().strip()
    if not path.is_dir():
        raise PolicyError(f"{latest}: names {path.name}, which is missing")
    return path


def resolve_checkpoint(path: Path) -> Path:
    """A checkpoint folder from a run folder (its newest checkpoint) or a checkpoint folder."""
    path = Path(path)
    if (path / MODEL_FILE).is_file():
        return path
    if not path.exists():
        raise PolicyError(f"{path}: no such run or checkpoint folder")
    found = latest_checkpoint(path)
    if found is None:
        raise PolicyError(
            f"{path}: neither a checkpoint folder (with {MODEL_FILE}) nor a run folder with "
            f"{CHECKPOINTS}/{LATEST}"
        )
    return found


def load_checkpoint(path: Path, optimizer: bool = True) -> Checkpoint:
    """Read a checkpoint folder (or a run's newest), never unpickling."""
    path = resolve_checkpoint(path)
    trainer = read_json(path / TRAINER_FILE)
    if "step" not in trainer:
        raise PolicyError(f"{path / TRAINER_FILE}: no 'step' entry")
    norm_arrays = {k: v.numpy() for k, v in read_tensors(path / NORM_FILE).items()}
    try:
        norm = NormStats.from_arrays(norm_arrays)
    except (KeyError, ValueError) as err:
        raise PolicyError(f"{path / NORM_FILE}: not normalization statistics ({err})") from None
    opt = None
    if optimizer:
        opt = optimizer_state(read_tensors(path / OPTIMIZER_FILE), trainer["optimizer"])
    return Checkpoint(
        path=path,
        step=int(trainer["step"]),
        model=read_tensors(path / MODEL_FILE),
        ema=read_tensors(path / EMA_FILE),
        optimizer=opt,
        norm=norm,
        trainer=trainer,
        rng=read_tensors(path / RNG_FILE) if optimizer else {},
    )
