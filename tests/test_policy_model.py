"""The flow-matching policy network on the tiny preset with random weights: LoRA placement,
frozen and trainable parts, the loss's reproducibility and masks, sampling, per-embodiment
projections, the text cache, weights files, the big presets' counts on the meta device, and
that a tiny model overfits one batch and then reproduces its actions by 2-step sampling."""

from __future__ import annotations

import copy
import re
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from safetensors.torch import save_file  # noqa: E402

from r2s2r.policy.base import PolicyError  # noqa: E402
from r2s2r.policy.config import PolicyCfg, load_policy_cfg  # noqa: E402
from r2s2r.policy.model import FlowMatchingPolicy, build_model  # noqa: E402

torch.set_num_threads(1)
CFG = load_policy_cfg("tiny")
# Real action dims of the contract (the rest of max_action_dim is padding).
REAL_DIMS = 54


def make_batch(cfg: PolicyCfg, b: int = 3, views: int = 3, seed: int = 0) -> dict:
    """A batch in the collate's layout: smooth action chunks, random views and states."""
    g = torch.Generator().manual_seed(seed)
    s, p, h, da = cfg.image_size, cfg.state_history, cfg.action_horizon, cfg.max_action_dim
    grid = torch.linspace(0, 1, h)[None, :, None]
    freq = torch.rand(b, 1, da, generator=g) * 2 + 0.5
    phase = torch.rand(b, 1, da, generator=g) * 6.28
    dims = torch.zeros(b, da, dtype=torch.bool)
    dims[:, :REAL_DIMS] = True
    state = torch.zeros(b, p, cfg.max_state_dim)
    state[:, :, :68] = torch.randn(b, p, 68, generator=g)
    return {
        "images": torch.randint(0, 256, (b, views, 3, s, s), dtype=torch.uint8, generator=g),
        "state": state,
        "state_is_pad": torch.zeros(b, p, dtype=torch.bool),
        "actions": torch.sin(grid * freq * 3.14 + phase) * dims[:, None],
        "action_is_pad": torch.zeros(b, h, dtype=torch.bool),
        "action_dim_mask": dims,
        "task": [f"put object {i} in bin {i % 2}" for i in range(b)],
        "embodiment_id": torch.zeros(b, dtype=torch.int64),
        "domain_id": torch.zeros(b, dtype=torch.int64),
    }


@pytest.fixture(scope="module")
def model() -> FlowMatchingPolicy:
    torch.manual_seed(0)
    return build_model(CFG)


def lora_blocks(model: FlowMatchingPolicy) -> set[int]:
    """Indices of backbone blocks that hold a LoRA adapter; fails on one anywhere else."""
    found = set()
    for name, _ in model.named_modules():
        if name.endswith("lora_A"):
            match = re.fullmatch(
                r"image\.vit\.blocks\.(\d+)\.(attn\.(qkv|proj)|mlp\.fc[12])\.lora_A", name
            )
            assert match, f"a LoRA adapter outside the targeted backbone linears: {name}"
            found.add(int(match.group(1)))
    return found


def test_lora_adapters_sit_in_the_last_blocks_only(model: FlowMatchingPolicy) -> None:
    depth = len(model.image.vit.blocks)
    assert lora_blocks(model) == set(range(depth - CFG.backbone.lora_blocks, depth))
    adapted = [n for n, m in model.named_modules() if hasattr(m, "lora_A")]
    # Four linears (qkv, proj, fc1, fc2) per adapted block; the patch embedding is untouched.
    assert len(adapted) == 4 * CFG.backbone.lora_blocks
    assert not hasattr(model.image.vit.patch_embed.proj, "lora_A")


def test_frozen_parts_get_no_gradient_and_trainable_ones_do(model: FlowMatchingPolicy) -> None:
    model.zero_grad(set_to_none=True)
    loss, _ = model.loss(make_batch(CFG), torch.Generator().manual_seed(0))
    loss.backward()
    frozen = [p for p in model.image.vit.parameters() if not p.requires_grad]
    frozen += list(model.task.text.parameters())
    assert frozen and all(not p.requires_grad and p.grad is None for p in frozen)
    trainable = {n: p for n, p in model.named_parameters() if p.requires_grad}
    missing = [n for n, p in trainable.items() if p.grad is None]
    assert not missing, f"trainable parameters without a gradient: {missing}"
    assert all(torch.isfinite(p.grad).all() for p in trainable.values())
    # LoRA B starts at zero, so B gets a gradient first; the policy's input side gets one too.
    lora_b = [p for n, p in trainable.items() if "lora_B" in n]
    assert lora_b and all(p.grad.abs().sum() > 0 for p in lora_b)
    for name in (
        "image.proj.weight",
        "proprio.proj.weight",
        "task.proj.weight",
        "action_in.weight",
    ):
        assert trainable[name].grad.abs().sum() > 0, name
    model.zero_grad(set_to_none=True)


