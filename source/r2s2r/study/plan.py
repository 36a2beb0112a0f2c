"""A study as stages with files between them, and what decides whether each must run.

``plan(cfg, rig)`` lists the stages in the order they run: ``record``, ``ground``,
``generate:<dataset>``, ``train:<policy>``, ``eval:<policy>``, ``latent:<policy>``,
``report``. Each has its output folder under the study directory, the stages it reads from,
and ``params``: every setting that decides its outputs. A stage's fingerprint hashes its
kind, its params and its inputs' fingerprints, so a changed setting changes the fingerprint
of its stage and of every stage downstream of it, and of nothing else.

``Ledger`` is ``DIR/study.json``: the config the study last ran with and, per stage, its
fingerprint, its state (``running`` or ``done``) and its wall time, rewritten atomically
after every change. A stage is skipped when the ledger holds it ``done`` with the fingerprint
it has now and its outputs are there; continued (its own resume) when it was ``running``
with the same fingerprint; and started afresh, its old outputs removed, otherwise.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, get_args

from r2s2r import __version__
from r2s2r.study.config import StudyCfg

LEDGER = "study.json"
# Bumped when what a stage writes, for the same params, changes meaning.
FORMAT = 1
# A rig kind's name (``r2s2r.rig.kinds.RIGS``; the request checked it).
Rig = str
# The kinds of stage ``plan`` makes, in running order; what runs each one is in the study's
# stage registry (``r2s2r.study.stages``).
StageKind = Literal["record", "ground", "generate", "train", "eval", "latent", "report"]
STAGE_KINDS: tuple[StageKind, ...] = get_args(StageKind)


@dataclass(frozen=True)
class Stage:
    """One stage: ``name`` (``kind`` or ``kind:item``), its output folder (relative to the
    study directory), the stages it reads, and the settings that decide its outputs."""

    name: str
    kind: StageKind
    out: str
    deps: tuple[str, ...] = ()
    params: dict[str, Any] = field(default_factory=dict)

    @property
    def item(self) -> str | None:
        """The dataset or policy of a per-item stage (None for the others)."""
        return self.name.split(":", 1)[1] if ":" in self.name else None


def plan(cfg: StudyCfg, rig: Rig = "twin") -> list[Stage]:
    """The study's stages in running order (see the module docstring)."""
    stages = [
        *_record_stages(cfg, rig),
        *_generate_stages(cfg),
        *_train_stages(cfg),
        *_eval_stages(cfg, rig),
        *_latent_stages(cfg),
    ]
    evals = tuple(s.name for s in stages if s.kind in ("eval", "latent"))
    stages.append(Stage("report", "report", "report", evals, {"seed": cfg.seed}))
    return stages


def _record_stages(cfg: StudyCfg, rig: Rig) -> list[Stage]:
    """Recording the real dataset, and grounding the world where the study grounds it."""
    stages = [
        Stage(
            "record",
            "record",
            "real",
            params={
                "rig": rig,
                "seed": cfg.seed,
                "cell": cfg.cell,
                "image_size": cfg.image_size,
                **cfg.real.model_dump(mode="json"),
            },
        )
    ]
    if cfg.grounds:
        stages.append(
            Stage(
                "ground",
                "ground",
                "ground",
                params={
                    "rig": rig,
                    "seed": cfg.seed,
                    "cell": cfg.cell,
                    "sysid": cfg.grounding.sysid.model_dump(mode="json"),
                },
            )
        )
    return stages


def _generate_stages(cfg: StudyCfg) -> list[Stage]:
    """Generating each simulated dataset (one reading the grounded world depends on it)."""
    stages: list[Stage] = []
    gen = cfg.generation
    for name in gen.datasets:
        world, behavior = name.split("-")
        deps: tuple[str, ...] = ("record", "ground") if world == "grounded" else ("record",)
        params = {
            "world": world,
            "behavior": behavior,
            "seed": cfg.seed,
            "image_size": cfg.image_size,
            "episodes": gen.episodes,
            "max_attempts": gen.max_attempts,
            "planner": gen.planner,
        }
        stages.append(Stage(f"generate:{name}", "generate", f"sim/{name}", deps, params))
    return stages


def _train_stages(cfg: StudyCfg) -> list[Stage]:
    """Training each policy on its datasets (after the study policy it starts from)."""
    stages: list[Stage] = []
    train = cfg.training.model_dump(mode="json")
    for policy, entry in cfg.policies.items():
        init = entry.init if entry.init is not None else cfg.training.init
        from_study = init is not None and str(init) in cfg.policies
        deps = (
            *(("record",) if entry.real else ()),
            *(f"generate:{s}" for s in entry.sims),
            *((f"train:{init}",) if from_study else ()),
        )
        params = {
            **train,
            "sims": list(entry.sims),
            "alpha": entry.alpha,
            "real": entry.real,
            "real_episodes": entry.real_episodes,
            # A study policy's name (its fingerprint is a dependency) or a checkpoint path.
            "init": None if init is None else str(init),
            "init_from_study": from_study,
            "seed": cfg.seed,
        }
        stages.append(Stage(f"train:{policy}", "train", f"runs/{policy}", deps, params))
    return stages


