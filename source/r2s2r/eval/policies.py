"""The policy a user names for an evaluation, as the runtime's ``Policy``, and what
``eval.json`` says about it.

``open_policy`` turns ``--policy RUN|scripted|planned`` or ``--server HOST:PORT`` into a
``PolicySource``: it loads the run (``LearnedPolicy``), connects to the server (an
unreachable one fails here, before any trial), or gets ready to build the twin's scripted
operator or the planner per trial. ``PolicySource.policy_for(rig, trial)`` is the policy of
one trial; ``PolicySource.info`` is ``eval.json``'s ``policy`` block: for a run, whether it
was trained on real data only and, where it was co-trained, the grounding levels of its
simulated data, read from the metadata of the datasets its ``config.json`` records.
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
from scipy.spatial.transform import Rotation

from r2s2r.behavior.instance import TaskInstance, check_instance
from r2s2r.eval.protocol import Trial
from r2s2r.eval.trials import PolicyInfo
from r2s2r.policy.base import Policy, PolicyError, PolicyMetadata
from r2s2r.rig.interfaces import Rig
from r2s2r.runtime.episode import EpisodeStart
from r2s2r.runtime.remote import request_form
from r2s2r.sim.embodiment import Embodiment
from r2s2r.spec import TaskSpec, WorldSpec

if TYPE_CHECKING:
    from r2s2r.behavior.behaviors import Behavior

log = logging.getLogger("r2s2r.eval")
SCRIPTED, PLANNED = "scripted", "planned"


class PolicySource(Protocol):
    """Where an evaluation's policy comes from."""

    # eval.json's policy block.
    info: PolicyInfo

    def policy_for(self, rig: Rig, trial: Trial) -> Policy:
        """The policy that runs trial ``trial`` on ``rig``."""
        ...

    def close(self) -> None: ...


def open_policy(
    policy: str | Path | None = None,
    server: str | None = None,
    token: str | None = None,
    device: str = "auto",
    timeout_s: float = 10.0,
    noise_seed: int | None = None,
) -> PolicySource:
    """The source of ``--policy`` (a run folder, ``scripted`` or ``planned``) or of
    ``--server HOST:PORT`` (exactly one of them). ``noise_seed`` (a learned run only) gives
    each trial a flow-noise draw of its own (``trial_noise_seed``)."""
    if (policy is None) == (server is None):
        raise PolicyError(
            "name the policy to evaluate: --policy RUN|scripted|planned or --server HOST:PORT "
            f"(exactly one; got policy={policy!r}, server={server!r})"
        )
    if noise_seed is not None and (server is not None or str(policy) in (SCRIPTED, PLANNED)):
        what = f"--server {server}" if server is not None else f"--policy {policy}"
        raise PolicyError(
            f"--noise-seed {noise_seed}: only a training run's policy (--policy RUN) draws its "
            f"flow noise here; {what} does not"
        )
    if server is not None:
        host, port = parse_server(server)
        return RemoteSource(host, port, token, timeout_s)
    assert policy is not None
    if str(policy) == SCRIPTED:
        return ScriptedSource()
    if str(policy) == PLANNED:
        return PlannedSource()
    return LearnedSource(Path(policy), device, noise_seed)


def parse_server(server: str) -> tuple[str, int]:
    """``HOST:PORT`` -> (host, port)."""
    host, sep, port = str(server).rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise PolicyError(f"--server: expected HOST:PORT (a port from 1 to 65535), got {server!r}")
    return host.strip("[]"), int(port)


# ------------------------------------------------------------------------- learned runs
class LearnedSource:
    """A training run's policy (its newest checkpoint, EMA weights), loaded once. Its flow
    noise is one fixed draw (``noise_seed`` None: every trial meets the same policy), or
    each trial's own draw from ``noise_seed`` and the trial's index (so a trial is still a
    function of the trial, whichever worker plays it)."""

    def __init__(self, run: Path, device: str = "auto", noise_seed: int | None = None) -> None:
        from r2s2r.policy import checkpoint as ckpt
        from r2s2r.policy.learned import LearnedPolicy

        run_dir = ckpt.resolve_checkpoint(run).parent.parent
        self.policy = LearnedPolicy.load(run, device=device)
        self.noise_seed = noise_seed
        self.info = dataclasses.replace(run_info(run_dir), noise_seed=noise_seed)

    def policy_for(self, rig: Rig, trial: Trial) -> Policy:
        if self.noise_seed is not None:
            self.policy.noise_seed = trial_noise_seed(self.noise_seed, trial.index)
        return self.policy

    def close(self) -> None:
        """Nothing to release."""


