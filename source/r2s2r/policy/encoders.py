"""The policy's encoders: the image backbone (a frozen timm DINOv3 ViT with LoRA in its last
blocks, shared by the views), the frozen open_clip text tower with a per-instruction cache,
the proprio-history encoder, and the per-embodiment linear layer (GR00T's category-specific
linear: a weight W[embodiment, in, out]).

Weights load only from local files; nothing here downloads.
"""

from __future__ import annotations

import re
from collections import OrderedDict
from pathlib import Path
from typing import Any

import open_clip
import peft
import timm
import torch
from open_clip.transformer import TextTransformer
from torch import Tensor, nn

from r2s2r.policy.base import PolicyError
from r2s2r.policy.config import BackboneCfg, TextCfg
from r2s2r.policy.hindsight import PLACE_DIM
from r2s2r.policy.transformer import Resampler, init_linear

# Where the pretrained files come from (said in the error when one is missing).
BACKBONE_HINT = (
    "get DINOv3 weights on a machine with network access (timm's "
    "'timm/<name>.lvd1689m' model.safetensors from the Hugging Face hub, or Meta's "
    "checkpoint from https://github.com/facebookresearch/dinov3), copy the file here and "
    "point backbone.weights at it, or set backbone.weights to null for random weights"
)
TEXT_HINT = (
    "get the open_clip checkpoint of this model on a machine with network access "
    "(open_clip_model.safetensors of e.g. 'laion/CLIP-ViT-B-16-laion2B-s34B-b88K' on the "
    "Hugging Face hub), copy the file here and point text.weights at it, or set text.weights "
    "to null for random weights"
)
# The ViT linears that get LoRA adapters, inside ``blocks.<i>.``.
LORA_TARGETS = r"(attn\.(qkv|proj)|mlp\.fc[12])"
# Instruction strings the text cache keeps before it forgets the oldest.
TEXT_CACHE_SIZE = 4096


def check_weights(path: Path | None, field: str, hint: str) -> Path | None:
    """``path`` if it is None or an existing file, else a ``PolicyError`` naming it."""
    if path is not None and not Path(path).is_file():
        raise PolicyError(f"{field}: weights file {str(path)!r} does not exist; {hint}")
    return path


class EmbodimentLinear(nn.Module):
    """A linear layer with one weight per embodiment: x (B, ..., in), ids (B,) -> (B, ..., out)."""

    def __init__(self, embodiments: int, d_in: int, d_out: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(embodiments, d_in, d_out) * d_in**-0.5)
        self.bias = nn.Parameter(torch.zeros(embodiments, d_out))

    def forward(self, x: Tensor, ids: Tensor) -> Tensor:
        w = self.weight[ids].to(x.dtype)  # (B, in, out)
        b = self.bias[ids].to(x.dtype)  # (B, out)
        flat = x.reshape(x.shape[0], -1, x.shape[-1])
        y = torch.baddbmm(b[:, None], flat, w)
        return y.reshape(*x.shape[:-1], w.shape[-1])


def lora_pattern(depth: int, blocks: int) -> str:
    """The peft target regex (matched with ``re.fullmatch``) for the last ``blocks`` of ``depth``;
    anchored at ``blocks.`` so the patch embedding's ``proj`` is never matched."""
    last = "|".join(str(i) for i in range(depth - blocks, depth))
    return rf"blocks\.({last})\.{LORA_TARGETS}"


