"""Training-time image augmentation: a random shift (replicate-pad, random crop back) and
colour jitter (brightness, contrast, saturation), per view and sample. All randomness comes
from the caller's ``torch.Generator``, so a resumed run augments exactly as a straight one.
At evaluation the caller simply does not call ``augment``."""

from __future__ import annotations

import torch
import torch.nn.functional as F

# Pad by this share of the image size before cropping back.
SHIFT = 0.06
# Brightness, contrast and saturation factors are drawn from [1 - J, 1 + J].
BRIGHTNESS, CONTRAST, SATURATION = 0.2, 0.2, 0.2
_GRAY = (0.299, 0.587, 0.114)


def _uniform(
    n: int, spread: float, generator: torch.Generator, device: torch.device
) -> torch.Tensor:
    u = torch.rand(n, generator=generator, device=generator.device)
    return (1.0 + spread * (2.0 * u - 1.0)).to(device).view(n, 1, 1, 1)


def augment(images: torch.Tensor, generator: torch.Generator, shift: float = SHIFT) -> torch.Tensor:
    """Images (B, V, 3, s, s) uint8 -> augmented images of the same shape and dtype, on the
    same device; ``generator`` (CPU or the images' device) drives every random draw.
    ``shift``: the pad before the random crop, as a share of the image size (0: no shift)."""
    if images.dtype != torch.uint8 or images.ndim != 5 or images.shape[2] != 3:
        raise ValueError(
            f"augment: expected (B, V, 3, s, s) uint8, got {tuple(images.shape)} {images.dtype}"
        )
    b, v, _, h, w = images.shape
    n, device = b * v, images.device
    x = images.reshape(n, 3, h, w).float()
    if shift > 0:
        x = _shift(x, max(1, round(shift * max(h, w))), generator)
    # Colour jitter, in a fixed order: brightness, contrast, saturation.
    gray_w = torch.tensor(_GRAY, device=device).view(1, 3, 1, 1)
    x = x * _uniform(n, BRIGHTNESS, generator, device)
    mean = (x * gray_w).sum(1, keepdim=True).mean((2, 3), keepdim=True)
    x = (x - mean) * _uniform(n, CONTRAST, generator, device) + mean
    gray = (x * gray_w).sum(1, keepdim=True)
    x = (x - gray) * _uniform(n, SATURATION, generator, device) + gray
    return x.clamp(0, 255).round().to(torch.uint8).reshape(b, v, 3, h, w)


def _shift(x: torch.Tensor, pad: int, generator: torch.Generator) -> torch.Tensor:
    """Images (n, 3, h, w) float replicate-padded by ``pad`` pixels, a random (h, w) window
    cropped back out of each."""
    n, _, h, w = x.shape
    device = x.device
    padded = F.pad(x, (pad, pad, pad, pad), mode="replicate")
    offsets = torch.randint(0, 2 * pad + 1, (n, 2), generator=generator, device=generator.device)
    offsets = offsets.to(device)
    rows = offsets[:, :1] + torch.arange(h, device=device)  # (n, h)
    cols = offsets[:, 1:] + torch.arange(w, device=device)  # (n, w)
    idx = torch.arange(n, device=device)[:, None, None]
    return padded.permute(0, 2, 3, 1)[idx, rows[:, :, None], cols[:, None, :]].permute(0, 3, 1, 2)
