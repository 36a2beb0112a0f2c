"""The policy's training samples: windows of one dataset (``WindowDataset``), a seeded
real/sim mixture of them (``Mixture``), the step-indexed batch sampler and the loader.

A sample is the current views, the last ``state_history`` states and the next
``action_horizon`` actions of one frame, never mixing two episodes (``Dataset.window``), the
belt drive's speed its episode recorded, and the frame's hindsight targets (``hindsight``).
Batches are keyed by the training step, so a resumed run sees exactly the batches it would
have seen, whatever the number of workers or processes.
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import torch
from torch.utils.data import DataLoader, Sampler

from r2s2r.data.config import ACTION_KEY, ENV_STATE_KEY, STATE_KEY, DatasetError
from r2s2r.data.reader import Dataset
from r2s2r.data.video import VideoReader
from r2s2r.policy.base import PolicyError
from r2s2r.policy.frames import FrameCache, ProgressFn, resize
from r2s2r.policy.hindsight import episode_targets, place_targets, standardization
from r2s2r.sim.contract import Contract

# Video readers a forked worker inherited and must neither use nor close.
_INHERITED: list[VideoReader] = []


def _speed(value: Any) -> float:
    """An episode's recorded belt speed, NaN where none was recorded."""
    return float("nan") if value is None else float(value)


class WindowDataset:
    """Windows of one dataset folder; views from the frame cache (``use_cache``) or decoded
    on demand (the plain baseline), resized to ``image_size``."""

    def __init__(
        self,
        root: Path,
        image_size: int,
        state_history: int = 20,
        action_horizon: int = 40,
        cache_dir: Path | None = None,
        use_cache: bool = True,
        progress: ProgressFn | None = None,
        episodes: int | Sequence[int] | None = None,
    ) -> None:
        self._args = (
            Path(root), image_size, state_history, action_horizon, cache_dir, use_cache, None,
            episodes,
        )  # fmt: skip
        self.root = Path(root)
        self.dataset = Dataset(self.root)
        if len(self.dataset) == 0:
            raise DatasetError(f"{self.root}: the dataset holds no frames")
        # The episodes whose frames are samples: the first N (an int), those at the given
        # positions of the episodes table (a sequence), or all (None). ``_frames`` maps a
        # sample to its frame (None: every frame, in order).
        self._frames: np.ndarray | None = None
        total = self.dataset.num_episodes
        if isinstance(episodes, int):
            if not 1 <= episodes <= total:
                raise PolicyError(
                    f"{self.root}: episodes {episodes}: the dataset holds {total} episodes"
                )
            episodes = range(episodes)
        if episodes is not None:
            chosen = sorted({int(e) for e in episodes})
            if not chosen or chosen[0] < 0 or chosen[-1] >= total:
                raise PolicyError(
                    f"{self.root}: episodes {list(episodes)[:8]}: expected a non-empty set of "
                    f"positions in [0, {total})"
                )
            table = self.dataset.episodes
            spans = [(table[e]["dataset_from_index"], table[e]["dataset_to_index"]) for e in chosen]
            self._frames = np.concatenate([np.arange(int(a), int(b)) for a, b in spans])
        for name, value in (("state_history", state_history), ("action_horizon", action_horizon)):
            if value < 1:
                raise PolicyError(f"{name}: expected at least 1, got {value}")
        self.image_size = image_size
        self.state_history, self.action_horizon = state_history, action_horizon
        self.contract: Contract = self.dataset.contract
        self.fps = self.dataset.fps
        self.cameras = self.contract.cameras
        self.cache: FrameCache | None = None
        if use_cache:
            self.cache = FrameCache(self.dataset, image_size, cache_dir)
            self.cache.build(progress)
        low = self.dataset.low_dim()
        self._task_index = low["task_index"]
        self._episode = low["episode_index"]
        self._frame = low["frame_index"]
        # Each frame's episode position (the row of the episodes table).
        lengths = [
            int(e["dataset_to_index"]) - int(e["dataset_from_index"]) for e in self.dataset.episodes
        ]
        self._episode_pos = np.repeat(np.arange(len(lengths)), lengths)
        # The belt drive's speed of each episode (NaN where a take did not record one).
        self._belt_speed = np.array(
            [_speed(e.get("belt_speed")) for e in self.dataset.episodes], dtype=np.float32
        )
        self._hindsight = self._hindsight_targets(low[STATE_KEY], lengths)
        self._place = self._place_targets(low[STATE_KEY], lengths)
        # The object's true pose per frame, where the takes recorded it (diagnosis only).
        self._object_pose = low.get(ENV_STATE_KEY)
        self.embodiment_id = int(self.contract.embodiment.id)

    def _hindsight_targets(self, states: np.ndarray, lengths: list[int]) -> np.ndarray:
        """Every frame's hindsight targets (N, HINDSIGHT_DIM), standardized over the frames
        that are samples."""
        ends = np.cumsum(lengths)
        targets = np.concatenate(
            [
                episode_targets(states[end - n : end], self.contract, self.fps)
                for n, end in zip(lengths, ends, strict=True)
            ]
        )
        mean, std = standardization(targets if self._frames is None else targets[self._frames])
        return ((targets - mean) / std).astype(np.float32)

    def _place_targets(self, states: np.ndarray, lengths: list[int]) -> np.ndarray:
        """Every frame's object place on the belt (N, PLACE_DIM), in metres, from its take's
        proprio and belt speed (NaN after the grasp)."""
        ends = np.cumsum(lengths)
        return np.concatenate(
            [
                place_targets(states[end - n : end], self.contract, self.fps, float(speed))
                for n, end, speed in zip(lengths, ends, self._belt_speed, strict=True)
            ]
        )

    def __len__(self) -> int:
        return len(self._frames) if self._frames is not None else len(self.dataset)

    def states(self) -> np.ndarray:
        """The proprio of every frame whose window is a sample (N, S)."""
        states = self.dataset.low_dim()[STATE_KEY]
        return states[self._frames] if self._frames is not None else states

    def frame(self, i: int) -> int:
        """The dataset frame of sample ``i``."""
        return int(self._frames[i]) if self._frames is not None else int(i)

    def low_window(self, i: int) -> dict[str, np.ndarray]:
        """The low-dimensional part of sample ``i``: state (P, S), state_is_pad (P,), actions
        (H, A), action_is_pad (H,)."""
        w = self.dataset.window(self.frame(i), self.state_history, self.action_horizon)
        return {
            "state": w[STATE_KEY],
            "state_is_pad": w["state_is_pad"],
            "actions": w[ACTION_KEY],
            "action_is_pad": w["action_is_pad"],
        }

    def images(self, i: int) -> np.ndarray:
        """The views of sample ``i`` in contract camera order (V, s, s, 3) uint8."""
        i = self.frame(i)
        pos, frame = int(self._episode_pos[i]), int(self._frame[i])
        if self.cache is not None:
            return np.stack([self.cache.frames(pos, c)[frame] for c in self.cameras])
        return np.stack(
            [
                resize(self.dataset.image("observation.images." + c, i), self.image_size)
                for c in self.cameras
            ]
        )

    def __getitem__(self, i: int) -> dict[str, Any]:
        if not 0 <= i < len(self):
            raise IndexError(f"{self.root}: frame {i} out of range (dataset has {len(self)})")
        tasks = self.dataset.tasks
        frame = self.frame(i)
        task_index = int(self._task_index[frame])
        return {
            "images": self.images(i),
            **self.low_window(i),
            "task": tasks[task_index] if task_index < len(tasks) else "",
            "embodiment_id": self.embodiment_id,
            "belt_speed": float(self._belt_speed[self._episode_pos[frame]]),
            "hindsight": self._hindsight[frame],
            "place": self._place[frame],
            "object_pose": None if self._object_pose is None else self._object_pose[frame],
            "episode_index": int(self._episode[frame]),
            "frame_index": int(self._frame[frame]),
        }

    def __getstate__(self) -> dict[str, Any]:
        # Open video files and memory maps do not cross processes: reopen from the folder.
        return {"args": self._args}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(*state["args"])  # type: ignore[misc]


