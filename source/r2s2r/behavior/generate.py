"""``r2s2r generate``: attempts in simulation, successes kept, written as a dataset.

Each attempt ``i`` draws a task instance from the task's distribution with the generator
``(seed, i)``, makes its commands (``adapted``: picks a source demo and adapts it;
``planned``: synthesizes a grasp and plans a route), and executes them in the chosen world
without cameras. Successes are rendered from their recorded states and saved with their metadata
(world, behavior, source demo, object, belt speed, attempt number as ``seed``); every
attempt, kept or not, goes to ``DIR/generation/attempts.jsonl`` with its failure reason. The
job resumes: rerun with the same arguments and it skips the attempts already logged, and
the same seed gives the same episodes.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections import Counter
from collections.abc import Callable
from collections.abc import Generator as Stream
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import field_validator

from r2s2r.behavior.adapt import AdaptCfg
from r2s2r.behavior.behaviors import BEHAVIORS, BehaviorSetup, make_behavior
from r2s2r.behavior.demo import load_demos
from r2s2r.behavior.execute import REASONS, Attempt, Executor, ReplayRenderer
from r2s2r.behavior.instance import check_instance, draw_instance
from r2s2r.behavior.planners import CARRY_PLANNERS
from r2s2r.behavior.stats import demo_stats, episode_stats, mean_stats
from r2s2r.data import CameraCfg, Dataset, DatasetCfg, DatasetWriter
from r2s2r.scaleout import Job, check_address, in_order, run_tasks
from r2s2r.spec import Spec, TaskSpec, WorldSpec
from r2s2r.spec.base import NonNegInt, PosInt
from r2s2r.spec.world import CAMERA_NAMES
from r2s2r.spec.worlds import load_task, world_at

log = logging.getLogger("r2s2r.generate")
Select = Literal["nearest", "random"]
LOG_DIR = "generation"


class GenerateCfg(Spec):
    """One generation job."""

    source: Path | None
    out: Path
    episodes: int = 10
    world: str | Path = "nominal"
    # How commands are made: a name in ``behaviors.BEHAVIORS`` (adapted, planned).
    behavior: str = "adapted"
    # The planned behavior's carry planner (``planners.CARRY_PLANNERS``): ``cpu`` (OMPL), or
    # ``curobo`` (NVIDIA GPU).
    planner: str = "cpu"
    seed: int = 0
    select: Select = "nearest"
    # Stop after this many attempts even if fewer episodes were kept (default 20 per episode).
    max_attempts: NonNegInt | None = None
    # Camera views of the kept episodes, px (0: no cameras).
    image_size: NonNegInt = 256
    # Processes that simulate attempts (1: this one); kept episodes are rendered and saved
    # here, in attempt order. With ``ray``: Ray tasks in flight at once (1: the cluster's CPUs).
    workers: PosInt = 1
    # A Ray cluster that simulates the attempts (its address, ``auto``, or ``local``: one of
    # this machine's own); None: local processes. The episodes are the same either way.
    ray: str | None = None
    overrides: Path | None = None
    adapt: AdaptCfg = AdaptCfg()
    task: str | Path = "pick_sort"

    _ray = field_validator("ray")(check_address)

    @field_validator("planner")
    @classmethod
    def _known_planner(cls, name: str) -> str:
        if name not in CARRY_PLANNERS:
            raise ValueError(CARRY_PLANNERS.unknown(name))
        return name


class Generator:
    """Runs attempts for one world and behavior; see the module docstring."""

    def __init__(self, cfg: GenerateCfg) -> None:
        if cfg.episodes < 1:
            raise ValueError(f"episodes: expected at least 1, got {cfg.episodes}")
        self.cfg = cfg
        self.task: TaskSpec = load_task(cfg.task)
        # Without views (image size 0) the world keeps its own size.
        self.world: WorldSpec = world_at(cfg.image_size or None, cfg.world)
        self.world_name = Path(str(cfg.world)).stem
        if cfg.behavior not in BEHAVIORS:
            raise ValueError(f"behavior: {BEHAVIORS.unknown(cfg.behavior)}")
        if cfg.planner != "cpu" and cfg.behavior != "planned":
            raise ValueError(f"--planner {cfg.planner} plans routes: it needs --behavior planned")
        self.executor = Executor(self.world, self.task)
        if cfg.source is not None:
            # Adaptation replays the demos' actions and reads their states (not their views).
            self.executor.env.contract.check_compatible(
                Dataset(cfg.source).contract, f"dataset {cfg.source}", "this env", views="ignore"
            )
        # With a source dataset, instances are drawn over the objects its demos handle, for
        # both behaviors, so that the datasets compare like with like.
        self.demos = load_demos(cfg.source, self.task, cfg.overrides) if cfg.source else []
        self.objects = sorted({d.object_name for d in self.demos}) or [
            o.name for o in self.task.objects
        ]
        missing = sorted({o.name for o in self.task.objects} - set(self.objects))
        if missing:
            log.warning(
                "no source demo handles %s: instances are drawn over %s only",
                ", ".join(missing),
                ", ".join(self.objects),
            )
        setup = BehaviorSetup(
            self.task, self.world, self.executor, self.demos, cfg.select, cfg.adapt, cfg.planner
        )
        self.behavior = make_behavior(cfg.behavior, setup)
        self.renderer = ReplayRenderer(self.world, self.task) if cfg.image_size else None
        self.log_path = cfg.out / LOG_DIR / "attempts.jsonl"
        self._this_run: list[dict[str, Any]] = []

    # ------------------------------------------------------------------ the job
    def run(self, progress: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
        """Attempt until ``episodes`` are kept (or ``max_attempts`` are spent); returns the
        summary (also written to ``DIR/generation/summary.json``)."""
        cfg = self.cfg
        cams = tuple(
            CameraCfg(name=c, height=cfg.image_size, width=cfg.image_size) for c in CAMERA_NAMES
        )
        ds_cfg = DatasetCfg(
            cameras=cams if cfg.image_size else (),
            embodiment=self.executor.env.embodiment,
            env_state=True,
        )
        limit = cfg.max_attempts or 20 * cfg.episodes
        start = time.perf_counter()
        with DatasetWriter(cfg.out, ds_cfg) as writer:
            self._check_job()
            done = self._logged()
            done.update(self._saved_but_unlogged(writer, done))
            kept = sum(r["kept"] for r in done.values())
            todo = (i for i in range(limit) if i not in done)
            # Attempts are simulated in order (here or in worker processes) and kept in
            # order, so the episodes do not depend on the number of workers.
            results: Stream[tuple[int, dict[str, Any], Attempt | None], None, None]
            if cfg.workers > 1 or cfg.ray is not None:
                results = self._in_workers(list(todo))
            else:
                results = ((i, *self.simulate(i)) for i in todo)
            try:
                for i, record, result in results if kept < cfg.episodes else ():
                    if result is not None and result.success:
                        self._keep(writer, i, record, result)
                    self._this_run.append(record)
                    self._append_log(record)
                    done[i] = record
                    kept += record["kept"]
                    if progress is not None:
                        progress(record)
                    if kept >= cfg.episodes:
                        break
            finally:
                results.close()  # Stops the workers' remaining attempts.
        summary = self.summary(list(done.values()), time.perf_counter() - start)
        path = cfg.out / LOG_DIR / "summary.json"
        path.write_text(json.dumps(summary, indent=2) + "\n")
        return summary

    def _keep(self, writer: DatasetWriter, i: int, record: dict[str, Any], result: Attempt) -> None:
        start = time.perf_counter()
        self._save(writer, i, record["source_demo"], result)
        record["kept"] = True
        record["seconds"]["render_and_save"] = time.perf_counter() - start

    def _in_workers(
        self, indices: list[int]
    ) -> Stream[tuple[int, dict[str, Any], Attempt | None], None, None]:
        """``simulate`` for each index in worker processes or Ray tasks
        (``r2s2r.scaleout``), yielded in index order."""
        job = Job(_start_worker, _simulate, (self.cfg,))
        tasks = run_tasks(job, indices, self.cfg.workers, self.cfg.ray)
        ordered = in_order(tasks, indices)
        try:
            for i, (record, result) in ordered:
                yield i, record, result
        finally:
            ordered.close()

    def simulate(self, i: int) -> tuple[dict[str, Any], Attempt | None]:
        """Attempt ``i`` without saving: its log record and, if it was executed, what
        happened."""
        rng = np.random.default_rng([self.cfg.seed, i])
        instance = draw_instance(self.task, rng, self.objects)
        check_instance(self.task, self.world, instance)
        record: dict[str, Any] = {
            "attempt": i,
            "instance": instance.to_json(),
            "source_demo": None,
            "kept": False,
            "reason": None,
            "seconds": {},
        }
        t0 = time.perf_counter()
        making = self.behavior.making
        made = self.behavior.commands(instance, rng)
        record["source_demo"] = made.source_demo
        if made.actions is None:
            record["reason"] = made.reason
            record["detail"] = made.detail
            record["seconds"][making] = time.perf_counter() - t0
            return record, None
        t1 = time.perf_counter()
        result = self.executor.run(instance, made.actions, seed=self._env_seed(i))
        t2 = time.perf_counter()
        record["seconds"] = {making: t1 - t0, "physics": t2 - t1}
        record["steps"] = len(result.actions)
        record["reason"] = result.reason
        record["stats"] = episode_stats(result, self._fps)
        return record, result

    # ------------------------------------------------------------------ internals
    @property
    def _fps(self) -> int:
        return int(round(self.task.control_hz))

    def _env_seed(self, i: int) -> int:
        return int(np.random.default_rng([self.cfg.seed, i, 1]).integers(2**31))

    def _save(self, writer: DatasetWriter, i: int, demo: str | None, result: Attempt) -> None:
        views = self.renderer.render(result, self._env_seed(i)) if self.renderer is not None else {}
        for k in range(len(result.actions)):
            images = {c: v[k] for c, v in views.items()}
            writer.add_frame(
                images, result.states[k], result.actions[k], env_state=result.objects[k]
            )
        meta = {
            "world": self.world_name,
            "behavior": self.cfg.behavior,
            "source_demo": demo,
            "belt_speed": result.instance.belt_speed,
            "object_ids": [result.instance.object_name],
            "seed": i,
        }
        writer.save_episode(result.instruction, True, meta)

    def _job(self) -> dict[str, Any]:
        """What decides a job's attempts: continuing it must not change any of these."""
        cfg = self.cfg
        return {
            "behavior": cfg.behavior,
            "planner": cfg.planner,
            "world": str(cfg.world),
            "seed": cfg.seed,
            "select": cfg.select,
            "source": None if cfg.source is None else str(Path(cfg.source).resolve()),
            "task": str(cfg.task),
            "image_size": cfg.image_size,
            "adapt": cfg.adapt.model_dump(),
        }

    def _check_job(self) -> None:
        """Refuse to continue a job in ``out`` that was started with other arguments."""
        path = self.cfg.out / LOG_DIR / "job.json"
        job = self._job()
        if path.is_file():
            before = json.loads(path.read_text())
            before.setdefault("planner", "cpu")  # Jobs from before the choice.
            changed = sorted(k for k in job if before.get(k) != job[k])
            if changed:
                detail = ", ".join(f"{k}: {before.get(k)!r} -> {job[k]!r}" for k in changed)
                raise ValueError(
                    f"{self.cfg.out} holds a generation job started with other arguments "
                    f"({detail}); continue it with the same ones or choose another --out"
                )
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(job, indent=2) + "\n")

    def _logged(self) -> dict[int, dict[str, Any]]:
        if not self.log_path.is_file():
            return {}
        out = {}
        lines = self.log_path.read_text().splitlines()
        for n, line in enumerate(lines, 1):
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                if n == len(lines):
                    break  # A line cut short by a crash: that attempt runs again.
                raise ValueError(f"{self.log_path}:{n}: not a JSON record") from None
            out[int(record["attempt"])] = record
        return out

    def _saved_but_unlogged(
        self, writer: DatasetWriter, done: dict[int, dict[str, Any]]
    ) -> dict[int, dict[str, Any]]:
        """Episodes saved by a run that stopped before logging them."""
        if not writer.num_episodes:
            return {}
        ds = Dataset(self.cfg.out)
        extra: dict[int, dict[str, Any]] = {}
        for e in range(ds.num_episodes):
            i = int(ds.episode(e)["seed"])
            if i not in done:
                extra[i] = {"attempt": i, "kept": True, "reason": None, "seconds": {}}
                self._append_log(extra[i])
        return extra

    def _append_log(self, record: dict[str, Any]) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("a") as f:
            f.write(json.dumps(record) + "\n")
            f.flush()
            os.fsync(f.fileno())

    def summary(self, records: list[dict[str, Any]], seconds: float) -> dict[str, Any]:
        """Kept, attempts, success rate, failures by reason, time and its split, and the
        behavior statistics of kept episodes and of the source demos."""
        attempts = len(records)
        kept = [r for r in records if r["kept"]]
        failures = Counter(r["reason"] for r in records if not r["kept"] and r["reason"])
        spent: Counter[str] = Counter()
        for r in records:
            spent.update(r.get("seconds", {}))
        busy = sum(spent.values()) or 1.0
        stats = [r["stats"] for r in kept if "stats" in r]
        # Physics steps per second while executing attempts (this run), against raw mj_step.
        ex = self.executor
        physics_s = sum(r["seconds"].get("physics", 0.0) for r in self._this_run)
        steps = sum(r.get("steps", 0) for r in self._this_run) * ex.env.cell.nsub
        ours = steps / physics_s if physics_s else 0.0
        raw = ex.raw_steps_per_s(0.5) if ours else 0.0
        return {
            "world": self.world_name,
            "behavior": self.cfg.behavior,
            "planner": self.cfg.planner if self.cfg.behavior == "planned" else None,
            "kept": len(kept),
            "attempts": attempts,
            "success_rate": len(kept) / attempts if attempts else 0.0,
            "failures": {reason: failures.get(reason, 0) for reason in REASONS},
            "seconds": seconds,
            "attempts_per_s_per_core": attempts / busy,
            "time_share": {k: v / busy for k, v in sorted(spent.items())},
            "physics_steps_per_s": ours,
            "raw_mj_steps_per_s": raw,
            "physics_vs_raw": ours / raw if raw else None,
            "behavior_stats": {
                "generated": mean_stats(stats),
                "source_demos": mean_stats([demo_stats(d) for d in self.demos])
                if self.demos
                else None,
            },
        }

    def close(self) -> None:
        self.executor.close()
        if self.renderer is not None:
            self.renderer.close()


# --------------------------------------------------------------- worker processes
def _start_worker(cfg: GenerateCfg) -> Generator:
    """A worker's own generator (it simulates; it neither renders nor writes)."""
    logging.getLogger("r2s2r.generate").setLevel(logging.ERROR)
    return Generator(cfg.replace(image_size=0, workers=1, ray=None))


def _simulate(worker: Generator, i: int) -> tuple[dict[str, Any], Attempt | None]:
    return worker.simulate(i)