def test_trainable_count_is_lora_plus_policy(model: FlowMatchingPolicy) -> None:
    counts = model.parameter_counts()
    assert counts["trainable"] == counts["backbone_lora"] + counts["policy"]
    parts = counts["backbone"] + counts["backbone_lora"] + counts["text"] + counts["policy"]
    assert counts["total"] == parts
    # LoRA adds r * (in + out) per adapted Linear: qkv (D -> 3D), proj (D -> D), fc1 (D -> 4D)
    # and fc2 (4D -> D) make 16 r D per block.
    r, dim = CFG.backbone.lora_rank, model.image.vit.embed_dim
    adapted = [m for m in model.modules() if hasattr(m, "lora_A")]
    per_linear = sum(r * (m.in_features + m.out_features) for m in adapted)
    assert counts["backbone_lora"] == per_linear == 16 * r * dim * CFG.backbone.lora_blocks
    assert counts["trainable"] == sum(p.numel() for p in model.parameters() if p.requires_grad)


def test_a_backbone_trained_whole_has_no_adapters_and_every_weight_learns() -> None:
    cfg = CFG.replace(backbone={"finetune": "full"})
    torch.manual_seed(0)
    whole = build_model(cfg)
    assert not [n for n, m in whole.named_modules() if hasattr(m, "lora_A")]
    counts = whole.parameter_counts()
    assert counts["backbone_lora"] == 0
    assert counts["trainable"] == counts["backbone"] + counts["policy"]
    loss, _ = whole.loss(make_batch(cfg), torch.Generator().manual_seed(0))
    loss.backward()
    vit = dict(whole.image.vit.named_parameters())
    # The patch embedding and the first block learn too (LoRA leaves both frozen).
    for name in ("patch_embed.proj.weight", "blocks.0.attn.qkv.weight"):
        assert vit[name].requires_grad and vit[name].grad.abs().sum() > 0, name
    assert all(p.grad is None for p in whole.task.text.parameters())


def test_loss_is_reproducible_for_a_generator(model: FlowMatchingPolicy) -> None:
    batch = make_batch(CFG)
    with torch.no_grad():
        a = model.loss(batch, torch.Generator().manual_seed(7))[0]
        b = model.loss(batch, torch.Generator().manual_seed(7))[0]
        c = model.loss(batch, torch.Generator().manual_seed(8))[0]
    assert torch.equal(a, b)
    assert not torch.equal(a, c)


def test_loss_ignores_padded_steps_and_dims(model: FlowMatchingPolicy) -> None:
    # Open the action blocks' gates (closed at init), so the steps' self-attention counts.
    model = copy.deepcopy(model)
    for block in model.act.blocks:
        torch.nn.init.normal_(block.table, std=0.5)
    batch = make_batch(CFG)
    batch["action_is_pad"][0, -10:] = True
    batch["action_is_pad"][1, -1:] = True

    def loss(b: dict) -> float:
        with torch.no_grad():
            return float(model.loss(b, torch.Generator().manual_seed(3))[0])

    base = loss(batch)
    changed = {**batch, "actions": batch["actions"].clone()}
    changed["actions"][0, -10:] += 5.0
    changed["actions"][1, -1] -= 3.0
    changed["actions"][:, :, REAL_DIMS:] = 7.0
    assert loss(changed) == pytest.approx(base, rel=1e-6, abs=1e-7)
    # A real step and a real dim do count.
    real = {**batch, "actions": batch["actions"].clone()}
    real["actions"][0, 0, 0] += 1.0
    assert abs(loss(real) - base) > 1e-4