def trial_noise_seed(noise_seed: int, trial: int) -> int:
    """The flow-noise seed of trial ``trial`` in an evaluation run with ``--noise-seed``."""
    return int(np.random.SeedSequence([noise_seed, trial]).generate_state(1)[0])


def run_info(run_dir: Path) -> PolicyInfo:
    """eval.json's policy block for a run folder: real-only where its config records no
    simulated dataset; else the grounding levels its simulated datasets' episodes name."""
    from r2s2r.policy import checkpoint as ckpt

    path = run_dir / ckpt.CONFIG_FILE
    config = ckpt.read_json(path)
    records = config.get("datasets") if isinstance(config, dict) else None
    if not isinstance(records, list) or not all(isinstance(r, dict) for r in records):
        raise PolicyError(f"{path}: records no training datasets (a 'datasets' list)")
    sims = [Path(str(r.get("path"))) for r in records if r.get("domain") != "real"]
    name, run = run_dir.name, str(run_dir.resolve())
    if not sims:
        return PolicyInfo(name=name, kind="learned", run=run, real_only=True)
    levels = {sim_levels(p) for p in sims}
    if len(levels) != 1 or None in next(iter(levels)):
        log.warning(
            "%s: the simulated datasets %s do not name one world and behavior level %s; "
            "eval.json leaves them null",
            path,
            [str(p) for p in sims],
            sorted(levels, key=str),
        )
        return PolicyInfo(name=name, kind="learned", run=run)
    world, behavior = next(iter(levels))
    return PolicyInfo(name=name, kind="learned", run=run, world=world, behavior=behavior)


def sim_levels(root: Path) -> tuple[str | None, str | None]:
    """(world level, behavior level) of a simulated dataset, from its episodes' ``world``
    and ``behavior`` metadata: world ``nominal`` (the CAD world) is ungrounded and any other
    world one that grounding wrote (``grounded``); behavior ``adapted`` or ``planned``.
    None where the dataset cannot be read or its episodes disagree."""
    from r2s2r.data import Dataset, DatasetError

    try:
        episodes = Dataset(root).episodes
    except (DatasetError, OSError) as err:
        log.warning("%s: cannot read its episodes' metadata (%s)", root, err)
        return None, None
    worlds = {e.get("world") for e in episodes}
    behaviors = {e.get("behavior") for e in episodes}
    if len(worlds) != 1 or len(behaviors) != 1:
        return None, None
    world, behavior = worlds.pop(), behaviors.pop()
    if world is None or behavior not in ("adapted", "planned"):
        return None, None
    return ("nominal" if world == "nominal" else "grounded"), str(behavior)


# ----------------------------------------------------------------------- remote servers
class RemoteSource:
    """A policy server (``r2s2r serve``, or any of openpi's protocol), connected once."""

    def __init__(self, host: str, port: int, token: str | None, timeout_s: float) -> None:
        from r2s2r.policy.client import PolicyServerGone, RemotePolicy

        try:
            self.remote = RemotePolicy(host, port, token=token, timeout_s=timeout_s)
        except PolicyServerGone as err:
            raise PolicyError(f"--server {host}:{port}: {err}") from None
        self.policy = request_form(self.remote)
        self.info = PolicyInfo(name=f"server {host}:{port}", kind="remote")

    def policy_for(self, rig: Rig, trial: Trial) -> Policy:
        return self.policy

    def close(self) -> None:
        self.remote.close()


# ------------------------------------------------------------------ the twin's operator
def _twin(rig: Rig, what: str) -> Any:
    from r2s2r.rig.twin import TwinRig

    if not isinstance(rig, TwinRig):
        raise PolicyError(f"--policy {what} runs only on the twin (--rig twin): {_TWIN_ONLY[what]}")
    return rig


_TWIN_ONLY = {
    SCRIPTED: "the scripted operator reads the twin's cell with its own eyes",
    PLANNED: "the planner needs the presented object's pose, which the real cell does not track",
}


class ScriptedSource:
    """The twin's scripted operator (``OperatorPolicy``), built per trial with its seed."""

    info = PolicyInfo(name=SCRIPTED, kind="scripted")

    def policy_for(self, rig: Rig, trial: Trial) -> Policy:
        from r2s2r.runtime.scripted import OperatorPolicy

        return OperatorPolicy.for_twin(_twin(rig, SCRIPTED), trial.seed)

    def close(self) -> None:
        """Nothing to release."""


