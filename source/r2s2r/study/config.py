"""A study's config: what each stage of record → ground → generate → train → evaluate →
report does, as one validated, immutable ``StudyCfg``.

Presets are ``study/<name>.yaml``: the user's config folder (``config/study/``) over the ones
shipped in the package (``r2s2r/presets/study``); a user copies one to make their own and
passes its name or its path. Every seed of the study derives from ``seed``, and one hidden
cell of the twin (``cell``) hosts its demos, its grounding and its trials, as one real cell
does.
"""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator, model_validator

from r2s2r.ground.sysid import SysIdCfg
from r2s2r.paths import find_config, presets_dir, user_config_dir
from r2s2r.runtime import RuntimeCfg
from r2s2r.spec import Spec
from r2s2r.spec.base import NonNeg, NonNegInt, Pos, PosInt, SpecError, Unit

WORLDS = ("nominal", "grounded")
BEHAVIORS = ("adapted", "planned")
# The reference's four simulated datasets: world x behavior, named world-behavior.
FOUR = tuple(f"{w}-{b}" for w in WORLDS for b in BEHAVIORS)
REAL_ONLY = "real-only"


class RealCfg(Spec):
    """The real demonstrations: teleoperated takes (the twin's scripted operator, or a
    person on the real cell)."""

    episodes: PosInt = 10
    # Store exact RGB (lossless video): larger files, no compression of the demos' views.
    lossless: bool = False
    # Take length limit, s (None: the task's episode length).
    max_seconds: Pos | None = None


class GroundingCfg(Spec):
    """World grounding: the captures' excitation lengths (``SysIdCfg``; the reference's by
    default)."""

    sysid: SysIdCfg = SysIdCfg()


class GenerationCfg(Spec):
    """The simulated datasets: ``episodes`` kept per dataset, the same task instances for
    every dataset (one generation seed)."""

    episodes: PosInt = 100
    datasets: tuple[str, ...] = FOUR
    # Attempts per dataset at most (None: 20 per kept episode).
    max_attempts: PosInt | None = None
    # Processes simulating attempts (or Ray workers with --ray).
    workers: PosInt = 1
    planner: str = "cpu"

    @field_validator("datasets")
    @classmethod
    def _known(cls, names: tuple[str, ...]) -> tuple[str, ...]:
        for name in names:
            if name not in FOUR:
                close = difflib.get_close_matches(name, FOUR, n=1)
                hint = f"; did you mean {close[0]!r}?" if close else ""
                raise ValueError(f"unknown dataset {name!r}{hint} (known: {', '.join(FOUR)})")
        if len(set(names)) != len(names):
            raise ValueError(f"a dataset is listed twice: {list(names)}")
        return names


class PolicyEntry(Spec):
    """One policy of the study: the simulated datasets it is co-trained with (none: real
    only), the share of real samples in its batches, and where it starts."""

    sims: tuple[str, ...] = ()
    # Share of each batch from the real demos (None: 1 without sims, 0.5 with them).
    alpha: Unit | None = None
    # Train on the real demos at all (False: simulated data only, e.g. a pre-training run).
    real: bool = True
    # The first N real demos only (None: all of them).
    real_episodes: PosInt | None = None
    # Start from another policy of this study (its name: it is trained first) or a
    # checkpoint path; None: ``training.init``.
    init: str | None = None
    # Evaluated with the protocol (a pre-training run is not).
    evaluate: bool = True

    @model_validator(mode="after")
    def _has_data(self) -> PolicyEntry:
        if not self.real and not self.sims:
            raise ValueError("trains on nothing: real is false and sims is empty")
        if not self.real and self.real_episodes is not None:
            raise ValueError("real_episodes is set but real is false")
        return self


class TrainingCfg(Spec):
    """The recipe every policy of the study is trained with."""

    preset: str = "tiny"
    steps: PosInt = 30_000
    batch_size: PosInt = 32
    lr: Pos = 1e-4
    final_lr: NonNeg = 1e-5
    warmup_steps: NonNegInt = 1000
    # Loader processes per run (0: load in the training process).
    workers: NonNegInt = 2
    save_every: PosInt = 1000
    log_every: PosInt = 10
    augment: bool = True
    device: str = "auto"
    # Data-parallel processes per run on this machine: one per GPU (torch.distributed.run,
    # NCCL), or gloo processes on a CPU. Each takes batch_size samples per step, so the
    # global batch is batch_size x processes.
    processes: PosInt = 1
    # Start every run from this checkpoint (a foundation model); None: from scratch.
    init: Path | None = None