def test_padded_states_are_ignored(model: FlowMatchingPolicy) -> None:
    batch = make_batch(CFG, b=2)
    batch["state_is_pad"][0, :5] = True
    noise = torch.randn(2, CFG.action_horizon, CFG.max_action_dim)
    base = model.sample(batch, noise=noise)
    state = batch["state"].clone()
    state[0, :5] = 9.0
    assert torch.allclose(model.sample({**batch, "state": state}, noise=noise), base, atol=1e-6)
    # A real (newest) state does count.
    state[0, -1] += 1.0
    assert not torch.allclose(model.sample({**batch, "state": state}, noise=noise), base, atol=1e-4)


def test_sample_encodes_once_and_has_the_chunk_shape(model: FlowMatchingPolicy) -> None:
    calls = {"image": 0, "obs": 0, "action": 0}

    def count(part: str) -> Callable[..., None]:
        return lambda *_: calls.__setitem__(part, calls[part] + 1)

    hooks = [
        model.image.register_forward_hook(count("image")),
        model.obs.register_forward_hook(count("obs")),
        model.act.register_forward_hook(count("action")),
    ]
    try:
        batch = make_batch(CFG, b=2)
        del batch["actions"], batch["action_is_pad"]
        out = model.sample(batch, steps=3, generator=torch.Generator().manual_seed(0))
    finally:
        for hook in hooks:
            hook.remove()
    assert out.shape == (2, CFG.action_horizon, CFG.max_action_dim)
    assert calls == {"image": 1, "obs": 1, "action": 3}
    assert torch.all(out[:, :, REAL_DIMS:] == 0) and out[:, :, :REAL_DIMS].abs().sum() > 0
    # The same noise gives the same chunk; the default step count is the config's.
    noise = torch.randn(2, CFG.action_horizon, CFG.max_action_dim)
    assert torch.equal(model.sample(batch, noise=noise), model.sample(batch, noise=noise))
    assert not torch.equal(model.sample(batch, noise=noise), model.sample(batch, 3, noise))


def test_embodiments_have_their_own_projections() -> None:
    torch.manual_seed(0)
    model = FlowMatchingPolicy(CFG, num_embodiments=2)
    batch = make_batch(CFG, b=2)
    batch["embodiment_id"] = torch.tensor([0, 1])
    same = {
        k: (v[:1].expand(2, *v.shape[1:]) if torch.is_tensor(v) else v[:1] * 2)
        for k, v in batch.items()
    }
    same["embodiment_id"] = torch.tensor([0, 1])
    noise = torch.randn(1, CFG.action_horizon, CFG.max_action_dim).expand(2, -1, -1)
    out = model.sample(same, noise=noise)
    assert not torch.allclose(out[0], out[1], atol=1e-3)
    same["embodiment_id"] = torch.tensor([1, 1])
    out = model.sample(same, noise=noise)
    assert torch.allclose(out[0], out[1], atol=1e-5)
    same["embodiment_id"] = torch.tensor([0, 2])
    with pytest.raises(PolicyError, match=r"embodiment_id.*\[0, 2\)"):
        model.sample(same)


def test_the_domain_token_conditions_the_chunk() -> None:
    torch.manual_seed(0)
    cfg = CFG.replace(domain_conditioning=True, num_domains=3)
    model = build_model(cfg)
    batch = make_batch(cfg, b=1)
    noise = torch.randn(1, cfg.action_horizon, cfg.max_action_dim)
    real = model.sample(batch, noise=noise)
    sim = model.sample({**batch, "domain_id": torch.tensor([2])}, noise=noise)
    assert not torch.allclose(real, sim, atol=1e-4)
    with pytest.raises(PolicyError, match=r"domain_id.*\[0, 3\)"):
        model.sample({**batch, "domain_id": torch.tensor([3])})
    with pytest.raises(PolicyError, match=r"batch\['domain_id'\]"):
        model.sample({k: v for k, v in batch.items() if k != "domain_id"})
    # A copy (the trainer's EMA) is independent and computes the same.
    twin = copy.deepcopy(model)
    assert torch.equal(twin.sample(batch, noise=noise), real)