# ----------------------------------------------------------------------------- planner
def instance_from_start(start: EpisodeStart, task: TaskSpec, world: WorldSpec) -> TaskInstance:
    """The task instance an episode presents, as the planner knows the cell (``world``,
    its nominal spec): the object, its offset across the belt and turn about the vertical
    from its seen pose, and the belt speed (object size: the spec's)."""
    if start.object_pose is None:
        raise PolicyError(
            "the planned policy needs the presented object's pose; this rig tracks none"
        )
    pose = np.asarray(start.object_pose, dtype=float)
    belt = world.layout.belt
    heading = Rotation.from_euler("z", belt.yaw_deg, degrees=True)
    local = heading.inv().apply(pose[:3] - np.asarray(belt.pos))
    turn = (heading.inv() * Rotation.from_quat(pose[3:], scalar_first=True)).as_euler("zyx")[0]
    instance = TaskInstance(start.object_name, float(local[1]), float(turn), start.belt_speed)
    check_instance(task, world, instance)
    return instance


class PlannedPolicy:
    """The planned behavior (synthesized grasp, planned route) as a policy: ``begin`` plans
    the episode's instance (``instance_from_start``) and the plan's commands are returned
    one per call (``PlanPolicy`` with horizon 1), whatever is observed. Horizon 1 because a
    plan is a timed sequence: the runtime asks a horizon-1 policy every period (synchronous
    execution), so command k runs at step k, as in open-loop execution. Where the behavior
    makes no plan for the instance, ``infer`` fails with the reason (the runtime ends the
    trial: failed)."""

    def __init__(
        self,
        behavior: Behavior,
        task: TaskSpec,
        world: WorldSpec,
        embodiment: Embodiment,
        seed: int,
    ) -> None:
        self.behavior, self.task, self.world = behavior, task, world
        self.embodiment, self.seed = embodiment, seed
        self._metadata = PolicyMetadata(
            embodiment.name,
            "tcp",
            embodiment.action_dim("tcp"),
            1,
            task.control_hz,
            state_dim=embodiment.state_dim,
        )
        self.plan: Any = None
        self.failure = ""

    @property
    def metadata(self) -> PolicyMetadata:
        return self._metadata

    def reset(self) -> None:
        if self.plan is not None:
            self.plan.reset()

    def begin(self, start: EpisodeStart) -> None:
        from r2s2r.policy.plan import PlanPolicy

        self.plan, self.failure = None, ""
        rng = np.random.default_rng(self.seed)
        try:
            instance = instance_from_start(start, self.task, self.world)
            self.plan = PlanPolicy.from_behavior(
                self.behavior, instance, rng, 1, self._metadata.control_hz, self.embodiment
            )
        except ValueError as err:  # No plan (PolicyError), or an instance the cell refuses.
            self.failure = str(err)
            log.warning("planned policy: %s", err)

    def infer(self, observation: dict[str, Any]) -> np.ndarray:
        """The plan's next command (1, action_dim)."""
        if self.plan is None:
            raise PolicyError(self.failure or "the planned policy has no plan: call begin first")
        return np.asarray(self.plan.infer(observation))


class PlannedSource:
    """The planner (``behavior`` ``planned``, CPU carry planner by default), planning in the
    nominal world: built once, on the first trial's twin; one ``PlannedPolicy`` per trial."""

    info = PolicyInfo(name=PLANNED, kind="planned")

    def __init__(self, planner: str = "cpu") -> None:
        self.planner = planner
        self._behavior: Behavior | None = None
        self._executor: Any = None

    def behavior(self, task: TaskSpec, world: WorldSpec) -> Behavior:
        """The planned behavior in ``world`` (built on the first call)."""
        if self._behavior is None:
            from r2s2r.behavior.behaviors import BehaviorSetup, make_behavior
            from r2s2r.behavior.execute import Executor

            self._executor = Executor(world, task)
            setup = BehaviorSetup(task, world, self._executor, planner=self.planner)
            self._behavior = make_behavior(PLANNED, setup)
        return self._behavior

    def policy_for(self, rig: Rig, trial: Trial) -> Policy:
        from r2s2r.spec.worlds import load_task

        twin = _twin(rig, PLANNED)
        # The planner knows the cell's task (every object, nominal and novel) and its
        # nominal world, not the twin's hidden one or the condition's shifts.
        task = load_task(twin.task.name)
        behavior = self.behavior(task, twin.nominal)
        return PlannedPolicy(behavior, twin.task, twin.nominal, twin.embodiment, trial.seed)

    def close(self) -> None:
        if self._executor is not None:
            self._executor.close()


class GivenSource:
    """A ``Policy`` built in code (a test's, a GUI's), with its eval.json block."""

    def __init__(self, policy: Policy, info: PolicyInfo) -> None:
        self.policy, self.info = policy, info

    def policy_for(self, rig: Rig, trial: Trial) -> Policy:
        return self.policy

    def close(self) -> None:
        """The caller owns the policy."""