class ImageEncoder(nn.Module):
    """Views (B, V, 3, s, s) uint8 -> tokens (B, V * (1 + N), width): the CLS and N patch
    tokens (average-pooled to a ``grid`` x ``grid`` grid, where given) of each view from the
    backbone (frozen with LoRA trainable, or trained whole:
    ``BackboneCfg.finetune``), projected, plus a learned view embedding and a learned
    token-position embedding."""

    mean: Tensor
    scale: Tensor

    def __init__(
        self,
        cfg: BackboneCfg,
        image_size: int,
        width: int,
        max_views: int,
        grid: int | None = None,
    ) -> None:
        super().__init__()
        weights = check_weights(cfg.weights, "backbone.weights", BACKBONE_HINT)
        kwargs: dict[str, Any] = dict(cfg.overrides, img_size=image_size, num_classes=0)
        meta = torch.empty(0).device.type == "meta"
        vit: Any
        try:
            if weights is None or meta:
                vit = timm.create_model(cfg.name, pretrained=False, **kwargs)
            else:
                overlay = dict(file=str(weights))
                vit = timm.create_model(
                    cfg.name, pretrained=True, pretrained_cfg_overlay=overlay, **kwargs
                )
        except RuntimeError as err:
            raise PolicyError(f"backbone: cannot build {cfg.name!r} from {weights}: {err}") from err
        depth = len(vit.blocks)
        if cfg.lora_blocks > depth:
            raise PolicyError(
                f"backbone.lora_blocks: {cfg.lora_blocks} is more than the {depth} blocks of "
                f"{cfg.name!r}"
            )
        # The timm ViT (its attributes are untyped in timm), with the adapters injected
        # unless it is trained whole.
        self.vit: Any
        if cfg.finetune == "full":
            self.lora_pattern = ""
            self.vit = vit
        else:
            for p in vit.parameters():
                p.requires_grad_(False)
            self.lora_pattern = lora_pattern(depth, cfg.lora_blocks)
            lora = peft.LoraConfig(
                r=cfg.lora_rank,
                lora_alpha=cfg.lora_alpha,  # type: ignore[arg-type]  # peft takes any number.
                lora_dropout=0.0,
                target_modules=self.lora_pattern,
            )
            self.vit = peft.inject_adapter_in_model(lora, vit)
        self.prefix = int(vit.num_prefix_tokens)
        # The patch grid's side, and the side it is pooled to (the same: no pooling).
        self.side = image_size // int(vit.patch_embed.patch_size[0])
        self.grid = grid or self.side
        self.patches = self.grid**2
        mean = torch.tensor(vit.pretrained_cfg["mean"], dtype=torch.float32)
        std = torch.tensor(vit.pretrained_cfg["std"], dtype=torch.float32)
        self.register_buffer("mean", (mean * 255).view(1, 3, 1, 1), persistent=False)
        self.register_buffer("scale", (1 / (std * 255)).view(1, 3, 1, 1), persistent=False)
        dim = int(vit.embed_dim)
        self.proj = nn.Linear(dim, width)
        self.view_embed = nn.Parameter(torch.randn(max_views, width) * 0.02)
        self.pos_embed = nn.Parameter(torch.randn(1 + self.patches, width) * 0.02)
        init_linear(self.proj)

    def lora_parameters(self) -> list[nn.Parameter]:
        """The LoRA adapter weights (none when the backbone is trained whole)."""
        return [p for n, p in self.vit.named_parameters() if "lora_" in n]

    def backbone_parameters(self) -> list[nn.Parameter]:
        """The ViT's weights (frozen unless trained whole), adapters included."""
        return list(self.vit.parameters())

    def set_grad_checkpointing(self, enabled: bool) -> None:
        self.vit.set_grad_checkpointing(enabled)

    def forward(self, images: Tensor) -> Tensor:
        b, v = images.shape[:2]
        x = images.flatten(0, 1).float()
        x = (x - self.mean) * self.scale
        feats = self.vit.forward_features(x)  # (B*V, prefix + N, dim)
        patches = feats[:, self.prefix :]
        if self.grid != self.side:
            n, s = patches.shape[0], self.side
            square = patches.transpose(1, 2).reshape(n, -1, s, s)
            pooled = nn.functional.adaptive_avg_pool2d(square, self.grid)
            patches = pooled.flatten(2).transpose(1, 2)
        feats = torch.cat([feats[:, :1], patches], dim=1)
        tokens = self.proj(feats) + self.pos_embed.to(feats.dtype)
        tokens = tokens.view(b, v, -1, tokens.shape[-1]) + self.view_embed[:v, None].to(feats.dtype)
        return tokens.flatten(1, 2)


