"""Latent-space analysis: where in the policy's own observation space a rollout runs, and
whether its nearest training frames there are real or simulated.

Every frame (real, each simulated dataset's, every rollout step) goes through the trained
policy's observation path exactly as at inference (``Collate.observation``, then
``FlowMatchingPolicy.encode``), many frames per batch. A frame's embedding is the mean over
the observation transformer's output tokens (views, instruction, proprio history and, with
domain conditioning, the domain token): the context the action transformer attends to when it
draws the chunk. Every frame is encoded with the policy's own domain id (0, real, unless the
policy was loaded with another), so a domain token cannot separate the clouds by itself.

For each rollout step, its ``k`` nearest training frames (exact, cosine or euclidean) give the
share that are real: one series per rollout and its mean, so "follows real behaviour where real
data covers the state, simulated behaviour elsewhere" is a number. ``analyze`` writes
``OUT/latent.json`` and the plots of ``r2s2r.eval.latent_plot``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np

from r2s2r.data.config import DatasetError
from r2s2r.data.layout import INFO_PATH
from r2s2r.data.reader import Dataset
from r2s2r.eval.embedding import LatentError, Metric, embed, nearest, shares
from r2s2r.policy import checkpoint as ckpt
from r2s2r.policy.learned import LearnedPolicy
from r2s2r.sim.contract import ContractError
from r2s2r.spec import Spec
from r2s2r.spec.base import NonNegInt, PosInt

__all__ = ["LatentCfg", "LatentError", "LatentResult", "RolloutShare", "analyze"]

Kind = Literal["real", "sim", "rollout"]
# Called as work advances: ``progress(stage, done, total)`` (as ``policy.frames.ProgressFn``).
ProgressFn = Callable[[str, int, int], None]
LATENT_FILE = "latent.json"
EMBEDDING = "mean of the observation transformer's output tokens"


class LatentCfg(Spec):
    """How frames are sampled and neighbours found."""

    # Neighbours per rollout step.
    k: PosInt = 10
    metric: Metric = "cosine"
    # Training frames: every ``stride``-th frame of a dataset, at most ``max_frames`` of them
    # (drawn with ``seed``).
    stride: PosInt = 5
    max_frames: PosInt = 2000
    # Rollouts: every ``rollout_stride``-th step of every episode.
    rollout_stride: PosInt = 1
    seed: NonNegInt = 0
    # Frames per encoder batch, and the device (auto, cpu, cuda, cuda:N).
    batch_size: PosInt = 32
    device: str = "auto"


@dataclass
class Source:
    """One dataset of the analysis and the frames taken from it (global indices, ascending)."""

    label: str
    kind: Kind
    root: Path
    dataset: Dataset
    indices: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))

    def describe(self) -> dict[str, Any]:
        return {
            "label": self.label,
            "kind": self.kind,
            "path": str(self.root),
            "episodes": self.dataset.num_episodes,
            "frames_total": len(self.dataset),
            "frames": len(self.indices),
        }


@dataclass
class RolloutShare:
    """One rollout (an episode of the rollouts dataset): its real share per analysed step."""

    episode: int
    trial: int | None
    condition: str | None
    success: bool | None
    # Frame index within the episode of each analysed step, and its time in seconds.
    frames: list[int]
    times: list[float]
    # Per step: the share of its k nearest training frames that are real.
    real_share: list[float]
    mean_real_share: float
    # The mean share of each training source among the neighbours, by source label.
    source_share: dict[str, float]


@dataclass
class LatentResult:
    """What ``analyze`` found and wrote (``to_json`` is ``latent.json``)."""

    out: Path
    run: str
    settings: dict[str, Any]
    sources: list[dict[str, Any]]
    rollouts: list[RolloutShare]
    summary: dict[str, Any]
    projection: dict[str, Any]
    # Files written, by name, relative to ``out``.
    files: dict[str, str]

    def to_json(self) -> dict[str, Any]:
        return {
            "run": self.run,
            "settings": self.settings,
            "sources": self.sources,
            "rollouts": [asdict(r) for r in self.rollouts],
            "summary": self.summary,
            "projection": self.projection,
            "files": self.files,
        }


# ---------------------------------------------------------------------------- datasets
def open_source(root: Path, kind: Kind, policy: LearnedPolicy) -> Source:
    """A dataset checked against the policy: its robot, action layout and sizes, the policy's
    cameras and its rate; a clear error where it does not fit or holds no frames."""
    root = Path(root)
    if kind == "rollout" and not (root / INFO_PATH).is_file() and (root / "rollouts").is_dir():
        # An evaluation directory: its rollouts dataset.
        root = root / "rollouts"
    try:
        ds = Dataset(root)
        contract = ds.contract
    except DatasetError as err:
        raise LatentError(f"{kind} dataset: {err}") from None
    what = f"{kind} dataset {root}"
    policy.contract.check_compatible(contract, what, "the policy", views="ignore")
    lacking = [c for c in policy.contract.cameras if c not in contract.cameras]
    if lacking:
        raise ContractError(
            f"{what} does not fit the policy: it lacks camera(s) {lacking} the policy sees "
            f"(it has {list(contract.cameras)})"
        )
    hz = policy.metadata.control_hz
    if abs(ds.fps - hz) > 1e-9:
        raise LatentError(f"{what} runs at {ds.fps} fps, the policy at {hz:g} Hz")
    if len(ds) == 0:
        raise LatentError(f"{what}: holds no frames")
    return Source(default_label(ds, kind), kind, root, ds)


def default_label(ds: Dataset, kind: Kind) -> str:
    """``real``, ``rollouts``, or for a simulated dataset ``sim <world>/<behavior>`` from its
    episodes' metadata where every episode names the same, else ``sim <folder name>``."""
    if kind != "sim":
        return "real" if kind == "real" else "rollouts"
    worlds = {e.get("world") for e in ds.episodes}
    behaviors = {e.get("behavior") for e in ds.episodes}
    if len(worlds) == 1 and len(behaviors) == 1 and None not in worlds | behaviors:
        return f"sim {worlds.pop()}/{behaviors.pop()}"
    return f"sim {ds.root.name}"


