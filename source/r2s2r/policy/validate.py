"""Validation on held-out episodes during training (``Validation``): the flow-matching loss
and, more telling, how far the policy's sampled chunks put each TCP from where the
demonstration put it, in millimetres. The windows, the flow noise and times are fixed draws,
so two measurements differ only by the weights."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import torch
from torch import nn

from r2s2r.policy.collate import Collate, to_device
from r2s2r.policy.model import FlowMatchingPolicy
from r2s2r.policy.windows import WindowDataset


class Validation:
    """Up to ``windows`` windows of ``data`` drawn once from ``seed``, in batches of
    ``batch_size``."""

    def __init__(
        self, data: WindowDataset, collate: Collate, windows: int, batch_size: int, seed: int
    ) -> None:
        rng = np.random.default_rng([seed, 0x5A1])
        picks = np.sort(rng.choice(len(data), min(windows, len(data)), replace=False))
        self.collate = collate
        self.contract = collate.codec.contract
        self.batches: list[dict] = []
        # Per batch: the demonstrated TCP positions (B, H, S, 3), their padding (B, H) and
        # the windows' current states (B, S_dim).
        self.truth: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        for start in range(0, len(picks), batch_size):
            samples = [data[int(i)] for i in picks[start : start + batch_size]]
            self.batches.append(collate(samples))
            actions = np.stack([s["actions"] for s in samples])
            arm, _ = self.contract.split_action(actions)
            self.truth.append(
                (
                    arm[..., :3],
                    np.stack([s["action_is_pad"] for s in samples]),
                    np.stack([s["state"][-1] for s in samples]),
                )
            )
        self.windows = len(picks)

    @torch.no_grad()
    def measure(
        self, model: FlowMatchingPolicy, device: torch.device
    ) -> tuple[float, float, float | None]:
        """(mean flow-matching loss, mean TCP position error in mm over the chunks' real
        steps and every arm, the locator's mean place error in cm over the windows whose
        place is known: None without a locator, NaN where no window has one) of ``model``
        as it is."""
        losses: list[float] = []
        errors: list[float] = []
        weights: list[int] = []
        places: list[float] = []
        for k, (batch, (pos, pad, now)) in enumerate(zip(self.batches, self.truth, strict=True)):
            batch = to_device(batch, device)
            gen = torch.Generator(device).manual_seed(k)
            _, parts = model.loss(batch, gen)
            losses.append(parts["flow"] * len(now))
            if "place_cm" in parts and np.isfinite(parts["place_cm"]):
                places.append(parts["place_cm"])
            internal = model.sample(batch, generator=gen)
            actions = self.collate.actions_out(internal, now)
            if self.contract.action_mode != "tcp":
                continue
            arm, _ = self.contract.split_action(actions)
            err = np.linalg.norm(arm[..., :3] - pos, axis=-1).mean(axis=-1)  # (B, H)
            errors.append(float(err[~pad].sum()))
            weights.append(int((~pad).sum()))
        pos_mm = 1e3 * sum(errors) / max(1, sum(weights)) if weights else float("nan")
        place_cm = None
        if model.locator is not None:
            place_cm = float(np.mean(places)) if places else float("nan")
        return sum(losses) / max(1, self.windows), pos_mm, place_cm


@contextmanager
def swapped(params: dict[str, nn.Parameter], values: dict[str, torch.Tensor]) -> Iterator[None]:
    """``params`` hold ``values`` (the EMA weights) inside the block, their own after it."""
    saved = {n: p.detach().clone() for n, p in params.items()}
    with torch.no_grad():
        for n, p in params.items():
            p.copy_(values[n])
    try:
        yield
    finally:
        with torch.no_grad():
            for n, p in params.items():
                p.copy_(saved[n])