def _eval_stages(cfg: StudyCfg, rig: Rig) -> list[Stage]:
    """Evaluating each evaluated policy on ``rig``."""
    stages: list[Stage] = []
    ev = cfg.evaluation.model_dump(mode="json")
    for policy in cfg.evaluated:
        params = {
            "rig": rig,
            "cell": cfg.cell,
            "seed": cfg.seed,
            "image_size": cfg.image_size,
            **{k: v for k, v in ev.items() if k not in ("workers", "latent")},
        }
        stages.append(
            Stage(f"eval:{policy}", "eval", f"eval/{policy}", (f"train:{policy}",), params)
        )
    return stages


def _latent_stages(cfg: StudyCfg) -> list[Stage]:
    """Comparing each evaluated policy's latents on real and simulated data, where the study
    asks for it, records videos and generates data."""
    gen = cfg.generation
    if not (cfg.evaluation.latent and cfg.evaluation.video != "none" and gen.datasets):
        return []
    stages: list[Stage] = []
    for policy in cfg.evaluated:
        entry = cfg.policies[policy]
        # The real-only policy is compared with every simulated dataset of the study.
        pool = () if entry.sims else tuple(f"generate:{d}" for d in gen.datasets)
        stages.append(
            Stage(
                f"latent:{policy}",
                "latent",
                f"eval/{policy}/latent",
                (f"eval:{policy}", *pool),
                {"seed": cfg.seed, "device": cfg.evaluation.device},
            )
        )
    return stages


def fingerprints(stages: list[Stage]) -> dict[str, str]:
    """Each stage's fingerprint: a hash of its kind, params and its inputs' fingerprints."""
    out: dict[str, str] = {}
    for stage in stages:
        data = {
            "format": FORMAT,
            "kind": stage.kind,
            "params": stage.params,
            "deps": {d: out[d] for d in stage.deps},
        }
        text = json.dumps(data, sort_keys=True, default=str)
        out[stage.name] = hashlib.sha256(text.encode()).hexdigest()[:16]
    return out


def select(stages: list[Stage], wanted: list[str] | None) -> list[Stage]:
    """The stages ``wanted`` names (a kind, ``kind:item`` or a name), in running order;
    all of them for None. An unknown name is an error that lists the known ones."""
    if not wanted:
        return stages
    names = {s.name for s in stages} | {s.kind for s in stages}
    unknown = [w for w in wanted if w not in names]
    if unknown:
        known = ", ".join(dict.fromkeys([s.kind for s in stages] + [s.name for s in stages]))
        raise ValueError(
            f"--stages: unknown stage {', '.join(map(repr, unknown))} (known: {known})"
        )
    return [s for s in stages if s.name in wanted or s.kind in wanted]


class Ledger:
    """``DIR/study.json``: see the module docstring."""

    def __init__(self, root: Path) -> None:
        self.path = Path(root) / LEDGER
        self.data: dict[str, Any] = {"stages": {}}
        if self.path.is_file():
            try:
                self.data = json.loads(self.path.read_text())
            except json.JSONDecodeError as err:
                raise ValueError(
                    f"{self.path}: not valid JSON ({err}); move it aside to start the study's "
                    "bookkeeping afresh (the stages' outputs stay and are re-checked)"
                ) from None
            if not isinstance(self.data.get("stages"), dict):
                raise ValueError(f"{self.path}: field 'stages' is missing or not an object")

    def entry(self, name: str) -> dict[str, Any]:
        return dict(self.data["stages"].get(name, {}))

    def set(self, name: str, **fields: Any) -> None:
        self.data["stages"][name] = {**self.data["stages"].get(name, {}), **fields}
        self.save()

    def save(self, **top: Any) -> None:
        self.data.update(top)
        self.data["version"] = __version__
        self.data["updated"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        tmp = self.path.with_suffix(".json.tmp")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with tmp.open("w") as f:
            f.write(json.dumps(self.data, indent=2) + "\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)


Decision = Literal["skip", "continue", "fresh"]


def decide(stage: Stage, fingerprint: str, ledger: Ledger, root: Path) -> Decision:
    """What to do with ``stage`` now (see the module docstring)."""
    entry = ledger.entry(stage.name)
    there = (Path(root) / stage.out).exists()
    if entry.get("fingerprint") != fingerprint:
        return "fresh"
    if entry.get("state") == "done":
        return "skip" if there else "fresh"
    return "continue" if there else "fresh"