class SpatialSoftmax(nn.Module):
    """Feature maps (N, C, h, w) -> K keypoints (N, K, 2): a 1 x 1 convolution to K maps,
    each a softmax over its positions (with a learned temperature), and the expected x and
    y in [-1, 1] under it (Levine et al. 2016; robomimic's SpatialSoftmax)."""

    xs: Tensor
    ys: Tensor

    def __init__(self, channels: int, keypoints: int, h: int, w: int) -> None:
        super().__init__()
        self.maps = nn.Conv2d(channels, keypoints, 1)
        self.log_temperature = nn.Parameter(torch.zeros(()))
        ys, xs = torch.meshgrid(torch.linspace(-1, 1, h), torch.linspace(-1, 1, w), indexing="ij")
        self.register_buffer("xs", xs.reshape(-1), persistent=False)
        self.register_buffer("ys", ys.reshape(-1), persistent=False)

    def forward(self, x: Tensor) -> Tensor:
        maps = self.maps(x).flatten(2)  # (N, K, h * w)
        attn = torch.softmax(maps / self.log_temperature.exp(), dim=-1)
        return torch.stack([attn @ self.xs.to(attn.dtype), attn @ self.ys.to(attn.dtype)], dim=-1)


class ConvEncoder(nn.Module):
    """Views (B, V, 3, s, s) uint8 -> tokens (B, 2 V, width): per view (the same weights for
    every view) four 3 x 3 convolutions (strides 1, 2, 1, 2, GroupNorm, GELU), a keypoint
    token from the spatial-softmax keypoints and a token of the mean features, plus a learned
    view embedding. Trained whole from random weights; a 1-2 px object at 64 px keeps its
    place in the keypoints, where a 16 px patch blurs it."""

    def __init__(self, cfg: BackboneCfg, image_size: int, width: int, max_views: int) -> None:
        super().__init__()
        c = cfg.channels
        layers: list[nn.Module] = []
        inputs = 3
        for out, stride in zip(c, (1, 2, 1, 2), strict=True):
            layers += [
                nn.Conv2d(inputs, out, 3, stride=stride, padding=1),
                nn.GroupNorm(min(8, out), out),
                nn.GELU(),
            ]
            inputs = out
        self.net = nn.Sequential(*layers)
        side = image_size // 4
        self.keypoints = SpatialSoftmax(c[-1], cfg.keypoints, side, side)
        self.kp_proj = nn.Linear(2 * cfg.keypoints, width)
        self.feat_proj = nn.Linear(c[-1], width)
        self.view_embed = nn.Parameter(torch.randn(max_views, 2, width) * 0.02)
        init_linear(self.kp_proj)
        init_linear(self.feat_proj)

    def lora_parameters(self) -> list[nn.Parameter]:
        return []

    def backbone_parameters(self) -> list[nn.Parameter]:
        """The convolutional net's weights (trained whole)."""
        return list(self.net.parameters())

    def set_grad_checkpointing(self, enabled: bool) -> None:
        """Nothing to recompute: the net is small."""

    def forward(self, images: Tensor) -> Tensor:
        b, v = images.shape[:2]
        x = images.flatten(0, 1).float() * (1 / 127.5) - 1.0
        feats = self.net(x)  # (B*V, C, s/4, s/4)
        kp = self.kp_proj(self.keypoints(feats).flatten(1))
        mean = self.feat_proj(feats.mean(dim=(2, 3)))
        tokens = torch.stack([kp, mean], dim=1).view(b, v, 2, -1)
        tokens = tokens + self.view_embed[:v].to(tokens.dtype)
        return tokens.flatten(1, 2)