def test_the_belt_speed_token_conditions_the_chunk_and_must_be_given() -> None:
    torch.manual_seed(0)
    cfg = CFG.replace(belt_speed=True)
    model = build_model(cfg)
    batch = {**make_batch(cfg, b=2), "belt_speed": torch.tensor([0.05, 0.10])}
    noise = torch.randn(2, cfg.action_horizon, cfg.max_action_dim)
    slow_fast = model.sample(batch, noise=noise)
    fast_slow = model.sample({**batch, "belt_speed": torch.tensor([0.10, 0.05])}, noise=noise)
    assert not torch.allclose(slow_fast, fast_slow, atol=1e-4)
    with pytest.raises(PolicyError, match=r"batch\['belt_speed'\]: expected \(2,\)"):
        model.sample({k: v for k, v in batch.items() if k != "belt_speed"})
    with pytest.raises(PolicyError, match="belt_speed.*some samples have none"):
        model.sample({**batch, "belt_speed": torch.tensor([0.05, float("nan")])})
    # A policy without the token ignores the key.
    plain = build_model(CFG)
    assert plain.belt is None
    plain.sample(batch, noise=noise)


def test_the_hindsight_head_learns_what_the_views_show_and_skips_unknown_targets() -> None:
    torch.manual_seed(0)
    cfg = CFG.replace(hindsight_weight=1.0)
    model = build_model(cfg)
    batch = make_batch(cfg, b=8, views=1, seed=2)
    # Targets the views show: each sample's first view is one grey level, the targets follow it.
    level = torch.linspace(0, 1, 8)
    batch["images"] = (
        (level[:, None, None, None, None] * 255)
        .to(torch.uint8)
        .expand(-1, 1, 3, cfg.image_size, cfg.image_size)
        .contiguous()
    )
    targets = (level[:, None] * 2 - 1).repeat(1, 5)
    targets[0, 2:] = float("nan")  # a take that shows no grasp
    batch["hindsight"] = targets
    with pytest.raises(PolicyError, match=r"batch\['hindsight'\]: expected \(8, 5\)"):
        model.loss({k: v for k, v in batch.items() if k != "hindsight"})
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=3e-3)
    gen = torch.Generator().manual_seed(0)
    parts = []
    for _ in range(60):
        loss, info = model.loss(batch, gen)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        parts.append(info)
    assert all(np.isfinite(p["hindsight"]) for p in parts)
    assert parts[0]["loss"] == pytest.approx(parts[0]["flow"] + parts[0]["hindsight"], rel=1e-5)
    # Measured: from about 0.8 to under 0.01.
    assert parts[-1]["hindsight"] < parts[0]["hindsight"] / 10, (parts[0], parts[-1])
    # Inference neither needs nor runs the head; a policy without it has none.
    model.sample({k: v for k, v in batch.items() if k != "hindsight"})
    assert build_model(CFG).hindsight is None


@pytest.mark.slow  # about 55 s on 2 cores: it trains the locator until it reads the place.
def test_the_locator_learns_a_dots_place_and_its_token_conditions_the_chunk() -> None:
    torch.manual_seed(0)
    cfg = CFG.replace(locator_weight=1.0, locator_views=1)
    model = build_model(cfg)
    g = torch.Generator().manual_seed(4)
    b, s = 16, cfg.image_size

    def dots(n: int) -> tuple[torch.Tensor, torch.Tensor]:
        """One view with a 2 px white dot on grey; the place is its column and row (m)."""
        cols = torch.randint(4, s - 4, (n,), generator=g)
        rows = torch.randint(4, s - 4, (n,), generator=g)
        views = torch.full((n, 1, 3, s, s), 90, dtype=torch.uint8)
        for i in range(n):
            views[i, 0, :, rows[i] : rows[i] + 2, cols[i] : cols[i] + 2] = 255
        place = torch.stack([cols / s - 0.5, rows / s * 0.2, torch.zeros(n)], dim=1)
        return views, place.float()

    batch = make_batch(cfg, b=b, views=1)
    with pytest.raises(PolicyError, match=r"batch\['place'\]: expected \(16, 3\)"):
        model.loss(batch)
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=3e-3)
    errs = []
    for _ in range(150):
        views, place = dots(b)
        place[0] = float("nan")  # a frame after the grasp: no place
        loss, info = model.loss({**batch, "images": views, "place": place})
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        errs.append(info["place_cm"])
    # Measured: from about 10 cm to about 4 cm in 150 steps, on places spread over 50 x 20 cm.
    assert np.mean(errs[-10:]) < np.mean(errs[:10]) / 2, (errs[:10], errs[-10:])
    # Inference runs the locator from the views alone, and its token reaches the chunk.
    views, _ = dots(2)
    small = {**make_batch(cfg, b=2, views=1), "images": views}
    noise = torch.randn(2, cfg.action_horizon, cfg.max_action_dim)
    here = model.sample(small, noise=noise)
    there = model.sample({**small, "images": views.flip(-1)}, noise=noise)
    assert not torch.allclose(here, there, atol=1e-5)
    assert build_model(CFG).locator is None
    three = build_model(CFG.replace(locator_weight=1.0))
    with pytest.raises(PolicyError, match="the locator reads 3 views, got 1"):
        three.sample(small)
    # Without the image encoder the views reach the policy through the locator alone.
    blind = build_model(cfg.replace(views=False))
    assert blind.image is None
    assert not torch.allclose(
        blind.sample(small, noise=noise),
        blind.sample({**small, "images": views.flip(-1)}, noise=noise),
    )


