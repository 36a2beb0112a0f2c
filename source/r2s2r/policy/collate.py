"""Samples -> model batches (``Collate``): images as (B, V, 3, s, s) uint8, state and encoded
actions normalized and zero-padded to the policy's per-embodiment sizes; and the way back
from the model's output to robot actions (``Collate.actions_out``), used at inference."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from r2s2r.policy.actions import ActionCodec
from r2s2r.policy.base import PolicyError
from r2s2r.policy.frames import resize
from r2s2r.policy.hindsight import HINDSIGHT_DIM, PLACE_DIM
from r2s2r.policy.normalize import NormStats
from r2s2r.sim.contract import ENV_STATE_DIM


def _pad(x: np.ndarray, size: int) -> np.ndarray:
    """Zero-pad the last axis of ``x`` (..., d) to (..., size)."""
    out = np.zeros((*x.shape[:-1], size), dtype=np.float32)
    out[..., : x.shape[-1]] = x
    return out


def _images(images: Sequence[np.ndarray]) -> torch.Tensor:
    """B arrays (V, s, s, 3) uint8 -> one (B, V, 3, s, s) uint8 tensor, in one copy."""
    first = np.asarray(images[0])
    v, h, w, c = first.shape
    out = np.empty((len(images), v, c, h, w), dtype=np.uint8)
    for b, img in enumerate(images):
        arr = np.asarray(img)
        if arr.shape != first.shape or arr.dtype != np.uint8:
            raise PolicyError(
                f"images: sample {b} has {arr.shape} {arr.dtype}, expected {first.shape} uint8"
            )
        out[b] = arr.transpose(0, 3, 1, 2)
    return torch.from_numpy(out)


def to_device(batch: dict[str, Any], device: torch.device) -> dict[str, Any]:
    """A batch with its tensors on ``device``."""
    out = {}
    for k, v in batch.items():
        out[k] = v.to(device, non_blocking=True) if isinstance(v, torch.Tensor) else v
    return out


def _belt_speed(values: Sequence[float | None]) -> torch.Tensor:
    """Belt speeds (m/s) -> (B,) float32, NaN where one is not known."""
    return torch.tensor([float("nan") if v is None else float(v) for v in values])


def _targets(values: Sequence[np.ndarray | None], dim: int) -> torch.Tensor:
    """Per-sample targets (dim,) -> (B, dim) float32, NaN where a sample has none."""
    unknown = np.full(dim, np.nan, dtype=np.float32)
    rows = [unknown if v is None else np.asarray(v, dtype=np.float32) for v in values]
    return torch.from_numpy(np.stack(rows))


class Collate:
    """Builds model batches for one embodiment's codec and normalization (picklable)."""

    def __init__(
        self,
        codec: ActionCodec,
        stats: NormStats,
        max_state_dim: int,
        max_action_dim: int,
        image_size: int = 256,
    ) -> None:
        state_dim = codec.contract.state_dim
        if state_dim > max_state_dim:
            raise PolicyError(f"state: {state_dim} entries exceed max_state_dim {max_state_dim}")
        if codec.dim > max_action_dim:
            raise PolicyError(
                f"actions: {codec.dim} internal entries exceed max_action_dim {max_action_dim}"
            )
        if stats.state.dim != state_dim or stats.action.dim != codec.dim:
            raise PolicyError(
                f"normalization stats: state {stats.state.dim} and action {stats.action.dim} "
                f"entries, expected {state_dim} and {codec.dim} (the codec's)"
            )
        self.codec, self.stats = codec, stats
        self.max_state_dim, self.max_action_dim = max_state_dim, max_action_dim
        self.image_size = image_size
        self._dim_mask = np.arange(max_action_dim) < codec.dim

    def _common(
        self, images: Sequence[np.ndarray], states: np.ndarray, state_is_pad: np.ndarray
    ) -> dict[str, torch.Tensor]:
        # images: B arrays (V, s, s, 3) uint8; states (B, P, S).
        return {
            "images": _images(images),
            "state": torch.from_numpy(_pad(self.stats.state.normalize(states), self.max_state_dim)),
            "state_is_pad": torch.from_numpy(np.asarray(state_is_pad, dtype=bool)),
        }

    def __call__(self, samples: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        """Window samples (``WindowDataset`` / ``Mixture`` items) -> a batch (see module)."""
        states = np.stack([s["state"] for s in samples])  # (B, P, S)
        actions = np.stack([s["actions"] for s in samples])  # (B, H, A)
        internal = self.codec.encode(actions, states[:, -1])
        batch_size = len(samples)
        out: dict[str, Any] = self._common(
            [s["images"] for s in samples],
            states,
            np.stack([s["state_is_pad"] for s in samples]),
        )
        out["actions"] = torch.from_numpy(
            _pad(self.stats.action.normalize(internal), self.max_action_dim)
        )
        out["action_is_pad"] = torch.from_numpy(np.stack([s["action_is_pad"] for s in samples]))
        out["action_dim_mask"] = torch.from_numpy(np.tile(self._dim_mask, (batch_size, 1)))
        out["task"] = [str(s["task"]) for s in samples]
        out["embodiment_id"] = torch.tensor([int(s["embodiment_id"]) for s in samples])
        out["domain_id"] = torch.tensor([int(s.get("domain_id", 0)) for s in samples])
        out["belt_speed"] = _belt_speed([s.get("belt_speed") for s in samples])
        out["hindsight"] = _targets([s.get("hindsight") for s in samples], HINDSIGHT_DIM)
        out["place"] = _targets([s.get("place") for s in samples], PLACE_DIM)
        out["object_pose"] = _targets([s.get("object_pose") for s in samples], ENV_STATE_DIM)
        return out

    def observation(
        self,
        images: Mapping[str, np.ndarray],
        states: np.ndarray,
        task: str,
        embodiment_id: int,
        domain_id: int = 0,
        state_is_pad: np.ndarray | None = None,
        belt_speed: float | None = None,
        object_pose: np.ndarray | None = None,
    ) -> dict[str, Any]:
        """One live observation -> a batch of one without action keys: ``images`` one
        (h, w, 3) uint8 per contract camera (resized here), ``states`` (P, S) oldest first,
        ``state_is_pad`` (P,) True where the history reaches before the episode's start
        (default: none does), ``belt_speed`` the belt drive's speed in m/s (None: not known,
        which a policy that reads it refuses), ``object_pose`` the object's true pose (7,)
        (diagnosis only; None: not known)."""
        cameras = self.codec.contract.cameras
        missing = [c for c in cameras if c not in images]
        if missing:
            raise PolicyError(f"images: missing cameras {missing} (expected {list(cameras)})")
        views = []
        for c in cameras:
            img = np.asarray(images[c])
            if img.ndim != 3 or img.shape[2] != 3 or img.dtype != np.uint8:
                raise PolicyError(
                    f"images[{c!r}]: expected (H, W, 3) uint8, got {img.shape} {img.dtype}"
                )
            views.append(resize(img, self.image_size))
        states = np.asarray(states, dtype=np.float64)
        state_dim = self.codec.contract.state_dim
        if states.ndim != 2 or states.shape[1] != state_dim:
            raise PolicyError(f"states: expected (P, {state_dim}), got {states.shape}")
        pad = np.zeros(len(states), dtype=bool) if state_is_pad is None else state_is_pad
        pad = np.asarray(pad, dtype=bool)
        if pad.shape != (len(states),):
            raise PolicyError(f"state_is_pad: expected ({len(states)},), got {pad.shape}")
        out: dict[str, Any] = self._common([np.stack(views)], states[None], pad[None])
        # The model's padded action dims stay zero, as in training.
        out["action_dim_mask"] = torch.from_numpy(self._dim_mask[None].copy())
        out["task"] = [task]
        out["embodiment_id"] = torch.tensor([int(embodiment_id)])
        out["domain_id"] = torch.tensor([int(domain_id)])
        out["belt_speed"] = _belt_speed([belt_speed])
        out["object_pose"] = _targets([object_pose], ENV_STATE_DIM)
        return out

    def actions_in(self, actions: np.ndarray, state_now: np.ndarray) -> torch.Tensor:
        """Contract actions (B, T, A) in robot units and the current states (B, S) -> the
        model's normalized internal actions (B, T, max_action_dim) float32, padded dims 0
        (the inverse of ``actions_out``; what a training batch holds as ``actions``)."""
        actions = np.asarray(actions, dtype=np.float64)
        if actions.ndim != 3:
            raise PolicyError(f"actions: expected (B, T, A), got {actions.shape}")
        internal = self.codec.encode(actions, np.asarray(state_now, dtype=np.float64))
        return torch.from_numpy(_pad(self.stats.action.normalize(internal), self.max_action_dim))

    def actions_out(self, internal: torch.Tensor | np.ndarray, state_now: np.ndarray) -> np.ndarray:
        """Model output (B, H, max_action_dim), normalized internal actions, and the current
        states (B, S) -> contract actions (B, H, A) float64 in robot units."""
        if isinstance(internal, torch.Tensor):
            internal = internal.detach().float().cpu().numpy()
        internal = np.asarray(internal)
        if internal.ndim != 3 or internal.shape[-1] != self.max_action_dim:
            raise PolicyError(
                f"model actions: expected (B, H, {self.max_action_dim}), got {internal.shape}"
            )
        real = self.stats.action.unnormalize(internal[..., : self.codec.dim])
        return self.codec.decode(real, np.asarray(state_now, dtype=np.float64))