class Locator(nn.Module):
    """Views (B, V, 3, s, s) uint8 -> the object's place (B, PLACE_DIM) in metres. Each view
    (the same weights for every view) goes through three 3 x 3 convolutions (strides 2, 1,
    1; GELU) to spatial-softmax keypoints and its mean features; an MLP reads them all.
    Small and trained whole on the take's own hindsight place (``hindsight.place_targets``):
    the object, 1-2 px wide at 64 px, keeps its place in the keypoints (measured on a take:
    2.6 cm of belt a pixel in the head view, 1.2 cm in the left wrist view, which sees the
    belt upstream)."""

    def __init__(self, image_size: int, views: int, keypoints: int = 16, hidden: int = 128) -> None:
        super().__init__()
        c = (16, 32, 32)
        self.net = nn.Sequential(
            nn.Conv2d(3, c[0], 3, stride=2, padding=1),
            nn.GELU(),
            nn.Conv2d(c[0], c[1], 3, stride=1, padding=1),
            nn.GELU(),
            nn.Conv2d(c[1], c[2], 3, stride=1, padding=1),
            nn.GELU(),
        )
        side = (image_size + 1) // 2
        self.views = views
        self.keypoints = SpatialSoftmax(c[2], keypoints, side, side)
        self.head = nn.Sequential(
            nn.Linear(views * (2 * keypoints + c[2]), hidden),
            nn.GELU(),
            nn.Linear(hidden, PLACE_DIM),
        )

    def forward(self, views: Tensor) -> Tensor:
        b, v = views.shape[:2]
        if v != self.views:
            raise PolicyError(f"images: the locator reads {self.views} views, got {v}")
        x = views.flatten(0, 1).float() * (1 / 127.5) - 1.0
        feats = self.net(x)  # (B*V, C, s/2, s/2)
        per_view = torch.cat([self.keypoints(feats).flatten(1), feats.mean(dim=(2, 3))], dim=1)
        return self.head(per_view.view(b, -1))


def image_encoder(
    cfg: BackboneCfg, image_size: int, width: int, max_views: int, grid: int | None = None
) -> ImageEncoder | ConvEncoder:
    """The image encoder of ``cfg.kind``."""
    if cfg.kind == "conv":
        return ConvEncoder(cfg, image_size, width, max_views)
    return ImageEncoder(cfg, image_size, width, max_views, grid)


def _text_state(path: Path) -> dict[str, Tensor]:
    """The text-tower entries of an open_clip checkpoint file (a full CLIP state dict)."""
    try:
        state = open_clip.factory.load_state_dict(str(path))
    except Exception as err:
        raise PolicyError(f"text.weights: cannot read {str(path)!r}: {err}") from err
    if any(k.startswith("text.") for k in state):
        return {k[5:]: v for k, v in state.items() if k.startswith("text.")}
    skip = re.compile(r"(visual\.|logit_scale|logit_bias|attn_mask)")
    return {k: v for k, v in state.items() if not skip.match(k)}


