"""The flow-matching visuomotor policy (the reference study's model).

Observation tokens (views through the LoRA-adapted DINOv3 backbone, task tokens resampled
from the frozen CLIP text features, proprio tokens, an optional domain token, an optional
belt-speed token from the conveyor drive's reading) go through the
observation transformer once per chunk (``encode``); in training, an optional head predicts
the frame's hindsight targets from them (policy/hindsight.py), and an optional locator reads
the object's place from the views into one more token. The action transformer maps H noisy
action tokens and the flow time to a velocity, attending to them (``velocity``). Flow
matching follows openpi: t ~ Beta(1.5, 1) * 0.999 + 0.001 with t = 1 the noise,
x_t = t * noise + (1 - t) * actions, the target u = noise - actions; sampling is Euler from
t = 1 to 0.

Guided sampling (``sample(..., guide=Guide(...))``) is real-time chunking's inpainting
(Black et al. 2025), written in this time convention: at each Euler step the clean estimate
is x0 = x_t - t * v, the error (Y - x0) * W is pulled back through the action transformer
(a vector-Jacobian product, g = (d x0 / d x_t)^T [(Y - x0) * W]), and the velocity becomes
v - c g with c = min(beta, (t^2 + (1 - t)^2) / (t (1 - t))): stepping x_t by -dt v then
moves x_t along g, down the weighted error (RTC's tau = 1 - t, its v = -ours).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from r2s2r.policy.base import PolicyError
from r2s2r.policy.config import PolicyCfg
from r2s2r.policy.encoders import (
    EmbodimentLinear,
    Locator,
    ProprioEncoder,
    TaskEncoder,
    image_encoder,
)
from r2s2r.policy.hindsight import HINDSIGHT_DIM, PLACE_DIM
from r2s2r.policy.transformer import (
    ActionBlock,
    EncoderBlock,
    Stack,
    attend_mask,
    init_linear,
    time_embedding,
)
from r2s2r.sim.contract import ENV_STATE_DIM
from r2s2r.sim.embodiment import EMBODIMENT_IDS


@dataclass
class Context:
    """What ``encode`` hands the action transformer: the observation tokens (B, N, width),
    the batch's embodiment ids (B,) int64 and real action dims (B, Da) bool, and the tokens'
    padding (B, N) (True = padding; None: none is, as every batch's layout is fixed now)."""

    tokens: Tensor
    embodiment_id: Tensor
    action_dim_mask: Tensor
    pad: Tensor | None = None
    # The locator's prediction of the object's place (B, PLACE_DIM) m, where it has one.
    place: Tensor | None = None


@dataclass
class Guide:
    """RTC's inpainting target for ``FlowMatchingPolicy.sample``, in the model's action space
    (normalized, encoded, padded): ``target`` Y (B, H, Da), ``weights`` W (B, H) in [0, 1]
    per step, ``beta`` the clip of the guidance weight (see the module docstring)."""

    target: Tensor
    weights: Tensor
    beta: float


def guidance_weight(t: float, beta: float) -> float:
    """RTC's guidance weight at flow time t (1 = noise), clipped at ``beta``: the ratio
    (1 - tau) / tau / r^2 with r^2 = (1 - tau)^2 / (tau^2 + (1 - tau)^2), tau = 1 - t; it is
    infinite at the first step (t = 1), where the clip decides."""
    if t <= 0.0 or t >= 1.0:
        return beta
    return min(beta, (t * t + (1.0 - t) ** 2) / (t * (1.0 - t)))


# The belt speed token's input scale (m/s): the nominal range is 0.05-0.10.
BELT_SPEED_SCALE = 0.1
# The locator's loss unit (m): an error of this size costs 1.
PLACE_UNIT_M = 0.05


def _shape_error(key: str, expected: str, value: Any) -> PolicyError:
    got = tuple(value.shape) if isinstance(value, Tensor) else type(value).__name__
    dtype = f" {value.dtype}" if isinstance(value, Tensor) else ""
    return PolicyError(f"batch[{key!r}]: expected {expected}, got {got}{dtype}")


class FlowMatchingPolicy(nn.Module):
    """The policy network; see the module docstring. ``num_embodiments`` sizes the
    per-embodiment projections."""

    def __init__(self, cfg: PolicyCfg, num_embodiments: int = len(EMBODIMENT_IDS)) -> None:
        super().__init__()
        self.cfg = cfg
        self.num_embodiments = num_embodiments
        d, heads, ratio = cfg.width, cfg.heads, cfg.mlp_ratio
        self.image = (
            image_encoder(cfg.backbone, cfg.image_size, d, cfg.max_views, cfg.view_grid)
            if cfg.views
            else None
        )
        self.task = TaskEncoder(cfg.text, d, heads, cfg.resampler_layers, ratio)
        self.proprio = ProprioEncoder(
            num_embodiments, cfg.max_state_dim, cfg.state_history, d, heads,
            cfg.proprio_tokens, cfg.resampler_layers, ratio,
        )  # fmt: skip
        self.domain = nn.Embedding(cfg.num_domains, d) if cfg.domain_conditioning else None
        self.belt = (
            nn.Sequential(nn.Linear(1, d), nn.SiLU(), nn.Linear(d, d)) if cfg.belt_speed else None
        )
        self.obs = Stack([EncoderBlock(d, heads, ratio) for _ in range(cfg.obs_layers)])
        self.obs_norm = nn.LayerNorm(d)
        self.action_in = EmbodimentLinear(num_embodiments, cfg.max_action_dim, d)
        self.action_pos = nn.Parameter(torch.randn(cfg.action_horizon, d) * 0.02)
        self.time_mlp = nn.Sequential(nn.Linear(d, d), nn.SiLU(), nn.Linear(d, d))
        # adaLN-single: one projection of the time embedding shared by all action blocks.
        self.time_mod = nn.Sequential(nn.SiLU(), nn.Linear(d, 6 * d))
        self.act = Stack([ActionBlock(d, heads, ratio) for _ in range(cfg.action_layers)])
        self.final_mod = nn.Sequential(nn.SiLU(), nn.Linear(d, 2 * d))
        self.final_norm = nn.LayerNorm(d, elementwise_affine=False)
        self.action_out = EmbodimentLinear(num_embodiments, d, cfg.max_action_dim)
        init_linear(self.time_mlp)
        for zero in (self.time_mod, self.final_mod):
            nn.init.zeros_(zero[1].weight)  # type: ignore[arg-type]
            nn.init.zeros_(zero[1].bias)  # type: ignore[arg-type]
        if self.domain is not None:
            nn.init.normal_(self.domain.weight, std=0.02)
        if self.belt is not None:
            init_linear(self.belt)
        self.object = (
            nn.Sequential(nn.Linear(ENV_STATE_DIM, d), nn.SiLU(), nn.Linear(d, d))
            if cfg.object_pose
            else None
        )
        if self.object is not None:
            init_linear(self.object)
        self.hindsight = (
            nn.Sequential(nn.Linear(d, d), nn.SiLU(), nn.Linear(d, HINDSIGHT_DIM))
            if cfg.hindsight_weight > 0
            else None
        )
        if self.hindsight is not None:
            init_linear(self.hindsight)
        self.locator = (
            Locator(cfg.image_size, cfg.locator_views) if cfg.locator_weight > 0 else None
        )
        self.place = (
            nn.Sequential(nn.Linear(PLACE_DIM, d), nn.SiLU(), nn.Linear(d, d))
            if self.locator is not None
            else None
        )
        if self.place is not None:
            init_linear(self.place)

    # The batch.

    def _check(self, batch: dict, training: bool) -> None:
        """A ``PolicyError`` naming the first key of ``batch`` whose shape or dtype is wrong."""
        cfg = self.cfg
        images = batch.get("images")
        b = images.shape[0] if isinstance(images, Tensor) else 0
        s = cfg.image_size
        if (
            not isinstance(images, Tensor)
            or images.dtype != torch.uint8
            or images.ndim != 5
            or images.shape[2:] != (3, s, s)
            or not 1 <= images.shape[1] <= cfg.max_views
        ):
            raise _shape_error("images", f"(B, V <= {cfg.max_views}, 3, {s}, {s}) uint8", images)
        p, h = cfg.state_history, cfg.action_horizon
        spec: list[tuple[str, tuple[int, ...], torch.dtype]] = [
            ("state", (b, p, cfg.max_state_dim), torch.float32),
            ("state_is_pad", (b, p), torch.bool),
            ("embodiment_id", (b,), torch.int64),
        ]
        if "action_dim_mask" in batch or training:
            spec.append(("action_dim_mask", (b, cfg.max_action_dim), torch.bool))
        if training:
            spec += [
                ("actions", (b, h, cfg.max_action_dim), torch.float32),
                ("action_is_pad", (b, h), torch.bool),
            ]
        if cfg.domain_conditioning:
            spec.append(("domain_id", (b,), torch.int64))
        if cfg.belt_speed:
            spec.append(("belt_speed", (b,), torch.float32))
        if cfg.object_pose:
            spec.append(("object_pose", (b, ENV_STATE_DIM), torch.float32))
        if training and self.hindsight is not None:
            spec.append(("hindsight", (b, HINDSIGHT_DIM), torch.float32))
        if training and self.locator is not None:
            spec.append(("place", (b, PLACE_DIM), torch.float32))
        for key, shape, dtype in spec:
            value = batch.get(key)
            if not isinstance(value, Tensor) or tuple(value.shape) != shape or value.dtype != dtype:
                raise _shape_error(key, f"{shape} {dtype}", value)
        task = batch.get("task")
        if (
            not isinstance(task, (list, tuple))
            or len(task) != b
            or not all(isinstance(t, str) for t in task)
        ):
            raise PolicyError(f"batch['task']: expected a list of {b} instruction strings")
        if cfg.belt_speed and not bool(torch.isfinite(batch["belt_speed"]).all()):
            raise PolicyError(
                "batch['belt_speed']: this policy reads the belt drive's speed, and some "
                "samples have none (a dataset whose episodes record no belt_speed, or an "
                "observation without one)"
            )
        if cfg.object_pose and not bool(torch.isfinite(batch["object_pose"]).all()):
            raise PolicyError(
                "batch['object_pose']: this (diagnostic) policy reads the object's true pose, "
                "and some samples have none (a dataset recorded without environment_state, or "
                "an observation from a rig that does not track the object)"
            )
        for key, count in (("embodiment_id", self.num_embodiments), ("domain_id", cfg.num_domains)):
            if key == "domain_id" and not cfg.domain_conditioning:
                continue
            ids = batch[key]
            if bool(((ids < 0) | (ids >= count)).any()):
                raise PolicyError(
                    f"batch[{key!r}]: ids must be in [0, {count}), got {ids.tolist()}"
                )

    # The network.

    def encode(self, batch: dict) -> Context:
        """The observation tokens of ``batch`` (run once per chunk)."""
        self._check(batch, training=False)
        return self._encode(batch)

    def _encode(self, batch: dict) -> Context:
        """``encode`` of a checked batch."""
        device = self.action_pos.device
        ids = batch["embodiment_id"].to(device)
        parts = [] if self.image is None else [self.image(batch["images"].to(device))]
        parts += [
            self.task(list(batch["task"])),
            self.proprio(batch["state"].to(device), batch["state_is_pad"].to(device), ids),
        ]
        if self.domain is not None:
            parts.append(self.domain(batch["domain_id"].to(device))[:, None])
        if self.belt is not None:
            speed = batch["belt_speed"].to(device)[:, None] / BELT_SPEED_SCALE
            parts.append(self.belt(speed)[:, None])
        if self.object is not None:
            parts.append(self.object(batch["object_pose"].to(device))[:, None])
        place = None
        if self.locator is not None and self.place is not None:
            place = self.locator(batch["images"].to(device))
            parts.append(self.place(place.detach())[:, None])
        dtype = parts[0].dtype
        tokens = torch.cat([part.to(dtype) for part in parts], dim=1)
        # No observation token is padding (views, task and proprio tokens are fixed in number).
        tokens = self.obs_norm(self.obs(tokens, None))
        dim_mask = batch.get("action_dim_mask")
        if dim_mask is None:
            dim_mask = torch.ones(ids.shape[0], self.cfg.max_action_dim, dtype=torch.bool)
        return Context(tokens, ids, dim_mask.to(device), place=place)

    def velocity(
        self, ctx: Context, x_t: Tensor, t: Tensor, action_is_pad: Tensor | None = None
    ) -> Tensor:
        """The flow velocity (B, H, Da) at x_t (B, H, Da), times t (B,). Padded steps
        (``action_is_pad`` (B, H), True = padding) are hidden from the other steps."""
        h = x_t.shape[1]
        x = self.action_in(x_t, ctx.embodiment_id) + self.action_pos[:h].to(x_t.dtype)
        c = self.time_mlp(time_embedding(t, self.cfg.width).to(x.dtype))
        mod = self.time_mod(c).unflatten(1, (6, -1))
        self_mask = None
        if action_is_pad is not None:
            # Every step still sees itself, so no row of the mask is empty.
            eye = torch.eye(h, dtype=torch.bool, device=x.device)
            self_mask = (~action_is_pad)[:, None, None, :] | eye
        ctx_mask = attend_mask(ctx.pad, h)
        x = self.act(x, mod, ctx.tokens, self_mask, ctx_mask)
        shift, scale = self.final_mod(c).chunk(2, dim=-1)
        x = self.final_norm(x) * (1 + scale[:, None]) + shift[:, None]
        return self.action_out(x, ctx.embodiment_id)

    # Flow matching.

    def _noise(self, shape: tuple[int, ...], generator: torch.Generator | None) -> Tensor:
        """Standard normal noise drawn from ``generator`` (on its device), on the model's."""
        device = generator.device if generator is not None else self.action_pos.device
        return torch.randn(shape, generator=generator, device=device).to(self.action_pos.device)

    def loss(
        self, batch: dict, generator: torch.Generator | None = None
    ) -> tuple[Tensor, dict[str, float]]:
        """The flow-matching loss of ``batch``: the velocity MSE over real steps and dims."""
        self._check(batch, training=True)
        device = self.action_pos.device
        real_dims = batch["action_dim_mask"].to(device)
        step_pad = batch["action_is_pad"].to(device)
        actions = batch["actions"].to(device) * real_dims[:, None]
        b = actions.shape[0]
        noise = self._noise(tuple(actions.shape), generator) * real_dims[:, None]
        u_device = generator.device if generator is not None else device
        u = torch.rand((b,), generator=generator, device=u_device).to(device)
        # Beta(1.5, 1) through its inverse CDF (F(x) = x^1.5), then openpi's affine map.
        t = u ** (1 / 1.5) * 0.999 + 0.001
        x_t = t[:, None, None] * noise + (1 - t[:, None, None]) * actions
        target = noise - actions
        ctx = self._encode(batch)
        v = self.velocity(ctx, x_t, t, step_pad)
        mask = (~step_pad)[:, :, None] & real_dims[:, None, :]
        err = (v.float() - target) ** 2 * mask
        flow = err.sum() / mask.sum().clamp(min=1)
        parts = {"flow": float(flow.detach()), "t_mean": float(t.mean())}
        loss = flow
        if self.hindsight is not None:
            aux = self._hindsight_loss(ctx, batch["hindsight"].to(device))
            loss = flow + self.cfg.hindsight_weight * aux
            parts["hindsight"] = float(aux.detach())
        if ctx.place is not None:
            place, err_cm = self._place_loss(ctx.place, batch["place"].to(device))
            loss = loss + self.cfg.locator_weight * place
            parts["place"] = float(place.detach())
            parts["place_cm"] = err_cm
        return loss, {"loss": float(loss.detach()), **parts}

    def _place_loss(self, pred: Tensor, targets: Tensor) -> tuple[Tensor, float]:
        """The locator's MSE in units of ``PLACE_UNIT_M`` over the samples whose place is
        known (NaN after the grasp), and its mean absolute error in cm (NaN: none known)."""
        known = torch.isfinite(targets)
        diff = (pred.float() - torch.where(known, targets, 0.0)) * known
        count = known.sum()
        loss = (diff / PLACE_UNIT_M).square().sum() / count.clamp(min=1)
        err_cm = float(diff.detach().abs().sum() / count) * 100 if int(count) else float("nan")
        return loss, err_cm

    def _hindsight_loss(self, ctx: Context, targets: Tensor) -> Tensor:
        """The hindsight head's MSE over the targets a sample has (NaN: not shown)."""
        assert self.hindsight is not None
        pred = self.hindsight(ctx.tokens.mean(dim=1)).float()
        known = torch.isfinite(targets)
        err = (pred - torch.where(known, targets, 0.0)) ** 2 * known
        return err.sum() / known.sum().clamp(min=1)

    @torch.no_grad()
    def sample(
        self,
        batch: dict,
        steps: int | None = None,
        noise: Tensor | None = None,
        generator: torch.Generator | None = None,
        guide: Guide | None = None,
    ) -> Tensor:
        """Actions (B, H, Da) by Euler from noise (t = 1) to t = 0 in ``steps`` steps
        (default ``cfg.denoise_steps``), the observation encoded once; padded dims are 0.
        With a ``guide`` each step is RTC's guided one (see the module docstring)."""
        steps = self.cfg.denoise_steps if steps is None else steps
        if steps < 1:
            raise PolicyError(f"steps: expected at least 1, got {steps}")
        ctx = self.encode(batch)
        b = ctx.tokens.shape[0]
        shape = (b, self.cfg.action_horizon, self.cfg.max_action_dim)
        if noise is None:
            noise = self._noise(shape, generator)
        elif tuple(noise.shape) != shape:
            raise PolicyError(f"noise: expected shape {shape}, got {tuple(noise.shape)}")
        dims = ctx.action_dim_mask[:, None].float()
        x = noise.to(self.action_pos.device).float() * dims
        if guide is not None:
            return self._sample_guided(ctx, x, dims, steps, guide)
        dt = -1.0 / steps
        for i in range(steps):
            t = torch.full((b,), 1.0 - i / steps, device=x.device)
            x = x + dt * self.velocity(ctx, x, t).float() * dims
        return x

    def _sample_guided(
        self, ctx: Context, x: Tensor, dims: Tensor, steps: int, guide: Guide
    ) -> Tensor:
        """``sample``'s Euler steps with RTC's guidance, from x (B, H, Da) = the masked noise;
        dims (B, 1, Da) the real action dims. Only the action transformer is differentiated:
        the observation tokens are constants here."""
        b, h, da = x.shape
        target, weights = guide.target, guide.weights
        if not isinstance(target, Tensor) or tuple(target.shape) != (b, h, da):
            raise _shape_error("guide.target", f"(B, H, Da) = {(b, h, da)}", target)
        if not isinstance(weights, Tensor) or tuple(weights.shape) != (b, h):
            raise _shape_error("guide.weights", f"(B, H) = {(b, h)}", weights)
        if not (math.isfinite(guide.beta) and guide.beta > 0):
            raise PolicyError(f"guide.beta: expected a positive finite number, got {guide.beta}")
        device = x.device
        # Autograd runs even where the caller is in no-grad or inference mode; tensors made
        # in inference mode cannot be saved for backward, so the graph gets copies.
        with torch.inference_mode(False), torch.enable_grad():
            ctx = Context(
                ctx.tokens.detach().clone(),
                ctx.embodiment_id.clone(),
                ctx.action_dim_mask.clone(),
                None if ctx.pad is None else ctx.pad.clone(),
            )
            dims = dims.clone()
            x = x.clone()
            y = target.to(device).float().clone()
            # The error counts the real dims only, each step by its weight.
            w = weights.to(device).float().clone()[:, :, None] * dims
            dt = -1.0 / steps
            for i in range(steps):
                t_now = 1.0 - i / steps
                t = torch.full((b,), t_now, device=device)
                x_in = x.detach().requires_grad_(True)
                v = self.velocity(ctx, x_in, t).float()
                clean = x_in - t_now * v
                (g,) = torch.autograd.grad(clean, x_in, (y - clean) * w)
                c = guidance_weight(t_now, guide.beta)
                x = x + dt * (v.detach() - c * g) * dims
        return x.detach()

    # Bookkeeping.

    def set_gradient_checkpointing(self, enabled: bool) -> None:
        """Recompute block activations in the backward pass (backbone and both stacks)."""
        self.obs.checkpointing = enabled
        self.act.checkpointing = enabled
        if self.image is not None:
            self.image.set_grad_checkpointing(enabled)

    def parameter_counts(self) -> dict[str, int]:
        """Parameters by part: ``backbone`` (the ViT's weights, frozen unless trained whole),
        ``backbone_lora``, ``text`` (frozen text tower), ``policy`` (everything trained from
        scratch), and the ``total`` and ``trainable`` sums."""
        image = self.image
        lora = {id(p) for p in image.lora_parameters()} if image is not None else set()
        text = {id(p) for p in self.task.text.parameters()}
        vit = {id(p) for p in image.backbone_parameters()} if image is not None else set()
        counts = dict.fromkeys(("backbone", "backbone_lora", "text", "policy"), 0)
        for p in self.parameters():
            key = (
                "backbone_lora" if id(p) in lora
                else "backbone" if id(p) in vit
                else "text" if id(p) in text
                else "policy"
            )  # fmt: skip
            counts[key] += p.numel()
        counts["total"] = sum(p.numel() for p in self.parameters())
        counts["trainable"] = sum(p.numel() for p in self.parameters() if p.requires_grad)
        return counts


def build_model(cfg: PolicyCfg, device: str | torch.device = "cpu") -> FlowMatchingPolicy:
    """The policy of ``cfg`` built on ``device`` (``"meta"`` allocates nothing: for counts)."""
    with torch.device(device):
        model = FlowMatchingPolicy(cfg)
    return model