def test_the_object_pose_token_conditions_the_chunk_and_must_be_given() -> None:
    torch.manual_seed(0)
    cfg = CFG.replace(object_pose=True)
    model = build_model(cfg)
    pose = torch.tensor([[-0.4, 0.02, 0.85, 1.0, 0.0, 0.0, 0.0]] * 2)
    batch = {**make_batch(cfg, b=2), "object_pose": pose}
    noise = torch.randn(2, cfg.action_horizon, cfg.max_action_dim)
    here = model.sample(batch, noise=noise)
    there = model.sample(
        {**batch, "object_pose": pose + torch.tensor([0.3] + [0.0] * 6)}, noise=noise
    )
    assert not torch.allclose(here, there, atol=1e-4)
    with pytest.raises(PolicyError, match=r"batch\['object_pose'\]: expected \(2, 7\)"):
        model.sample({k: v for k, v in batch.items() if k != "object_pose"})
    with pytest.raises(PolicyError, match="object_pose.*some samples have none"):
        model.sample({**batch, "object_pose": torch.full((2, 7), float("nan"))})
    assert build_model(CFG).object is None


def test_a_policy_without_views_ignores_them_and_has_no_image_encoder() -> None:
    torch.manual_seed(0)
    cfg = CFG.replace(views=False, object_pose=True)
    model = build_model(cfg)
    assert model.image is None
    counts = model.parameter_counts()
    assert counts["backbone"] == counts["backbone_lora"] == 0
    pose = torch.tensor([[-0.4, 0.02, 0.85, 1.0, 0.0, 0.0, 0.0]] * 2)
    batch = {**make_batch(cfg, b=2), "object_pose": pose}
    noise = torch.randn(2, cfg.action_horizon, cfg.max_action_dim)
    here = model.sample(batch, noise=noise)
    # Other pixels, the same chunk; another pose, another chunk.
    other = {**batch, "images": 255 - batch["images"]}
    assert torch.equal(model.sample(other, noise=noise), here)
    moved = {**batch, "object_pose": pose + torch.tensor([0.3] + [0.0] * 6)}
    assert not torch.allclose(model.sample(moved, noise=noise), here, atol=1e-4)
    loss, _ = model.loss(batch)
    loss.backward()
    assert all(
        p.grad is not None
        for p in model.parameters()
        if p.requires_grad and not any(p is q for q in model.task.text.parameters())
    )


def test_instructions_are_encoded_once(model: FlowMatchingPolicy) -> None:
    text = model.task.text
    text.cache.clear()
    start = text.encoded
    feats, pad = text(["pick", "pick", "sort the cans"])
    assert text.encoded - start == 2
    again, _ = text(["sort the cans", "pick"])
    assert text.encoded - start == 2
    assert torch.equal(again[1, : int((~pad[0]).sum())], feats[0, : int((~pad[0]).sum())])
    # The cached features are the tower's: encoding afresh gives the same (batched alone,
    # so to float rounding).
    fresh = text._encode(["sort the cans"])[0]
    assert torch.allclose(fresh, again[0, : fresh.shape[0]], atol=1e-5)
    # Loading weights drops what the old weights encoded.
    model.load_state_dict(model.state_dict())
    assert not text.cache


