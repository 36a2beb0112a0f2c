"""``r2s2r train bench``: the policy loader's samples/s against a decode-on-demand reader and,
where a LeRobot venv exists, LeRobot's own loader, on one dataset and one query.

The query is the training one: uniformly random frames, each with its current views, the
last ``state_history`` states and the next ``action_horizon`` actions, in batches of
``batch_size`` from ``workers`` worker processes. This loader's batches are complete model
batches (normalized, actions encoded); LeRobot's and the plain reader's are raw samples.
Warm and plain figures skip the first batch (worker start-up); the cold figure is the whole
first pass from an empty cache folder, cache building and worker start-up included.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import textwrap
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from r2s2r.policy.actions import ActionCodec
from r2s2r.policy.collate import Collate
from r2s2r.policy.normalize import fit_stats
from r2s2r.policy.windows import Mixture, WindowDataset, make_loader

# LeRobot's venv at the repository root (``make lerobot-venv``): the source tree's root
# (``source/r2s2r/policy`` is three folders below it).
LEROBOT_PYTHON = Path(__file__).resolve().parents[3] / ".venv-lerobot" / "bin" / "python"


def _drain(batches: Iterable[Any], skip: int = 0) -> tuple[int, float]:
    """Batches taken and the seconds they took, after ``skip`` untimed ones."""
    it = iter(batches)
    for _ in range(skip):
        next(it)
    start, n = time.perf_counter(), 0
    for _ in it:
        n += 1
    return n, time.perf_counter() - start


def _rate(
    data: Path,
    image_size: int,
    batch_size: int,
    workers: int,
    batches: int,
    state_history: int,
    action_horizon: int,
    collate: Collate | None,
    cache_dir: Path | None,
    use_cache: bool,
    skip: int,
) -> tuple[float, Collate]:
    start = time.perf_counter()
    ds = WindowDataset(data, image_size, state_history, action_horizon, cache_dir, use_cache)
    mix = Mixture(ds, [], 1.0, seed=0)
    if collate is None:
        codec = ActionCodec(mix.contract, "relative")
        collate = Collate(codec, fit_stats(mix, codec), 128, 64, image_size)
        start = time.perf_counter()
    loader = make_loader(mix, collate, batch_size, 0, batches + skip, workers)
    n, seconds = _drain(loader, skip)
    if skip == 0:
        seconds = time.perf_counter() - start
    del loader
    return n * batch_size / seconds, collate


LEROBOT_SCRIPT = textwrap.dedent(
    """
    import json, sys, time
    import torch
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    root, batch_size, workers, batches, past, future = sys.argv[1:7]
    batch_size, workers, batches = int(batch_size), int(workers), int(batches)
    past, future = int(past), int(future)
    meta = json.load(open(f"{root}/meta/info.json"))
    fps = meta["fps"]
    delta = {
        "observation.state": [(i - past + 1) / fps for i in range(past)],
        "action": [i / fps for i in range(future)],
    }
    # torchcodec needs the system's FFmpeg libraries; without them LeRobot reads with PyAV.
    try:
        from torchcodec.decoders import VideoDecoder  # noqa: F401
        backend = "torchcodec"
    except Exception:
        backend = "pyav"
    ds = LeRobotDataset(
        "local/bench", root=root, delta_timestamps=delta, video_backend=backend
    )
    gen = torch.Generator().manual_seed(0)
    loader = torch.utils.data.DataLoader(
        ds, batch_size=batch_size, shuffle=True, num_workers=workers, generator=gen,
        persistent_workers=workers > 0, drop_last=True,
    )
    taken, start = 0, None
    while taken < batches + 1:
        for _ in loader:
            taken += 1
            if taken == 1:
                start = time.perf_counter()
            if taken == batches + 1:
                break
    seconds = time.perf_counter() - start
    print(json.dumps({"samples_per_s": batches * batch_size / seconds, "backend": backend}))
    """
)


def lerobot_rate(
    python: Path, data: Path, batch_size: int, workers: int, batches: int, past: int, future: int
) -> tuple[float, str]:
    """LeRobot's ``LeRobotDataset`` loader's samples/s on ``data`` (run by ``python``), and
    the video backend it decoded with (torchcodec, or PyAV without FFmpeg's libraries)."""
    args = [str(a) for a in (data, batch_size, workers, batches, past, future)]
    # Never reach for the hub: the dataset is local.
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    done = subprocess.run(
        [str(python), "-c", LEROBOT_SCRIPT, *args],
        capture_output=True,
        text=True,
        check=False,
        env=env,
    )
    if done.returncode != 0:
        raise RuntimeError(f"LeRobot's loader failed ({python}):\n{done.stderr[-2000:]}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    return float(result["samples_per_s"]), str(result["backend"])


def bench_loader(
    data: Path,
    image_size: int,
    batch_size: int = 32,
    workers: int = 2,
    batches: int = 20,
    cache_dir: Path | None = None,
    state_history: int = 20,
    action_horizon: int = 40,
    lerobot_python: Path | None = LEROBOT_PYTHON,
) -> dict[str, Any]:
    """Samples/s of this loader (``samples_per_s`` warm, ``cold_samples_per_s`` from an
    empty cache), of decode on demand (``plain_samples_per_s``) and, where
    ``lerobot_python`` exists, of LeRobot's loader (``lerobot_samples_per_s``)."""
    data = Path(data)
    scratch = Path(tempfile.mkdtemp(prefix="r2s2r-bench-", dir=cache_dir))
    common = (data, image_size, batch_size, workers, batches, state_history, action_horizon)
    try:
        # Statistics first (untimed): fitting them reads low-dimensional data only.
        plain, collate = _rate(*common, None, None, False, 1)
        cold, _ = _rate(*common, collate, scratch, True, 0)
        warm, _ = _rate(*common, collate, scratch, True, 1)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    ds = WindowDataset(data, image_size, state_history, action_horizon, use_cache=False)
    out: dict[str, Any] = {
        "data": str(data),
        "frames": len(ds),
        "episodes": ds.dataset.num_episodes,
        "cameras": len(ds.cameras),
        "image_size": image_size,
        "state_history": state_history,
        "action_horizon": action_horizon,
        "batch_size": batch_size,
        "workers": workers,
        "batches": batches,
        "samples_per_s": warm,
        "cold_samples_per_s": cold,
        "plain_samples_per_s": plain,
        "over_plain": warm / plain,
    }
    if lerobot_python is not None and lerobot_python.is_file():
        rate, backend = lerobot_rate(
            lerobot_python, data, batch_size, workers, batches, state_history, action_horizon
        )
        out["lerobot_samples_per_s"] = rate
        out["lerobot_video_backend"] = backend
        out["over_lerobot"] = warm / rate
    return out
