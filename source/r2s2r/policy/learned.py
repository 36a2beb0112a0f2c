"""A trained policy as the runtime's ``Policy``: ``load_policy(RUN)`` (or
``LearnedPolicy.load``) rebuilds the model of a run folder from its config and newest
checkpoint (EMA weights by default) and maps observations to action chunks in robot units.

``infer`` takes either the env's observation dict (the policy keeps the proprio history
itself, padding it with the first sample after ``reset``) or a request in the dataset's form
(``observation.images.<camera>``, ``observation.state`` (P, S) oldest first, ``task``), which
is what the policy server receives. Sampling starts from the same noise at every call (drawn
from ``noise_seed``), so a chunk is a function of the observation alone: the server and the
in-process policy answer alike.

``infer_guided(observation, prefix)`` (a ``base.GuidedPolicy``) samples the chunk guided onto
the actions the runtime has committed to (RTC): the prefix goes into the model's action space
as training batches hold actions (encoded relative to the state now, normalized, padded).
"""

from __future__ import annotations

import time
from collections import deque
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import torch

from r2s2r.data.config import ENV_STATE_KEY, IMAGE_PREFIX, STATE_KEY
from r2s2r.geometry.rotations import same_hemisphere
from r2s2r.policy import checkpoint as ckpt
from r2s2r.policy.actions import ActionCodec
from r2s2r.policy.base import (
    BELT_SPEED_KEY,
    STATE_PAD_KEY,
    TASK_KEY,
    ChunkPrefix,
    PolicyError,
    PolicyMetadata,
)
from r2s2r.policy.collate import Collate
from r2s2r.policy.config import PolicyCfg
from r2s2r.policy.model import FlowMatchingPolicy, Guide, build_model
from r2s2r.policy.train import resolve_device
from r2s2r.sim.contract import ENV_STATE_DIM, Contract
from r2s2r.sim.embodiment import Embodiment


def _speed(value: Any, key: str) -> float | None:
    """A belt speed read from ``key`` of an observation (None where it has none)."""
    if value is None:
        return None
    speed = np.asarray(value, dtype=np.float64)
    if speed.size != 1 or not np.isfinite(speed).all():
        raise PolicyError(f"{key}: expected one finite speed in m/s, got {value!r}")
    return float(speed.reshape(()))


def _pose(value: Any, key: str) -> np.ndarray | None:
    """An object pose (7,) read from ``key`` of an observation (None where it has none)."""
    if value is None:
        return None
    pose = np.asarray(value, dtype=np.float64)
    if pose.shape != (ENV_STATE_DIM,) or not np.isfinite(pose).all():
        raise PolicyError(f"{key}: expected a finite pose ({ENV_STATE_DIM},), got {value!r}")
    return pose


class _Inputs(NamedTuple):
    """What the model reads of one observation or request: views by camera, states (P, S)
    oldest first, the instruction, the history's padding (P,) or None, and where given the
    belt speed (m/s) and the object's true pose (7,)."""

    images: dict[str, np.ndarray]
    states: np.ndarray
    task: str
    pad: np.ndarray | None
    belt_speed: float | None
    object_pose: np.ndarray | None