class TextEncoder(nn.Module):
    """The frozen open_clip text tower: instructions -> per-token features (B, L, text_width)
    and a key padding mask (B, L) (True = padding), each instruction encoded once and cached."""

    def __init__(self, cfg: TextCfg) -> None:
        super().__init__()
        weights = check_weights(cfg.weights, "text.weights", TEXT_HINT)
        # A schema name ('hf-hub:...') would fetch its config from the network.
        model_cfg = None if ":" in cfg.name else open_clip.get_model_config(cfg.name)
        if model_cfg is None:
            raise PolicyError(
                f"text.name: {cfg.name!r} is not a built-in open_clip model config "
                f"(expected a name from open_clip.list_models(), e.g. 'ViT-B-16')"
            )
        known = open_clip.CLIPTextCfg.__dataclass_fields__
        unknown = sorted(set(cfg.overrides) - set(known))
        if unknown:
            raise PolicyError(f"text.overrides: unknown open_clip text fields {unknown}")
        text_cfg = open_clip.CLIPTextCfg(**{**model_cfg["text_cfg"], **cfg.overrides})
        if text_cfg.hf_model_name:
            raise PolicyError(
                f"text.name: {cfg.name!r} has a Hugging Face text tower; expected CLIP's"
            )
        act = open_clip.model.QuickGELU if model_cfg.get("quick_gelu") else nn.GELU
        self.tower = TextTransformer(
            context_length=text_cfg.context_length,
            vocab_size=text_cfg.vocab_size,
            width=text_cfg.width,
            heads=text_cfg.heads,
            layers=text_cfg.layers,
            mlp_ratio=text_cfg.mlp_ratio,
            ls_init_value=text_cfg.ls_init_value,
            output_dim=model_cfg["embed_dim"],
            embed_cls=text_cfg.embed_cls,
            no_causal_mask=text_cfg.no_causal_mask,
            pad_id=text_cfg.pad_id,
            pool_type=text_cfg.pool_type,
            proj_type=text_cfg.proj_type,
            proj_bias=text_cfg.proj_bias,
            output_tokens=True,
            act_layer=act,
        )
        if weights is not None and torch.empty(0).device.type != "meta":
            missing, unexpected = self.tower.load_state_dict(_text_state(weights), strict=False)
            if missing or unexpected:
                raise PolicyError(
                    f"text.weights: {str(weights)!r} does not fit the {cfg.name!r} text tower "
                    f"with overrides {cfg.overrides}: missing {missing[:5]}, unexpected "
                    f"{unexpected[:5]}"
                )
        for p in self.tower.parameters():
            p.requires_grad_(False)
        self.tokenizer = open_clip.get_tokenizer(cfg.name, context_length=text_cfg.context_length)
        self.eot = int(self.tokenizer.eot_token_id)
        self.width = text_cfg.width
        self.cache: OrderedDict[str, Tensor] = OrderedDict()
        # Loading weights invalidates what was encoded with the old ones.
        self.register_load_state_dict_post_hook(lambda module, _: module.cache.clear())
        # The number of strings the tower has encoded (the cache's misses).
        self.encoded = 0

    @torch.no_grad()
    def _encode(self, texts: list[str]) -> list[Tensor]:
        """Features (L_i, width) of each text up to and including its end token."""
        device = self.tower.positional_embedding.device
        ids = self.tokenizer(texts).to(device)
        with torch.autocast(device.type, enabled=False):
            _, tokens = self.tower(ids)
        lengths = (ids == self.eot).int().argmax(dim=1) + 1
        self.encoded += len(texts)
        return [tokens[i, : int(n)].float() for i, n in enumerate(lengths)]

    def forward(self, texts: list[str]) -> tuple[Tensor, Tensor]:
        # Each text is encoded alone: its features must not depend on which other texts
        # missed the cache with it (batched matmuls round differently by batch size), or a
        # resumed run would drift from an uninterrupted one.
        for text in sorted({t for t in texts if t not in self.cache}):
            self.cache[text] = self._encode([text])[0]
        for text in texts:
            self.cache.move_to_end(text)
        while len(self.cache) > TEXT_CACHE_SIZE:
            self.cache.popitem(last=False)
        device = self.tower.positional_embedding.device
        rows = [self.cache[t].to(device) for t in texts]
        longest = max(r.shape[0] for r in rows)
        feats = rows[0].new_zeros(len(rows), longest, self.width)
        pad = torch.ones(len(rows), longest, dtype=torch.bool, device=device)
        for i, r in enumerate(rows):
            feats[i, : r.shape[0]] = r
            pad[i, : r.shape[0]] = False
        return feats, pad


class TaskEncoder(nn.Module):
    """Instructions -> ``tokens`` task tokens (B, tokens, width): text features projected and
    resampled by learned queries."""

    def __init__(self, cfg: TextCfg, width: int, heads: int, layers: int, mlp_ratio: float) -> None:
        super().__init__()
        self.text = TextEncoder(cfg)
        self.proj = nn.Linear(self.text.width, width)
        self.resampler = Resampler(width, heads, cfg.task_tokens, layers, mlp_ratio)
        init_linear(self.proj)

    def forward(self, texts: list[str]) -> Tensor:
        feats, pad = self.text(texts)
        return self.resampler(self.proj(feats), pad)


class ProprioEncoder(nn.Module):
    """State history (B, P, Ds) with padding (B, P) -> ``tokens`` proprio tokens (B, tokens,
    width): a per-embodiment projection per step, a learned step embedding, and a resampler
    over the steps that are not padding (the newest step, now, always counts)."""

    def __init__(
        self, embodiments: int, state_dim: int, history: int, width: int, heads: int,
        tokens: int, layers: int, mlp_ratio: float,
    ) -> None:  # fmt: skip
        super().__init__()
        self.proj = EmbodimentLinear(embodiments, state_dim, width)
        self.step_embed = nn.Parameter(torch.randn(history, width) * 0.02)
        self.resampler = Resampler(width, heads, tokens, layers, mlp_ratio)

    def forward(self, state: Tensor, state_is_pad: Tensor, ids: Tensor) -> Tensor:
        x = self.proj(state, ids) + self.step_embed.to(state.dtype)
        pad = state_is_pad.clone()
        pad[:, -1] = False
        return self.resampler(x, pad)
