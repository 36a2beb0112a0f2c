"""``r2s2r policy bench``: milliseconds per chunk on the device present, with the encode and
denoise parts apart, peak memory and parameter counts.

The peer in the same run is the same model sampled without caching the observation: every
Euler step re-encodes the observation, as a policy that runs one transformer over
observation and action tokens together must. ``speedup_over_uncached`` is that time over
ours.
"""

from __future__ import annotations

import resource
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from r2s2r.policy.config import PolicyCfg, load_policy_cfg
from r2s2r.policy.model import FlowMatchingPolicy, build_model
from r2s2r.sim.scene import nominal_embodiment

# The control period of the 50 Hz loop, ms.
CONTROL_PERIOD_MS = 20.0


def example_batch(cfg: PolicyCfg, device: torch.device, views: int = 3) -> dict[str, Any]:
    """One observation of the nominal robot in the model's batch layout (random content)."""
    gen = torch.Generator().manual_seed(0)
    e = nominal_embodiment()
    s, p = cfg.image_size, cfg.state_history
    state = torch.zeros(1, p, cfg.max_state_dim)
    state[..., : e.state_dim] = torch.randn(1, p, e.state_dim, generator=gen)
    batch = {
        "images": torch.randint(0, 256, (1, views, 3, s, s), generator=gen, dtype=torch.uint8),
        "state": state,
        "state_is_pad": torch.zeros(1, p, dtype=torch.bool),
        "task": ["put the red cube in the left bin"],
        "embodiment_id": torch.tensor([e.id]),
        "domain_id": torch.tensor([0]),
        "belt_speed": torch.tensor([0.075]),
    }
    return {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in batch.items()}


def _time_ms(fn: Callable[[], Any], sync: Callable[[], None], repeats: int) -> float:
    """Median milliseconds of ``fn`` over ``repeats`` calls."""
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        sync()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def bench_policy(
    model: FlowMatchingPolicy, device: torch.device, repeats: int = 20, warmup: int = 3
) -> dict[str, Any]:
    """Time one chunk of ``model`` (batch 1): encoding, the Euler steps, and the whole."""
    cfg = model.cfg
    model.eval()
    batch = example_batch(cfg, device)
    steps = cfg.denoise_steps
    noise = torch.randn(1, cfg.action_horizon, cfg.max_action_dim, device=device)
    t = torch.ones(1, device=device)
    cuda = device.type == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    autocast = (
        torch.autocast("cuda", dtype=torch.bfloat16)
        if cuda
        else torch.autocast("cpu", enabled=False)
    )

    def uncached() -> torch.Tensor:
        x = noise
        for i in range(steps):
            tau = torch.full((1,), 1.0 - i / steps, device=device)
            x = x - model.velocity(model.encode(batch), x, tau) / steps
        return x

    with torch.inference_mode(), autocast:
        for _ in range(warmup):
            model.sample(batch, noise=noise)
        if cuda:
            torch.cuda.reset_peak_memory_stats()
        ctx = model.encode(batch)
        encode_ms = _time_ms(lambda: model.encode(batch), sync, repeats)
        velocity_ms = _time_ms(lambda: model.velocity(ctx, noise, t), sync, repeats)
        chunk_ms = _time_ms(lambda: model.sample(batch, noise=noise), sync, repeats)
        uncached_ms = _time_ms(uncached, sync, max(3, repeats // 4))
    if cuda:
        peak = torch.cuda.max_memory_allocated() / 2**20
        name = torch.cuda.get_device_name(device)
    else:
        # ru_maxrss is in KiB on Linux: the process's peak resident memory.
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        name = f"cpu ({torch.get_num_threads()} threads)"
    counts = model.parameter_counts()
    return {
        "preset": cfg.name,
        "device": name,
        "dtype": "bfloat16" if cuda else "float32",
        "denoise_steps": steps,
        "ms_per_chunk": chunk_ms,
        "encode_ms": encode_ms,
        "denoise_ms": velocity_ms * steps,
        "uncached_ms_per_chunk": uncached_ms,
        "speedup_over_uncached": uncached_ms / chunk_ms,
        "within_control_period": chunk_ms <= CONTROL_PERIOD_MS,
        "peak_memory_mib": peak,
        "params": counts["total"],
        "trainable_params": counts["trainable"],
        "param_counts": counts,
    }


def bench(
    policy: Path | None = None, preset: str | None = None, device: str = "auto", repeats: int = 20
) -> dict[str, Any]:
    """Bench a trained run's model, or a preset's with random weights."""
    from r2s2r.policy.train import resolve_device

    dev = resolve_device(device)
    if policy is not None:
        from r2s2r.policy.learned import LearnedPolicy

        model = LearnedPolicy.load(policy, device=str(dev)).model
    else:
        model = build_model(load_policy_cfg(preset or "tiny"), dev)
    return bench_policy(model, dev, repeats)


def parameter_table(presets: tuple[str, ...]) -> list[dict[str, Any]]:
    """Parameter counts of each preset, built on the meta device (no memory allocated)."""
    rows = []
    for name in presets:
        model = build_model(load_policy_cfg(name), "meta")
        rows.append({"preset": name, **model.parameter_counts()})
    return rows