class Mixture:
    """Real and simulated window datasets drawn with share ``alpha`` from real, the rest
    split equally among the sims. Sample ``key`` is a pure function of (seed, key).

    Domain ids: 0 real, 1... the sims in order (``domains`` names them)."""

    def __init__(
        self,
        real: WindowDataset | None,
        sims: Sequence[WindowDataset],
        alpha: float,
        seed: int = 0,
    ) -> None:
        sims = list(sims)
        if real is None and not sims:
            raise PolicyError("mixture: empty (no real and no simulated dataset given)")
        if not 0.0 <= alpha <= 1.0:
            raise PolicyError(f"mixture: alpha {alpha} is outside [0, 1] (the share of real data)")
        if alpha > 0 and real is None:
            raise PolicyError(f"mixture: alpha {alpha} > 0 draws from real data, but none given")
        if alpha < 1 and not sims:
            raise PolicyError(
                f"mixture: alpha {alpha} < 1 draws from simulated data, but none given"
            )
        self.real, self.sims, self.alpha, self.seed = real, sims, float(alpha), seed
        self.datasets: list[WindowDataset] = ([real] if real is not None else []) + sims
        first = self.datasets[0]
        for d in self.datasets[1:]:
            first.contract.check_compatible(
                d.contract, f"dataset {d.root}", f"dataset {first.root}"
            )
            if d.fps != first.fps:
                raise PolicyError(
                    f"mixture: dataset {d.root} runs at {d.fps} fps, dataset {first.root} at "
                    f"{first.fps} fps"
                )
            shapes = (d.image_size, d.state_history, d.action_horizon)
            want = (first.image_size, first.state_history, first.action_horizon)
            if shapes != want:
                raise PolicyError(
                    f"mixture: dataset {d.root} gives (image_size, state_history, "
                    f"action_horizon) {shapes}, dataset {first.root} {want}"
                )
        self.domains: tuple[str, ...] = ("real", *(f"sim{k + 1}" for k in range(len(sims))))

    @property
    def contract(self) -> Contract:
        return self.datasets[0].contract

    @property
    def fps(self) -> int:
        return self.datasets[0].fps

    def __len__(self) -> int:
        return sum(len(d) for d in self.datasets)

    def draw(self, key: int) -> tuple[int, int]:
        """(domain id, frame) of sample ``key``."""
        rng = np.random.default_rng([self.seed, key])
        if self.real is not None and rng.random() < self.alpha:
            return 0, int(rng.integers(len(self.real)))
        k = int(rng.integers(len(self.sims)))
        return k + 1, int(rng.integers(len(self.sims[k])))

    def __getitem__(self, key: int) -> dict[str, Any]:
        domain, frame = self.draw(int(key))
        source = self.real if domain == 0 else self.sims[domain - 1]
        assert source is not None
        return {**source[frame], "domain_id": domain}

    def forget_inherited_files(self) -> None:
        """In a forked worker: set aside the video files the parent process had open and
        read through fresh ones. The parent's decoders ran threads that do not survive a
        fork, so using or even closing them there hangs; they stay referenced, unused."""
        for d in self.datasets:
            _INHERITED.append(d.dataset._video)
            d.dataset._video = VideoReader(d.dataset.fps, d.dataset._video.gop)

    def check_policy(self, contract: Contract, fps: float, cameras: Sequence[str]) -> None:
        """Raise ``ContractError`` / ``PolicyError`` naming the dataset folder where a dataset
        does not fit a policy: other embodiment or sizes, other cameras, other fps."""
        policy = Contract.of(contract.embodiment, contract.action_mode, tuple(cameras))
        for d in self.datasets:
            policy.check_compatible(d.contract, f"dataset {d.root}", "the policy")
            if abs(d.fps - fps) > 1e-9:
                raise PolicyError(
                    f"dataset {d.root} runs at {d.fps} fps, the policy expects {fps:g} fps"
                )


