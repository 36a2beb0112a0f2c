"""Which task instances a learned policy was trained on, and protocols of those instances or
of none of them: memorization against generalization.

An instance is named by a twin seed: a twin seeded ``s`` presents instance ``s`` first (its
object, pose and belt speed), and a trial of seed ``s`` meets it. A recorded episode's
``seed`` is its take's; the first episode of a take is that take's seed's instance, later
ones are further draws of the same stream, which no trial seed reproduces. Record one
episode per seed (as ``r2s2r bench learning`` does) and every episode is a named instance.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from r2s2r.eval.protocol import SEED_SPACE, ProtocolSpec, trial_list
from r2s2r.eval.trials import INSTANCE_KINDS
from r2s2r.policy import checkpoint as ckpt

# The stream of the protocol seed that replaces trials meeting a training instance.
REDRAW_STREAM = 0x0F5EE7


class InstanceError(ValueError):
    """A run whose training instances cannot be named, or a protocol that cannot be made."""


def training_instances(run: Path) -> list[int]:
    """The instance seeds of the first episode of every take in the datasets training run
    ``run`` (or the run of a checkpoint folder) read, in episode order, each once."""
    from r2s2r.data import Dataset

    run = Path(run)
    if (run / ckpt.MODEL_FILE).is_file():
        # A checkpoint folder inside a run: RUN/checkpoints/step_N.
        run = run.parent.parent
    config = run / ckpt.CONFIG_FILE
    if not config.is_file():
        raise InstanceError(f"{run}: not a training run ({ckpt.CONFIG_FILE} missing)")
    seen: list[int] = []
    for record in ckpt.read_json(config).get("datasets", []):
        ds = Dataset(Path(record["path"]))
        for episode in ds.episodes:
            seed = episode.get("seed")
            if seed is not None and int(seed) not in seen:
                seen.append(int(seed))
    if not seen:
        raise InstanceError(f"{config}: its datasets' episodes name no instance seed")
    return seen


def instance_protocol(
    kind: str, protocol: ProtocolSpec, protocol_seed: int, trained: list[int], trials: int | None
) -> ProtocolSpec:
    """``train``: ``trials`` nominal trials (all: None) of the training instances, in order;
    ``unseen``: ``protocol``'s trials, each whose seed names a training instance given a
    fresh seed (drawn from ``protocol_seed``) that names none."""
    if kind not in INSTANCE_KINDS:
        raise InstanceError(f"instances: expected one of {INSTANCE_KINDS}, got {kind!r}")
    if kind == "train":
        n = len(trained) if trials is None else trials
        if not 1 <= n <= len(trained):
            raise InstanceError(
                f"--trials {n}: the run was trained on {len(trained)} named instances"
            )
        return ProtocolSpec(
            name=f"{protocol.name}-train",
            trials={"nominal": n},
            seeds=tuple(trained[:n]),
            description="the policy's own training instances",
        )
    seeds = [t.seed for t in trial_list(protocol, protocol_seed)]
    clashes = sum(s in trained for s in seeds)
    fresh = iter(draw_seeds(protocol_seed, REDRAW_STREAM, clashes, {*trained, *seeds}))
    return protocol.replace(seeds=tuple(next(fresh) if s in trained else s for s in seeds))


def draw_seeds(seed: int, stream: int, count: int, exclude: set[int] | None = None) -> list[int]:
    """``count`` distinct twin seeds from stream ``stream`` of ``seed`` (in the protocols'
    seed range), none in ``exclude``."""
    rng = np.random.default_rng([seed, stream])
    taken = set(exclude or ())
    out: list[int] = []
    while len(out) < count:
        s = int(rng.integers(SEED_SPACE))
        if s not in taken:
            taken.add(s)
            out.append(s)
    return out
