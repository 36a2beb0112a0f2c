"""The policy's configuration: the model preset (``PolicyCfg``) and where presets come from.

A preset is a named ``PolicyCfg`` in ``presets/policy/<name>.yaml`` (``tiny``, ``cpu``, ``500m``,
``2b``); a user's ``config/policy/<name>.yaml`` overrides it, and a path to a YAML file works
wherever a name does. Nothing here imports torch.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, model_validator

from r2s2r.paths import find_config
from r2s2r.spec import Spec, SpecError
from r2s2r.spec.base import NonNeg, PosInt

# The presets shipped with the package, in size order.
POLICY_PRESETS = ("tiny", "cpu", "500m", "2b")
# How the policy represents an arm's TCP target inside the model: in the cell frame, or
# relative to the arm's current TCP pose; rotations as the first two columns of the
# rotation matrix (6D, continuous) either way.
ActionRepr = Literal["absolute", "relative"]


class BackboneCfg(Spec):
    """The image backbone: a timm DINOv3 ViT, frozen, with LoRA adapters in its last blocks
    (``finetune: lora``), or trained whole (``finetune: full``); or (``kind: conv``) a small
    convolutional net with a spatial-softmax keypoint head, trained whole from random
    weights (robomimic's and Diffusion Policy's image encoder at small sizes)."""

    # "vit": the timm model ``name``; "conv": the keypoint net (``channels``, ``keypoints``).
    kind: Literal["vit", "conv"] = "vit"
    # timm model name (``vit_base_patch16_dinov3``, ...).
    name: str = "vit_base_patch16_dinov3"
    # Constructor overrides for timm (``embed_dim``, ``depth``, ``num_heads`` shrink the model
    # for the tiny preset); empty for the published architectures.
    overrides: dict[str, int | float | bool] = Field(default_factory=dict)
    # Local pretrained weights (Meta's or timm's checkpoint); None: random weights.
    weights: Path | None = None
    lora_rank: PosInt = 8
    lora_alpha: float = 16.0
    # LoRA goes into this many blocks, counted from the last.
    lora_blocks: PosInt = 4
    # "lora": the backbone stays frozen and only the adapters learn (the published recipe,
    # for pretrained weights); "full": every backbone weight learns and no adapters are added
    # (for a small backbone trained from its random initialization, where frozen random
    # features would be all the policy ever sees).
    finetune: Literal["lora", "full"] = "lora"
    # The keypoint net: four 3 x 3 convolutions of these widths (strides 1, 2, 1, 2), then
    # ``keypoints`` spatial-softmax keypoints; each view becomes two tokens (its keypoints,
    # and its pooled features).
    channels: tuple[PosInt, PosInt, PosInt, PosInt] = (16, 32, 32, 64)
    keypoints: PosInt = 32

    @model_validator(mode="after")
    def _conv_trains_whole(self) -> BackboneCfg:
        if self.kind == "conv" and self.finetune != "full":
            raise ValueError("backbone.kind conv has no pretrained weights: set finetune: full")
        return self

    @property
    def patch_size(self) -> int:
        """The ViT's patch side in pixels (16 unless ``overrides`` sets ``patch_size``)."""
        return int(self.overrides.get("patch_size", 16))


class TextCfg(Spec):
    """The instruction encoder: a frozen open_clip text tower, resampled into task tokens."""

    # open_clip model name whose text tower (and tokenizer) is used.
    name: str = "ViT-B-16"
    # Text-tower overrides (``width``, ``layers``, ``heads``) for the tiny preset.
    overrides: dict[str, int] = Field(default_factory=dict)
    weights: Path | None = None
    # Learned queries of the resampler: the task tokens the transformer sees.
    task_tokens: PosInt = 8