class StepBatchSampler(Sampler[list[int]]):
    """Key lists for steps ``start_step, start_step + 1, ...`` up to ``total_steps``
    (exclusive; None: forever): step s, rank r gets keys
    ``s * batch_size * world_size + r * batch_size + j`` for j < batch_size."""

    def __init__(
        self,
        batch_size: int,
        start_step: int = 0,
        total_steps: int | None = None,
        rank: int = 0,
        world_size: int = 1,
    ) -> None:
        if batch_size < 1 or world_size < 1 or not 0 <= rank < world_size or start_step < 0:
            raise PolicyError(
                f"batch sampler: expected batch_size >= 1, 0 <= rank < world_size, "
                f"start_step >= 0; got batch_size {batch_size}, rank {rank}, world_size "
                f"{world_size}, start_step {start_step}"
            )
        self.batch_size, self.start_step, self.total_steps = batch_size, start_step, total_steps
        self.rank, self.world_size = rank, world_size

    def keys(self, step: int) -> list[int]:
        base = step * self.batch_size * self.world_size + self.rank * self.batch_size
        return list(range(base, base + self.batch_size))

    def __iter__(self) -> Iterator[list[int]]:
        step = self.start_step
        while self.total_steps is None or step < self.total_steps:
            yield self.keys(step)
            step += 1

    def __len__(self) -> int:
        if self.total_steps is None:
            raise TypeError("an endless StepBatchSampler has no length")
        return max(0, self.total_steps - self.start_step)


def _worker_init(_: int) -> None:
    # Workers share few cores: one thread each for torch's ops and OpenCV's.
    torch.set_num_threads(1)
    cv2.setNumThreads(1)
    info = torch.utils.data.get_worker_info()
    if info is not None and isinstance(info.dataset, Mixture):
        info.dataset.forget_inherited_files()


def make_loader(
    mixture: Mixture,
    collate: Callable[[list[dict[str, Any]]], dict[str, Any]],
    batch_size: int,
    start_step: int = 0,
    total_steps: int | None = None,
    workers: int = 2,
    rank: int = 0,
    world_size: int = 1,
    pin_memory: bool = False,
) -> DataLoader[Any]:
    """Batches of ``mixture`` by training step, collated in the worker processes.

    Workers start from a fork server, not by forking the training process: a process that
    already runs threads (torch's, FFmpeg's decoders, a renderer's) can deadlock a forked
    child that touches what those threads held. The mixture and the collate travel pickled
    and reopen their files in each worker."""
    sampler = StepBatchSampler(batch_size, start_step, total_steps, rank, world_size)
    methods = multiprocessing.get_all_start_methods()
    context = "forkserver" if "forkserver" in methods else "spawn"
    return DataLoader(
        mixture,  # type: ignore[arg-type]
        batch_sampler=sampler,
        collate_fn=collate,
        num_workers=workers,
        persistent_workers=workers > 0,
        prefetch_factor=4 if workers > 0 else None,
        pin_memory=pin_memory,
        worker_init_fn=_worker_init if workers > 0 else None,
        multiprocessing_context=context if workers > 0 else None,
    )