class EvaluationCfg(Spec):
    """The protocol every policy meets, on the same trial list."""

    protocol: str = "paper"
    # The first N trials of the protocol's list, in its proportions (None: all of them).
    trials: PosInt | None = None
    runtime: RuntimeCfg = RuntimeCfg()
    # Trials recorded with video: all, none, or every N-th ("N").
    video: str = "all"
    # Processes running trials (or Ray workers with --ray).
    workers: PosInt = 1
    # The latent-space analysis of each policy's recorded rollouts (needs video).
    latent: bool = True
    device: str = "auto"


class StudyCfg(Spec):
    """A whole study: see the module docstring."""

    name: str
    description: str = ""
    seed: NonNegInt = 0
    # The twin's hidden cell (the study's "real" cell).
    cell: NonNegInt = 0
    # Camera views of every dataset and trial, px (even: they are videos).
    image_size: PosInt = 256
    real: RealCfg = RealCfg()
    grounding: GroundingCfg = GroundingCfg()
    generation: GenerationCfg = GenerationCfg()
    policies: dict[str, PolicyEntry] = Field(
        default_factory=lambda: {
            REAL_ONLY: PolicyEntry(),
            **{name: PolicyEntry(sims=(name,)) for name in FOUR},
        }
    )
    training: TrainingCfg = TrainingCfg()
    evaluation: EvaluationCfg = EvaluationCfg()

    @field_validator("image_size")
    @classmethod
    def _even(cls, value: int) -> int:
        if value % 2 or value < 16:
            raise ValueError(f"expected an even size of at least 16 px, got {value}")
        return value

    @model_validator(mode="after")
    def _policies_use_generated_data(self) -> StudyCfg:
        if not self.policies:
            raise ValueError("policies: the study trains no policy")
        order = list(self.policies)
        for name, entry in self.policies.items():
            if not name or "/" in name or name.startswith("."):
                raise ValueError(f"policies: {name!r} is not a usable folder name")
            if entry.real_episodes is not None and entry.real_episodes > self.real.episodes:
                raise ValueError(
                    f"policies.{name}.real_episodes: {entry.real_episodes} is more than the "
                    f"{self.real.episodes} demos recorded (real.episodes)"
                )
            if entry.init in self.policies and order.index(entry.init) >= order.index(name):
                raise ValueError(
                    f"policies.{name}.init: policy {entry.init!r} must be listed before it "
                    "(it is trained first)"
                )
            missing = [s for s in entry.sims if s not in self.generation.datasets]
            if missing:
                raise ValueError(
                    f"policies.{name}.sims: {', '.join(missing)} not in generation.datasets "
                    f"({', '.join(self.generation.datasets) or 'none'})"
                )
        return self

    @property
    def evaluated(self) -> list[str]:
        """The policies the protocol evaluates, in order."""
        return [name for name, entry in self.policies.items() if entry.evaluate]

    @property
    def grounds(self) -> bool:
        """Whether any simulated dataset is made in the grounded world."""
        return any(d.startswith("grounded-") for d in self.generation.datasets)


def preset_names() -> list[str]:
    """Study presets: the packaged ones and those in the user's ``config/study/``."""
    names = {p.name[: -len(".yaml")] for p in (presets_dir() / "study").iterdir()}
    user = user_config_dir() / "study"
    if user.is_dir():
        names |= {p.stem for p in user.glob("*.yaml")}
    return sorted(n for n in names if not n.startswith("_"))


def load_study(preset: str | Path, **changes: object) -> StudyCfg:
    """A study config from a preset name or a YAML path, with ``changes`` applied to its
    top level (``seed``, ``cell``); unknown names name the nearest presets."""
    text = str(preset)
    if text.endswith((".yaml", ".yml")) or "/" in text:
        path = Path(text)
        if not path.is_file():
            raise SpecError(f"study preset file {path}: not found")
        cfg = StudyCfg.load(path)
    else:
        found = find_config("study", text)
        if found is None:
            known = preset_names()
            close = difflib.get_close_matches(text, known, n=3, cutoff=0.4)
            hint = f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
            raise SpecError(
                f"unknown study preset {text!r}{hint} (known: {', '.join(known)}; or a path "
                "to a study YAML)"
            )
        cfg = StudyCfg.load(found)
    return cfg.replace(**changes) if changes else cfg


Stage = Literal["record", "ground", "generate", "train", "eval", "latent", "report"]
STAGE_KINDS: tuple[str, ...] = ("record", "ground", "generate", "train", "eval", "latent", "report")