class PolicyCfg(Spec):
    """A flow-matching visuomotor policy: inputs, widths, and how actions are represented."""

    name: str = "custom"
    # Views are resized to this square size before the backbone (a multiple of the patch).
    image_size: PosInt = 256
    backbone: BackboneCfg = BackboneCfg()
    text: TextCfg = TextCfg()
    # Proprio samples the policy sees (oldest first, the newest is now) and actions per chunk.
    state_history: PosInt = 20
    action_horizon: PosInt = 40
    # The robot's control rate: proprio samples and actions are on this grid.
    control_hz: float = 50.0
    # Per-embodiment projections: state and (internal) action vectors are zero-padded to
    # these sizes, so one checkpoint can hold several robots.
    max_state_dim: PosInt = 128
    max_action_dim: PosInt = 64
    action_repr: ActionRepr = "relative"
    # The policy transformer.
    width: PosInt = 1024
    heads: PosInt = 16
    # Layers over the observation tokens (run once per chunk) and over the action tokens
    # (run at every denoising step, attending to the observation tokens).
    obs_layers: PosInt = 12
    action_layers: PosInt = 14
    mlp_ratio: float = 4.0
    # Camera views the model can take (the size of its learned view embedding); a batch
    # carries up to this many.
    max_views: PosInt = 4
    # Each view's patch tokens average-pooled to a grid of this side before the policy
    # transformer (None: one token per patch). Fewer tokens make the observation transformer
    # and the action transformer's cross-attention cheaper.
    view_grid: PosInt | None = None
    # Tokens the proprio history is resampled into, and the cross-attention layers of each
    # resampler (task tokens from the text features, proprio tokens from the history).
    proprio_tokens: PosInt = 4
    resampler_layers: PosInt = 1
    # Euler steps from noise to actions at inference.
    denoise_steps: PosInt = 2
    # Condition on the data domain (0: real, 1...: each simulated dataset of the mixture).
    domain_conditioning: bool = False
    num_domains: PosInt = 8
    # A token from the belt drive's speed (m/s): the real cell's conveyor reports it, one
    # frame does not show it, and when a reach must start depends on it. Datasets give each
    # sample its episode's recorded speed; the runtime reads the conveyor each period.
    belt_speed: bool = False
    # Weight of an auxiliary loss on a small head that predicts each frame's hindsight
    # targets (policy/hindsight.py: seconds until the reach starts, which arm, where the hand
    # closed; all read from the take's own recorded proprio) from the observation tokens.
    # 0: no head. Training only; inference never runs the head.
    hindsight_weight: NonNeg = 0.0
    # The training-time random shift of every view, as a share of its size (policy/augment.py;
    # 0: none, colour jitter only). At 64 px the default's +-4 px moves the fixed head view
    # by about +-10 cm of belt (2.6 cm a pixel along the belt there, measured on a take;
    # 1.2 cm in the left wrist view): a policy trained on shifted views cannot read the
    # object's place from where it is in the picture to better than that.
    augment_shift: float = Field(0.06, ge=0.0, le=0.25)
    # Weight of the locator's loss (0: no locator). The locator is a small conv net on the
    # views (``locator_views`` of them, every view the policy is given) trained to say where
    # the object is on the belt, with the take's own hindsight place as its target
    # (policy/hindsight.py: the grasp point carried back by the belt's speed; NaN after the
    # grasp); its prediction, without gradient, becomes one observation token. It gives the
    # policy what the object_pose diagnostic told it, from what the real cell records.
    locator_weight: NonNeg = 0.0
    locator_views: PosInt = 3
    # Diagnosis only: a token from the presented object's true pose (the dataset's
    # observation.environment_state, which the twin's takes record; at evaluation the twin's
    # truth). The real cell has no such reading, so no recipe uses it: it says whether a
    # policy that is told where the object is learns the rest of the task.
    object_pose: bool = False
    # Diagnosis only: False builds no image encoder and ignores the batch's views. With
    # ``object_pose`` it makes a policy that is told everything the scripted operator knows
    # (the object's pose, the belt's speed, its own proprio): whether the action half of the
    # recipe fits the demonstrations, apart from perception, at a fraction of the cost.
    views: bool = True

    @model_validator(mode="after")
    def _check(self) -> PolicyCfg:
        if self.width % self.heads:
            raise ValueError(f"width {self.width} is not a multiple of heads {self.heads}")
        patch = self.backbone.patch_size
        if self.image_size % patch:
            raise ValueError(
                f"image_size {self.image_size} is not a multiple of the {patch} px patch"
            )
        patches = self.image_size // patch
        if self.view_grid is not None and patches % self.view_grid:
            raise ValueError(
                f"view_grid {self.view_grid} does not divide the {patches} x {patches} patches "
                f"of a {self.image_size} px view"
            )
        return self


def load_policy_cfg(preset: str | Path) -> PolicyCfg:
    """A ``PolicyCfg`` from a preset name or a YAML path."""
    path = Path(preset)
    if path.suffix in (".yaml", ".yml") or path.is_file():
        return PolicyCfg.load(path)
    found = find_config("policy", str(preset))
    if found is None:
        raise SpecError(
            f"unknown policy preset {str(preset)!r}: expected one of {list(POLICY_PRESETS)} "
            "or a path to a PolicyCfg YAML file"
        )
    return PolicyCfg.load(found)
