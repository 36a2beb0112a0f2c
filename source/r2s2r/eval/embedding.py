"""The latent analysis' embeddings and neighbours: frames of a dataset through a trained
policy's observation path in batches (``embed``), and exact k-nearest-neighbour search in the
embedding space (``nearest``) with the share of each training source among the neighbours
(``shares``).

A frame's embedding is the mean over the observation transformer's output tokens (views,
instruction, proprio history and, with domain conditioning, the domain token): the context the
action transformer attends to. Frames are batched the way the policy sees one live frame
(``Collate.observation``, one per frame, then stacked), so a batch of B gives the B
embeddings a batch of one would.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Literal

import numpy as np
import torch

from r2s2r.data.config import IMAGE_PREFIX, STATE_KEY
from r2s2r.data.reader import Dataset
from r2s2r.policy.learned import LearnedPolicy

Metric = Literal["cosine", "euclidean"]


class LatentError(ValueError):
    """Bad input to the latent analysis (a setting, a dataset, a run)."""


def _concat(batches: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Batches of one (``Collate.observation``) -> one batch of B."""
    out: dict[str, Any] = {}
    for key, value in batches[0].items():
        if isinstance(value, torch.Tensor):
            out[key] = torch.cat([b[key] for b in batches])
        else:
            out[key] = [item for b in batches for item in b[key]]
    return out


def observation_batch(
    policy: LearnedPolicy, ds: Dataset, indices: Sequence[int] | np.ndarray
) -> dict:
    """The model batch of frames ``indices`` of ``ds`` as the policy sees them live: the
    policy's camera views, the last ``state_history`` states (padded at the episode's start),
    the frame's instruction and its episode's belt speed."""
    low = ds.low_dim()
    history = policy.metadata.state_history
    speeds = {int(e["episode_index"]): e.get("belt_speed") for e in ds.episodes}
    samples = []
    for i in indices:
        i = int(i)
        images = {c: ds.image(IMAGE_PREFIX + c, i) for c in policy.contract.cameras}
        window = ds.window(i, history, 1)
        task_index = int(low["task_index"][i])
        task = ds.tasks[task_index] if task_index < len(ds.tasks) else ""
        samples.append(
            policy.collate.observation(
                images,
                window[STATE_KEY],
                task,
                policy.contract.embodiment.id,
                policy.domain_id,
                window["state_is_pad"],
                speeds.get(int(low["episode_index"][i])),
            )
        )
    return _concat(samples)


def context_tokens(policy: LearnedPolicy, batch: dict) -> np.ndarray:
    """The context tokens (B, N, width) float32 of a model batch: what the action
    transformer attends to."""
    with torch.inference_mode():
        return policy.model.encode(batch).tokens.float().cpu().numpy()


def encode(policy: LearnedPolicy, batch: dict) -> np.ndarray:
    """Embeddings (B, width) float32 of a model batch: the mean of its context tokens."""
    return context_tokens(policy, batch).mean(axis=1)


def embed(
    policy: LearnedPolicy,
    ds: Dataset,
    indices: Sequence[int] | np.ndarray,
    batch_size: int = 32,
    on_batch: Callable[[], None] | None = None,
) -> np.ndarray:
    """Embeddings (len(indices), width) float32 of frames ``indices`` of ``ds``."""
    if batch_size < 1:
        raise LatentError(f"batch_size: expected at least 1, got {batch_size}")
    out = [np.zeros((0, policy.model.cfg.width), dtype=np.float32)]
    for start in range(0, len(indices), batch_size):
        batch = observation_batch(policy, ds, indices[start : start + batch_size])
        out.append(encode(policy, batch))
        if on_batch is not None:
            on_batch()
    return np.concatenate(out)


def nearest(
    train: np.ndarray,
    query: np.ndarray,
    k: int,
    metric: Metric = "cosine",
    chunk: int = 2048,
    device: torch.device | str = "cpu",
) -> np.ndarray:
    """Indices (M, k) of the ``k`` nearest rows of ``train`` (N, D) to each row of ``query``
    (M, D), nearest first; exact (all distances, in float64), ``chunk`` queries at a time on
    ``device``."""
    if metric not in ("cosine", "euclidean"):
        raise LatentError(f"metric: expected 'cosine' or 'euclidean', got {metric!r}")
    if not 1 <= k <= len(train):
        raise LatentError(f"k: expected 1 <= k <= {len(train)} (the training frames), got {k}")
    t = torch.as_tensor(np.asarray(train, dtype=np.float64), device=device)
    q = torch.as_tensor(np.asarray(query, dtype=np.float64), device=device)
    if metric == "cosine":
        t = torch.nn.functional.normalize(t, dim=1)
        q = torch.nn.functional.normalize(q, dim=1)
    t_sq = (t * t).sum(dim=1)
    out = []
    for start in range(0, len(q), chunk):
        part = q[start : start + chunk]
        # Squared distances (for unit rows: 2 - 2 cos), ranked; the exact value is not kept.
        dist = (part * part).sum(dim=1, keepdim=True) - 2 * part @ t.T + t_sq[None]
        out.append(torch.topk(dist, k, dim=1, largest=False, sorted=True).indices.cpu())
    if not out:
        return np.zeros((0, k), dtype=np.int64)
    return torch.cat(out).numpy().astype(np.int64)


def shares(neighbours: np.ndarray, labels: np.ndarray, count: int) -> np.ndarray:
    """The share (M, count) of each label 0..count-1 among each row's neighbours (M, k),
    where ``labels`` (N,) gives each training frame's label."""
    hits = np.asarray(labels)[neighbours]
    return np.stack([(hits == c).mean(axis=1) for c in range(count)], axis=1)