class LearnedPolicy:
    """A flow-matching policy with its normalization and action representation."""

    def __init__(
        self,
        model: FlowMatchingPolicy,
        collate: Collate,
        contract: Contract,
        device: torch.device,
        domain_id: int = 0,
        noise_seed: int = 0,
    ) -> None:
        cfg = model.cfg
        self.model, self.collate, self.contract, self.device = model, collate, contract, device
        self.domain_id, self.noise_seed = domain_id, noise_seed
        self._metadata = PolicyMetadata(
            embodiment=contract.embodiment.name,
            action_mode=contract.action_mode,
            action_dim=contract.action_dim,
            action_horizon=cfg.action_horizon,
            control_hz=cfg.control_hz,
            cameras=contract.cameras,
            state_dim=contract.state_dim,
            state_history=cfg.state_history,
            quaternions=contract.state_quaternions(),
            environment_state=cfg.object_pose,
        )
        self._history: deque[np.ndarray] = deque(maxlen=cfg.state_history)
        # Samples seen since ``reset`` (the rest of the history is padding, as in training).
        self._seen = 0
        # Milliseconds of the last call: observation encoding and denoising.
        self.last_timing: dict[str, float] = {}
        model.eval()

    @classmethod
    def load(
        cls,
        run: Path,
        device: str = "auto",
        use_ema: bool = True,
        domain_id: int = 0,
        noise_seed: int = 0,
    ) -> LearnedPolicy:
        """The policy of run folder ``run`` (its newest checkpoint), or of a checkpoint
        folder inside one."""
        path = ckpt.resolve_checkpoint(Path(run))
        run_dir = path.parent.parent
        config = ckpt.read_json(run_dir / ckpt.CONFIG_FILE)
        try:
            cfg = PolicyCfg.from_dict(config["policy"], source=str(run_dir / ckpt.CONFIG_FILE))
            embodiment = Embodiment.from_json(config["embodiment"])
            contract = Contract.of(embodiment, config["action_mode"], tuple(config["cameras"]))
        except (KeyError, TypeError, ValueError) as err:
            raise PolicyError(f"{run_dir / ckpt.CONFIG_FILE}: not a run config ({err})") from None
        # The checkpoint holds every weight: pretrained files are not needed to load it.
        cfg = cfg.replace(backbone={"weights": None}, text={"weights": None})
        dev = resolve_device(device)
        saved = ckpt.load_checkpoint(path, optimizer=False)
        model = build_model(cfg, dev)
        try:
            model.load_state_dict(saved.model)
        except RuntimeError as err:
            raise PolicyError(f"{path / ckpt.MODEL_FILE}: does not fit {cfg.name}: {err}") from None
        if use_ema:
            params = dict(model.named_parameters())
            with torch.no_grad():
                for name, value in saved.ema.items():
                    if name not in params:
                        raise PolicyError(f"{path / ckpt.EMA_FILE}: unknown weight {name!r}")
                    params[name].copy_(value)
        codec = ActionCodec(contract, cfg.action_repr)
        collate = Collate(codec, saved.norm, cfg.max_state_dim, cfg.max_action_dim, cfg.image_size)
        return cls(model, collate, contract, dev, domain_id, noise_seed)

    @property
    def metadata(self) -> PolicyMetadata:
        return self._metadata

    def reset(self) -> None:
        """Forget the proprio history of the last episode."""
        self._history.clear()
        self._seen = 0

    def _inputs(self, observation: dict[str, Any]) -> _Inputs:
        """What the model reads of an observation or a request."""
        cams = self.contract.cameras
        if STATE_KEY in observation:
            images = {c: np.asarray(observation[IMAGE_PREFIX + c]) for c in cams}
            states = np.asarray(observation[STATE_KEY], dtype=np.float32)
            pad = observation.get(STATE_PAD_KEY)
            if pad is not None:
                pad = np.asarray(pad, dtype=bool)
                if pad.shape != (len(states),):
                    raise PolicyError(
                        f"{STATE_PAD_KEY}: expected ({len(states)},) bool, got {pad.shape}"
                    )
            return _Inputs(
                images,
                states,
                str(observation[TASK_KEY]),
                pad,
                _speed(observation.get(BELT_SPEED_KEY), BELT_SPEED_KEY),
                _pose(observation.get(ENV_STATE_KEY), ENV_STATE_KEY),
            )
        state = self.contract.state(observation).astype(np.float32)
        size = self._metadata.state_history
        if self._history:
            # On the previous sample's hemisphere, as the recorded takes are.
            state = same_hemisphere(self._history[-1], state, self._metadata.quaternions)
        else:
            self._history.extend([state] * size)
        self._history.append(state)
        self._seen += 1
        pad = np.arange(size) < size - self._seen
        views = observation.get("images") or {}
        missing = [c for c in cams if c not in views]
        if missing:
            raise PolicyError(f"observation: no images of cameras {missing}")
        return _Inputs(
            {c: views[c] for c in cams},
            np.stack(self._history),
            str(observation["instruction"]),
            pad,
            _speed(observation.get("belt_speed"), "belt_speed"),
            _pose(observation.get("environment_state"), "environment_state"),
        )

    def infer(self, observation: dict[str, Any]) -> np.ndarray:
        """The next chunk (action_horizon, action_dim) float64, in robot units."""
        return self._chunk(observation, None)

    def infer_guided(self, observation: dict[str, Any], prefix: ChunkPrefix) -> np.ndarray:
        """The next chunk (action_horizon, action_dim) float64, in robot units, guided onto
        ``prefix`` (RTC: ``base.ChunkPrefix``, ``model.Guide``): the same noise as ``infer``,
        so a prefix whose weights are all 0 gives ``infer``'s chunk."""
        if not isinstance(prefix, ChunkPrefix):
            raise PolicyError(f"prefix: expected a ChunkPrefix, got {type(prefix).__name__}")
        prefix.check(self._metadata.action_horizon, self._metadata.action_dim)
        if self.contract.action_mode == "tcp":
            _check_quaternions(self.contract, prefix.actions)
        return self._chunk(observation, prefix)

    def _guide(self, prefix: ChunkPrefix, state_now: np.ndarray) -> Guide:
        """``prefix`` in the model's action space: its actions encoded relative to the state
        now (S,) and normalized, zero past its end, and its weights, as a batch of one."""
        h = self._metadata.action_horizon
        target = torch.zeros(1, h, self.model.cfg.max_action_dim)
        actions = prefix.actions[:h]
        target[:, : len(actions)] = self.collate.actions_in(actions[None], state_now[None])
        weights = torch.from_numpy(prefix.weights(h)[None]).float()
        return Guide(target.to(self.device), weights.to(self.device), prefix.beta)

    def _chunk(self, observation: dict[str, Any], prefix: ChunkPrefix | None) -> np.ndarray:
        # The chunk of ``infer`` (no prefix) or ``infer_guided``.
        inputs = self._inputs(observation)
        states = inputs.states
        want = (self._metadata.state_history, self._metadata.state_dim)
        if states.shape != want:
            raise PolicyError(f"{STATE_KEY}: expected {want}, got {states.shape}")
        batch = self.collate.observation(
            inputs.images,
            states,
            inputs.task,
            self.contract.embodiment.id,
            self.domain_id,
            inputs.pad,
            inputs.belt_speed,
            inputs.object_pose,
        )
        batch = {
            k: v.to(self.device) if isinstance(v, torch.Tensor) else v for k, v in batch.items()
        }
        guide = None if prefix is None else self._guide(prefix, states[-1])
        gen = torch.Generator(self.device).manual_seed(self.noise_seed)
        cfg = self.model.cfg
        noise = torch.randn(
            (1, cfg.action_horizon, cfg.max_action_dim), generator=gen, device=self.device
        )
        sync = torch.cuda.synchronize if self.device.type == "cuda" else (lambda: None)
        t0 = time.perf_counter()
        with torch.inference_mode():
            internal = self.model.sample(batch, noise=noise, guide=guide)
        sync()
        self.last_timing = {"infer_ms": (time.perf_counter() - t0) * 1e3}
        chunk = self.collate.actions_out(internal.float().cpu(), states[-1][None])
        return np.asarray(chunk[0], dtype=np.float64)


def load_policy(run: Path, device: str = "auto") -> LearnedPolicy:
    """The ``Policy`` of a training run folder (its newest checkpoint, EMA weights)."""
    return LearnedPolicy.load(run, device=device)


def _check_quaternions(contract: Contract, actions: np.ndarray) -> None:
    """A ``PolicyError`` naming the first TCP target of ``actions`` (n, action_dim) whose
    orientation is not a unit quaternion (x y z qw qx qy qz per arm)."""
    arm, _ = contract.split_action(actions)
    norm = np.linalg.norm(arm[..., 3:7], axis=-1)
    bad = np.argwhere(np.abs(norm - 1.0) > 1e-3)
    if len(bad):
        step, side = bad[0]
        raise PolicyError(
            f"prefix.actions: action {step}, {contract.embodiment.sides[side]} arm: quaternion "
            f"norm {norm[step, side]:.3f}, expected unit quaternions (x y z qw qx qy qz)"
        )