def test_a_bad_batch_names_its_key(model: FlowMatchingPolicy) -> None:
    batch = make_batch(CFG)
    with pytest.raises(PolicyError, match=r"batch\['images'\].*uint8"):
        model.loss({**batch, "images": batch["images"].float()})
    with pytest.raises(PolicyError, match=r"batch\['state'\]"):
        model.loss({**batch, "state": batch["state"][:, :, :10]})
    with pytest.raises(PolicyError, match=r"batch\['task'\]"):
        model.loss({**batch, "task": "one string"})


def test_missing_weights_are_named(tmp_path: Path) -> None:
    gone = tmp_path / "dinov3_vits16.safetensors"
    cfg = CFG.replace(backbone={"weights": gone})
    with pytest.raises(PolicyError, match=re.escape(str(gone)) + ".*does not exist.*DINOv3"):
        build_model(cfg)
    gone = tmp_path / "clip.safetensors"
    cfg = CFG.replace(text={"weights": gone})
    with pytest.raises(PolicyError, match=re.escape(str(gone)) + ".*does not exist.*open_clip"):
        build_model(cfg, device="meta")


def test_weights_files_load(model: FlowMatchingPolicy, tmp_path: Path) -> None:
    vit = {k: v for k, v in model.image.vit.state_dict().items() if "lora_" not in k}
    vit = {k.replace(".base_layer", ""): v.contiguous() for k, v in vit.items()}
    save_file(vit, tmp_path / "vit.safetensors")
    # A full CLIP checkpoint: the text tower's keys at the top level, beside the visual ones.
    clip = {k: v.contiguous() for k, v in model.task.text.tower.state_dict().items()}
    clip["visual.proj"] = torch.zeros(3)
    clip["logit_scale"] = torch.zeros(())
    save_file(clip, tmp_path / "clip.safetensors")
    cfg = CFG.replace(
        backbone={"weights": tmp_path / "vit.safetensors"},
        text={"weights": tmp_path / "clip.safetensors"},
    )
    torch.manual_seed(123)
    loaded = build_model(cfg)
    for part in ("image.vit", "task.text.tower"):
        ours, theirs = (
            model.get_submodule(part).state_dict(),
            loaded.get_submodule(part).state_dict(),
        )
        frozen = [k for k in ours if "lora_" not in k]
        assert frozen and all(torch.equal(ours[k], theirs[k]) for k in frozen), part


def test_bf16_autocast_trains_and_samples(model: FlowMatchingPolicy) -> None:
    batch = make_batch(CFG, b=2)
    model.zero_grad(set_to_none=True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss, _ = model.loss(batch, torch.Generator().manual_seed(0))
        loss.backward()
        chunk = model.sample(batch, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        full = model.loss(batch, torch.Generator().manual_seed(0))[0]
    assert loss.dtype == torch.float32 and torch.isfinite(loss)
    assert abs(float(loss.detach()) - float(full)) < 0.05 * float(full)
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)
    assert chunk.dtype == torch.float32 and torch.isfinite(chunk).all()
    model.zero_grad(set_to_none=True)


def test_gradient_checkpointing_gives_the_same_gradients(model: FlowMatchingPolicy) -> None:
    batch = make_batch(CFG, b=2)
    grads = []
    for enabled in (False, True):
        model.set_gradient_checkpointing(enabled)
        model.zero_grad(set_to_none=True)
        model.loss(batch, torch.Generator().manual_seed(0))[0].backward()
        grads.append({n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None})
    model.set_gradient_checkpointing(False)
    model.zero_grad(set_to_none=True)
    assert grads[0].keys() == grads[1].keys()
    assert all(torch.allclose(grads[0][n], grads[1][n], atol=1e-6) for n in grads[0])


@pytest.mark.parametrize(
    ("preset", "policy", "total"),
    [("500m", (0.35e9, 0.45e9), (0.5e9, 0.6e9)), ("2b", (1.8e9, 2.1e9), (1.9e9, 2.2e9))],
)
def test_big_presets_count_on_the_meta_device(
    preset: str, policy: tuple[float, float], total: tuple[float, float]
) -> None:
    model = build_model(load_policy_cfg(preset), device="meta")
    assert all(p.device.type == "meta" for p in model.parameters())
    counts = model.parameter_counts()
    assert policy[0] < counts["policy"] < policy[1]
    assert total[0] < counts["total"] < total[1]
    assert counts["backbone"] == 85_641_216  # ViT-B/16 DINOv3 without its head.
    assert counts["backbone_lora"] == 16 * 8 * 768 * 4


def test_a_tiny_policy_overfits_one_batch_and_samples_its_actions() -> None:
    torch.manual_seed(0)
    model = build_model(CFG)
    batch = make_batch(CFG, b=2, views=1, seed=1)
    # Each sample four times over, so every step averages over more flow times and noises.
    repeated = {
        k: v.repeat_interleave(4, 0) if torch.is_tensor(v) else [x for x in v for _ in range(4)]
        for k, v in batch.items()
    }
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=4e-3)
    # The learning rate decays linearly to zero over the 200 steps.
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda i: 1 - i / 200)
    gen = torch.Generator().manual_seed(0)
    start = time.perf_counter()
    losses = []
    for _ in range(200):
        loss, info = model.loss(repeated, gen)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
        losses.append(info["loss"])
    elapsed = time.perf_counter() - start
    first, last = sum(losses[:10]) / 10, sum(losses[-20:]) / 20
    assert last < first / 10, (first, last, elapsed)
    chunk = model.sample(batch, generator=torch.Generator().manual_seed(99))
    err = (chunk - batch["actions"])[:, :, :REAL_DIMS].abs()
    # Measured: the loss falls about 36x and the mean error is about 0.10 (max 0.76) on
    # actions of RMS 0.71.
    assert float(err.mean()) < 0.15, (float(err.mean()), float(err.max()))


