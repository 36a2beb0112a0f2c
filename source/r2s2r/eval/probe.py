"""Can the policy see what the task needs? A linear probe from a trained policy's observation
tokens to where the presented object is and how fast the belt runs, on frames of episodes the
probe was not fitted on.

The tokens are the observation transformer's output (what the action transformer attends
to), flattened; the probe is a ridge regression fitted on the frames of some episodes of a
dataset that tracks the object (``observation.environment_state``) and scored on the frames
of the others, while the object still rides the belt (before any grasp). An object position
error of several centimetres, or a belt-speed R^2 near zero, says the policy's inputs or its
encoder do not carry what the reach needs, whatever the action head does with them.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from r2s2r.data.reader import Dataset
from r2s2r.eval.embedding import LatentError, context_tokens, observation_batch
from r2s2r.policy.learned import LearnedPolicy

ENV_KEY = "observation.environment_state"
# Frames whose object is within this height of where it first rode count as on the belt.
ON_BELT_M = 0.01


def _ridge(x: np.ndarray, y: np.ndarray, alpha: float) -> tuple[np.ndarray, np.ndarray]:
    """Weights (D, k) and bias (k,) of ridge regression on standardized inputs."""
    mean, std = x.mean(axis=0), x.std(axis=0) + 1e-6
    z = (x - mean) / std
    # The dual form: D is far above the number of frames.
    gram = z @ z.T + alpha * np.eye(len(z))
    coef = np.linalg.solve(gram, y - y.mean(axis=0))
    w = z.T @ coef / std[:, None]
    return w, y.mean(axis=0) - mean @ w


ALPHAS = (1.0, 10.0, 100.0, 1e3, 1e4, 1e5)


def _choose_alpha(x: np.ndarray, y: np.ndarray, groups: np.ndarray, folds: int = 4) -> float:
    """The ridge penalty of least squared error (summed over standardized targets) in
    ``folds``-fold cross-validation that keeps each episode's frames in one fold."""
    ids = np.unique(groups)
    fold_of = {int(g): k % folds for k, g in enumerate(ids)}
    fold = np.array([fold_of[int(g)] for g in groups])
    scale = y.std(axis=0) + 1e-12
    best, best_err = ALPHAS[0], np.inf
    for alpha in ALPHAS:
        err = 0.0
        for k in range(folds):
            inside = fold != k
            if inside.all() or not inside.any():
                continue
            w, b = _ridge(x[inside], y[inside], alpha)
            err += float((((x[~inside] @ w + b - y[~inside]) / scale) ** 2).sum())
        if err < best_err:
            best, best_err = alpha, err
    return best


def probe(
    run: Path,
    data: Path,
    frames: int = 1500,
    test_share: float = 0.25,
    alpha: float | None = None,
    seed: int = 0,
    on_batch: Callable[[], None] | None = None,
    pixels: bool = False,
) -> dict[str, Any]:
    """The probe's held-out errors: object x and y (cm), belt speed (R^2 and cm/s), over up
    to ``frames`` on-belt frames of ``data``, the last ``test_share`` of its episodes held
    out. The ridge's ``alpha`` is chosen by cross-validation over the fitted episodes where
    not given. ``pixels``: probe the views themselves (the run's cameras, as the policy is
    given them) instead of its tokens, for scale."""
    ds = Dataset(Path(data))
    low = ds.low_dim()
    if ENV_KEY not in low:
        raise LatentError(f"{data}: its frames do not track the object ({ENV_KEY} missing)")
    policy = LearnedPolicy.load(Path(run), device="cpu")
    env, episode = low[ENV_KEY], low["episode_index"]
    speed = np.array([float(e.get("belt_speed") or 0.0) for e in ds.episodes])[episode]
    first = {int(e): int(np.argmax(episode == e)) for e in np.unique(episode)}
    rest_z = np.array([env[first[int(e)], 2] for e in episode])
    on_belt = np.abs(env[:, 2] - rest_z) < ON_BELT_M
    episodes = np.unique(episode)
    held = set(episodes[int(len(episodes) * (1 - test_share)) :].tolist())
    if not held or len(held) == len(episodes):
        raise LatentError(f"{data}: too few episodes to hold some out ({len(episodes)})")
    rng = np.random.default_rng(seed)
    picks = np.flatnonzero(on_belt)
    picks = np.sort(rng.choice(picks, min(frames, len(picks)), replace=False))
    feats = []
    for start in range(0, len(picks), 32):
        batch = observation_batch(policy, ds, picks[start : start + 32])
        seen = batch["images"].float().numpy() / 255 if pixels else context_tokens(policy, batch)
        feats.append(seen.reshape(len(batch["task"]), -1))
        if on_batch is not None:
            on_batch()
    x = np.concatenate(feats)
    y = np.stack([env[picks, 0], env[picks, 1], speed[picks]], axis=1)
    test = np.array([int(episode[i]) in held for i in picks])
    fit_episodes = episode[picks][~test]
    alpha = _choose_alpha(x[~test], y[~test], fit_episodes) if alpha is None else alpha
    w, b = _ridge(x[~test], y[~test], alpha)
    pred = x[test] @ w + b
    err = pred - y[test]
    var = y[test].var(axis=0) + 1e-12
    r2 = 1 - (err**2).mean(axis=0) / var
    return {
        "run": str(run),
        "features": "pixels" if pixels else "tokens",
        "data": str(data),
        "frames_fit": int((~test).sum()),
        "alpha": alpha,
        "frames_test": int(test.sum()),
        "object_x_cm": float(100 * np.abs(err[:, 0]).mean()),
        "object_y_cm": float(100 * np.abs(err[:, 1]).mean()),
        "object_x_r2": float(r2[0]),
        "object_y_r2": float(r2[1]),
        "belt_speed_cm_s": float(100 * np.abs(err[:, 2]).mean()),
        "belt_speed_r2": float(r2[2]),
        # What always guessing the held-out mean would score, for scale.
        "object_x_spread_cm": float(100 * np.abs(y[test, 0] - y[test, 0].mean()).mean()),
        "object_y_spread_cm": float(100 * np.abs(y[test, 1] - y[test, 1].mean()).mean()),
    }