def unique_labels(sources: Sequence[Source]) -> None:
    """Give sources that share a label their folder names as well (in place)."""
    for label in {s.label for s in sources}:
        same = [s for s in sources if s.label == label]
        if len(same) > 1:
            for s in same:
                s.label = f"{label} ({s.root})"


def sample_frames(n: int, stride: int, max_frames: int, rng: np.random.Generator) -> np.ndarray:
    """Every ``stride``-th of ``n`` frames, at most ``max_frames`` of them drawn by ``rng``;
    (m,) int64 ascending."""
    picked = np.arange(0, n, stride, dtype=np.int64)
    if len(picked) > max_frames:
        picked = np.sort(rng.choice(picked, size=max_frames, replace=False))
    return picked


def rollout_frames(ds: Dataset, stride: int) -> np.ndarray:
    """Every ``stride``-th step of every episode, each episode from its first step; (m,)."""
    parts = [
        np.arange(int(e["dataset_from_index"]), int(e["dataset_to_index"]), stride)
        for e in ds.episodes
    ]
    return np.concatenate(parts).astype(np.int64) if parts else np.zeros(0, dtype=np.int64)


def run_datasets(run: Path) -> tuple[list[Path], list[Path]]:
    """(real, simulated) dataset folders a run was trained on, from its ``config.json``."""
    path = ckpt.resolve_checkpoint(Path(run)).parent.parent / ckpt.CONFIG_FILE
    records = ckpt.read_json(path).get("datasets")
    if not isinstance(records, list):
        raise LatentError(f"{path}: records no training datasets; pass --real and --sim")
    real = [Path(r["path"]) for r in records if r.get("domain") == "real"]
    sim = [Path(r["path"]) for r in records if r.get("domain") != "real"]
    return real, sim


