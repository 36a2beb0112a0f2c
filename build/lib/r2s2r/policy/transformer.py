"""Transformer blocks of the policy: attention through ``scaled_dot_product_attention``, pre-norm
blocks over the observation tokens, cross-attention blocks for the resamplers, and the
time-modulated action blocks (adaLN-single: one shared time projection, a learned table per
block). No dropout anywhere, so a forward pass is a function of its inputs and the weights.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint


def init_linear(module: nn.Module) -> None:
    """Truncated-normal (std 0.02) weights and zero biases for every Linear under ``module``."""
    for sub in module.modules():
        if isinstance(sub, nn.Linear):
            nn.init.trunc_normal_(sub.weight, std=0.02)
            if sub.bias is not None:
                nn.init.zeros_(sub.bias)


def attend_mask(key_pad: Tensor | None, queries: int) -> Tensor | None:
    """An SDPA boolean mask (B, 1, Lq, Lk) from a key padding mask (B, Lk) (True = padding);
    None (attend everywhere, and SDPA's fast kernels) for None."""
    if key_pad is None:
        return None
    return (~key_pad)[:, None, None, :].expand(-1, 1, queries, -1)


class Attention(nn.Module):
    """Multi-head attention of ``x`` (B, Lq, D) over ``kv`` (B, Lk, Dkv); self-attention when
    ``kv`` is None. ``mask`` (B, 1, Lq, Lk) bool, True where a query may attend a key."""

    def __init__(self, dim: int, heads: int, kv_dim: int | None = None) -> None:
        super().__init__()
        self.heads = heads
        self.q = nn.Linear(dim, dim)
        self.kv = nn.Linear(kv_dim or dim, 2 * dim)
        self.out = nn.Linear(dim, dim)

    def forward(self, x: Tensor, kv: Tensor | None = None, mask: Tensor | None = None) -> Tensor:
        b, lq, d = x.shape
        source = x if kv is None else kv
        q = self.q(x).view(b, lq, self.heads, d // self.heads).transpose(1, 2)
        k, v = self.kv(source).view(b, source.shape[1], 2, self.heads, d // self.heads).unbind(2)
        y = F.scaled_dot_product_attention(q, k.transpose(1, 2), v.transpose(1, 2), attn_mask=mask)
        return self.out(y.transpose(1, 2).reshape(b, lq, d))


class Mlp(nn.Sequential):
    """Linear -> GELU (tanh) -> Linear."""

    def __init__(self, dim: int, ratio: float) -> None:
        hidden = int(dim * ratio)
        super().__init__(
            nn.Linear(dim, hidden), nn.GELU(approximate="tanh"), nn.Linear(hidden, dim)
        )


class EncoderBlock(nn.Module):
    """Pre-norm self-attention and MLP over tokens (B, L, D)."""

    def __init__(self, dim: int, heads: int, mlp_ratio: float) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = Attention(dim, heads)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = Mlp(dim, mlp_ratio)

    def forward(self, x: Tensor, mask: Tensor | None) -> Tensor:
        x = x + self.attn(self.norm1(x), mask=mask)
        return x + self.mlp(self.norm2(x))


class CrossBlock(nn.Module):
    """Queries (B, Lq, D) attend to inputs (B, Lk, D), then an MLP (a resampler layer)."""

    def __init__(self, dim: int, heads: int, mlp_ratio: float) -> None:
        super().__init__()
        self.norm_q = nn.LayerNorm(dim)
        self.norm_kv = nn.LayerNorm(dim)
        self.attn = Attention(dim, heads)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = Mlp(dim, mlp_ratio)

    def forward(self, q: Tensor, kv: Tensor, mask: Tensor | None) -> Tensor:
        q = q + self.attn(self.norm_q(q), self.norm_kv(kv), mask=mask)
        return q + self.mlp(self.norm2(q))


class Resampler(nn.Module):
    """Learned queries (``tokens`` of them) cross-attending a variable set of features:
    (B, L, D) with key padding (B, L) -> (B, tokens, D)."""

    def __init__(self, dim: int, heads: int, tokens: int, layers: int, mlp_ratio: float) -> None:
        super().__init__()
        self.queries = nn.Parameter(torch.randn(tokens, dim) * 0.02)
        self.blocks = nn.ModuleList(CrossBlock(dim, heads, mlp_ratio) for _ in range(layers))
        self.norm = nn.LayerNorm(dim)
        init_linear(self.blocks)

    def forward(self, features: Tensor, key_pad: Tensor | None) -> Tensor:
        q = self.queries.to(features.dtype).expand(features.shape[0], -1, -1)
        mask = attend_mask(key_pad, q.shape[1])
        for block in self.blocks:
            q = block(q, features, mask)
        return self.norm(q)


def modulate(x: Tensor, shift: Tensor, scale: Tensor) -> Tensor:
    """adaLN: x (B, L, D) scaled and shifted by (B, D) vectors."""
    return x * (1 + scale[:, None]) + shift[:, None]


class ActionBlock(nn.Module):
    """An action-token block: time-modulated self-attention, cross-attention to the
    observation tokens, and a time-modulated MLP. ``mod`` (B, 6, D) is the shared time
    projection; this block adds its own learned table (zeros at init, so the gates start
    closed and the block starts as cross-attention only)."""

    def __init__(self, dim: int, heads: int, mlp_ratio: float) -> None:
        super().__init__()
        self.table = nn.Parameter(torch.zeros(6, dim))
        self.norm1 = nn.LayerNorm(dim, elementwise_affine=False)
        self.attn = Attention(dim, heads)
        self.norm_x = nn.LayerNorm(dim)
        self.cross = Attention(dim, heads)
        self.norm2 = nn.LayerNorm(dim, elementwise_affine=False)
        self.mlp = Mlp(dim, mlp_ratio)

    def forward(
        self, x: Tensor, mod: Tensor, ctx: Tensor, self_mask: Tensor | None, ctx_mask: Tensor | None
    ) -> Tensor:
        shift1, scale1, gate1, shift2, scale2, gate2 = (mod + self.table.to(mod.dtype)).unbind(1)
        x = x + gate1[:, None] * self.attn(modulate(self.norm1(x), shift1, scale1), mask=self_mask)
        x = x + self.cross(self.norm_x(x), ctx, mask=ctx_mask)
        return x + gate2[:, None] * self.mlp(modulate(self.norm2(x), shift2, scale2))


def time_embedding(
    t: Tensor, dim: int, min_period: float = 4e-3, max_period: float = 4.0
) -> Tensor:
    """Sin-cos embedding of flow times t (B,) in [0, 1] -> (B, dim), periods spaced
    geometrically from ``min_period`` to ``max_period`` (openpi's choice)."""
    half = dim // 2
    fraction = torch.linspace(0.0, 1.0, half, device=t.device, dtype=torch.float32)
    period = min_period * (max_period / min_period) ** fraction
    angle = t.float()[:, None] * (2 * math.pi / period)[None]
    return torch.cat([torch.sin(angle), torch.cos(angle)], dim=-1)


class Stack(nn.Module):
    """A list of blocks run in order, each optionally under activation checkpointing."""

    def __init__(self, blocks: list[nn.Module]) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(blocks)
        self.checkpointing = False
        init_linear(self.blocks)

    def forward(self, x: Tensor, *args: Tensor | None) -> Tensor:
        for block in self.blocks:
            if self.checkpointing and self.training and torch.is_grad_enabled():
                x = checkpoint(block, x, *args, use_reentrant=False)
            else:
                x = block(x, *args)
        return x