def _conv_cfg(**changes: object) -> PolicyCfg:
    backbone = {**CFG.backbone.model_dump(), "kind": "conv", "finetune": "full"}
    return CFG.replace(backbone=CFG.backbone.replace(**{**backbone, **changes}))


def test_the_keypoint_encoder_gives_two_tokens_a_view_and_follows_a_dot() -> None:
    from r2s2r.policy.encoders import ConvEncoder, SpatialSoftmax

    cfg = _conv_cfg()
    model = build_model(cfg)
    assert isinstance(model.image, ConvEncoder)
    images = make_batch(cfg, b=2)["images"]
    assert model.image(images).shape == (2, 3 * 2, cfg.width)
    counts = model.parameter_counts()
    assert counts["backbone_lora"] == 0 and counts["trainable"] == counts["total"] - counts["text"]
    # A keypoint map that is the image's own brightness puts its keypoint on a bright dot.
    soft = SpatialSoftmax(1, 1, 16, 16)
    with torch.no_grad():
        soft.maps.weight.fill_(1.0)
        soft.maps.bias.zero_()
        soft.log_temperature.fill_(-3.0)
    dot = torch.zeros(1, 1, 16, 16)
    dot[0, 0, 3, 12] = 1.0
    x, y = soft(dot)[0, 0].tolist()
    assert x == pytest.approx(-1 + 2 * 12 / 15, abs=0.02)
    assert y == pytest.approx(-1 + 2 * 3 / 15, abs=0.02)
    with pytest.raises(ValueError, match="no pretrained weights"):
        CFG.backbone.replace(kind="conv", finetune="lora")


def test_view_grid_pools_each_views_patch_tokens() -> None:
    cfg = load_policy_cfg("cpu").replace(views=True, view_grid=2)
    model = build_model(cfg)
    images = make_batch(cfg, b=2)["images"]
    # Per view: the class token and a 2 x 2 grid.
    assert model.image(images).shape == (2, 3 * 5, cfg.width)
    with pytest.raises(ValueError, match="does not divide"):
        load_policy_cfg("cpu").replace(views=True, view_grid=3)


def test_a_smaller_patch_gives_a_finer_grid_that_view_grid_pools() -> None:
    cpu = load_policy_cfg("cpu").replace(views=True)
    fine = cpu.backbone.replace(overrides={**cpu.backbone.overrides, "patch_size": 8})
    cfg = cpu.replace(backbone=fine)
    assert cfg.backbone.patch_size == 8
    images = make_batch(cfg, b=2)["images"]
    # Per view: the class token and the 8 x 8 patches of a 64 px view.
    assert build_model(cfg).image(images).shape == (2, 3 * 65, cfg.width)
    assert build_model(cfg.replace(view_grid=4)).image(images).shape == (2, 3 * 17, cfg.width)
    with pytest.raises(ValueError, match="not a multiple of the 8 px patch"):
        cpu.replace(backbone=fine, image_size=68)