# ---------------------------------------------------------------------------- analysis
def _training_paths(
    run: Path, real: Sequence[Path] | None, sim: Sequence[Path] | None
) -> tuple[list[Path], list[Path]]:
    """The real and simulated folders to compare against: as given, or (both None) the run's."""
    given = "given"
    if real is None and sim is None:
        real, sim = run_datasets(run)
        given = f"that run {run} trained on (pass --real and --sim)"
    real, sim = [Path(p) for p in real or []], [Path(p) for p in sim or []]
    if not real or not sim:
        raise LatentError(
            f"the analysis needs at least one real and one simulated dataset: {len(real)} "
            f"real and {len(sim)} simulated {given}"
        )
    seen: set[Path] = set()
    for p in (*real, *sim):
        if p.resolve() in seen:
            raise LatentError(f"{p}: given twice as a training dataset (real or simulated)")
        seen.add(p.resolve())
    return real, sim


def _embed_all(
    policy: LearnedPolicy, sources: Sequence[Source], batch_size: int, progress: ProgressFn | None
) -> list[np.ndarray]:
    """Each source's embeddings (n_i, width), one progress report per batch over all."""
    total = sum(-(-len(s.indices) // batch_size) for s in sources)
    done = 0

    def tick() -> None:
        nonlocal done
        done += 1
        if progress is not None:
            progress("embedding", done, total)

    if progress is not None:
        progress("embedding", 0, total)
    out = []
    for s in sources:
        out.append(embed(policy, s.dataset, s.indices, batch_size, tick))
        s.dataset.close()
    return out


def analyze(
    run: Path,
    real: Sequence[Path] | None,
    sim: Sequence[Path] | None,
    rollouts: Path,
    out: Path,
    cfg: LatentCfg | None = None,
    progress: ProgressFn | None = None,
    **changes: Any,
) -> LatentResult:
    """Embed the real, simulated and rollout frames with run ``run``'s policy, find each
    rollout step's ``k`` nearest training frames, write ``out/latent.json`` and the plots
    (``projection_pca.png``, ``real_share.png``, and ``projection_umap.png`` where umap-learn
    is installed).

    ``real`` and ``sim`` both None: the datasets the run was trained on. ``rollouts``: a
    dataset of rollouts (one episode per trial) or an evaluation directory holding one in
    ``rollouts/``. ``changes``: fields of ``cfg`` (default ``LatentCfg()``) to change, e.g.
    ``k=5, max_frames=500, seed=1``."""
    from r2s2r.eval import latent_plot

    base = cfg.model_dump() if cfg is not None else {}
    cfg = LatentCfg.from_dict({**base, **changes}, source="latent analysis settings")
    real_paths, sim_paths = _training_paths(Path(run), real, sim)
    policy = LearnedPolicy.load(Path(run), device=cfg.device)
    train = [open_source(p, "real", policy) for p in real_paths]
    train += [open_source(p, "sim", policy) for p in sim_paths]
    unique_labels(train)
    roll = open_source(Path(rollouts), "rollout", policy)
    for number, source in enumerate(train):
        rng = np.random.default_rng([cfg.seed, number])
        source.indices = sample_frames(len(source.dataset), cfg.stride, cfg.max_frames, rng)
    roll.indices = rollout_frames(roll.dataset, cfg.rollout_stride)
    pool_size = sum(len(s.indices) for s in train)
    if cfg.k > pool_size:
        raise LatentError(f"k: {cfg.k} neighbours, but only {pool_size} training frames sampled")

    *parts, query = _embed_all(policy, [*train, roll], cfg.batch_size, progress)
    pool = np.concatenate(parts)
    pool_source = np.concatenate([np.full(len(s.indices), n) for n, s in enumerate(train)])
    is_real = np.array([s.kind == "real" for s in train])[pool_source]
    neighbours = nearest(pool, query, cfg.k, cfg.metric, device=policy.device)
    step_real = is_real[neighbours].mean(axis=1)
    step_sources = shares(neighbours, pool_source, len(train))
    labels = [s.label for s in train]
    masks = _episode_masks(roll)
    rows = [
        _rollout_row(roll, episode, mask, step_real, step_sources, labels)
        for episode, mask in zip(roll.dataset.episodes, masks, strict=True)
    ]
    pool_real = float(is_real.mean())

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    train_2d, roll_2d, ratio = latent_plot.pca(pool, query)
    traces = [roll_2d[m] for m in masks]
    conditions = [r.condition for r in rows]
    files = {
        "projection_pca": latent_plot.plot_projection(
            out / "projection_pca.png", "PCA", train_2d, pool_source, labels, traces, conditions
        ),
        "real_share": latent_plot.plot_shares(out / "real_share.png", rows, pool_real),
    }
    has_umap = latent_plot.umap_available()
    if has_umap:
        train_2d, roll_2d = latent_plot.umap(pool, query, cfg.seed)
        traces = [roll_2d[m] for m in masks]
        files["projection_umap"] = latent_plot.plot_projection(
            out / "projection_umap.png", "UMAP", train_2d, pool_source, labels, traces, conditions
        )
    result = LatentResult(
        out=out,
        run=str(run),
        settings={
            **cfg.model_dump(mode="json"),
            "embedding": EMBEDDING,
            "dim": int(pool.shape[1]),
            "domain_id": policy.domain_id,
        },
        sources=[s.describe() for s in (*train, roll)],
        rollouts=rows,
        summary=_summary(rows, step_real, pool_real),
        projection={"pca": {"explained_variance_ratio": ratio}, "umap": {"available": has_umap}},
        files={name: path.name for name, path in files.items()},
    )
    _write_json(out / LATENT_FILE, result.to_json())
    return result


def _episode_masks(roll: Source) -> list[np.ndarray]:
    """Per episode of the rollouts dataset: which analysed steps (``roll.indices``) are its."""
    masks = []
    for episode in roll.dataset.episodes:
        lo, hi = int(episode["dataset_from_index"]), int(episode["dataset_to_index"])
        masks.append((roll.indices >= lo) & (roll.indices < hi))
    return masks


def _rollout_row(
    roll: Source,
    episode: dict[str, Any],
    mask: np.ndarray,
    step_real: np.ndarray,
    step_sources: np.ndarray,
    labels: Sequence[str],
) -> RolloutShare:
    """One episode's row: ``step_real`` (M,) and ``step_sources`` (M, sources) are per
    analysed step, ``mask`` (M,) picks the episode's."""
    share = step_real[mask]
    frames = (roll.indices[mask] - int(episode["dataset_from_index"])).tolist()
    trial, condition, success = episode.get("trial"), episode.get("condition"), None
    if episode.get("success") is not None:
        success = bool(episode["success"])
    return RolloutShare(
        episode=int(episode["episode_index"]),
        trial=None if trial is None else int(trial),
        condition=None if condition is None else str(condition),
        success=success,
        frames=frames,
        times=[f / roll.dataset.fps for f in frames],
        real_share=[float(x) for x in share],
        mean_real_share=float(share.mean()),
        source_share={label: float(step_sources[mask, n].mean()) for n, label in enumerate(labels)},
    )


def _summary(rows: Sequence[RolloutShare], step_real: np.ndarray, pool_real: float) -> dict:
    """Means over rollouts and over steps, by condition where the episodes name one, and the
    real fraction of the training pool (the share that neighbours drawn at random give)."""
    by_condition: dict[str, list[float]] = {}
    for r in rows:
        if r.condition is not None:
            by_condition.setdefault(r.condition, []).append(r.mean_real_share)
    return {
        "rollouts": len(rows),
        "steps": int(len(step_real)),
        "mean_real_share": float(np.mean([r.mean_real_share for r in rows])),
        "step_mean_real_share": float(step_real.mean()),
        "pool_real_fraction": pool_real,
        "by_condition": {
            c: {"rollouts": len(v), "mean_real_share": float(np.mean(v))}
            for c, v in sorted(by_condition.items())
        },
    }


def _write_json(path: Path, data: dict[str, Any]) -> None:
    """Write ``path`` whole or not at all (a temporary file renamed over it)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n")
    tmp.replace(path)
