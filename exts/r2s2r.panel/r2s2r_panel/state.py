"""The Isaac Sim panel's state and actions, without Kit (the omni.ui layer in
``extension.py`` only draws them and forwards clicks).

- World: choose a world variant (a registered name or a WorldSpec YAML, e.g. the
  ``grounded.yaml`` world grounding wrote) and a condition; load it and list its parameters
  next to the nominal world's under the same condition.
- Generation: ``tasks/generate.py`` headless in its own process, followed through the attempt
  log it writes (``DIR/generation/attempts.jsonl``); cancelling stops the process, and starting
  the same job again resumes it.
- Episodes: a dataset's episodes (length, success, object, belt speed, world, behavior) and a
  frame of any camera.
- Render: ``tasks/render_isaac.py`` on a dataset (Isaac Sim RTX, or MuJoCo), followed through
  the episodes it has written.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from r2s2r.data import Dataset
from r2s2r.spec import SpecError, WorldSpec
from r2s2r.spec.conditions import CONDITIONS, apply_condition
from r2s2r.spec.worlds import WORLDS, load_task, load_world

# The checkout the panel ships in: exts/r2s2r.panel/r2s2r_panel/state.py -> the repository.
REPO = Path(__file__).resolve().parents[3]
# Lines of a job's log shown in the panel.
LOG_LINES = 8


@dataclass(frozen=True)
class ParameterRow:
    """One WorldSpec parameter: its dotted key, the nominal value, the chosen world's."""

    key: str
    nominal: Any
    value: Any

    @property
    def differs(self) -> bool:
        if isinstance(self.value, float) and isinstance(self.nominal, float):
            return abs(self.value - self.nominal) > 1e-12 * max(1.0, abs(self.nominal))
        return bool(self.value != self.nominal)


def flatten(data: Any, prefix: str = "") -> dict[str, Any]:
    """Nested dicts and lists as {dotted.key: leaf}."""
    if isinstance(data, dict):
        out: dict[str, Any] = {}
        for k, v in data.items():
            out.update(flatten(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    if isinstance(data, list) and any(isinstance(v, dict | list) for v in data):
        out = {}
        for i, v in enumerate(data):
            out.update(flatten(v, f"{prefix}[{i}]"))
        return out
    return {prefix: data}


def world_parameters(world: WorldSpec, nominal: WorldSpec) -> list[ParameterRow]:
    """Every parameter of ``world`` beside ``nominal``'s (keys of either, sorted)."""
    mine = flatten(world.model_dump(mode="json"))
    theirs = flatten(nominal.model_dump(mode="json"))
    return [
        ParameterRow(k, theirs.get(k), mine.get(k)) for k in sorted(mine.keys() | theirs.keys())
    ]


@dataclass(frozen=True)
class JobStatus:
    """Where a job stands: its progress (``total`` None: unknown), whether its process still
    runs, how it ended, and the end of its log."""

    kind: str
    done: int
    total: int | None
    message: str
    running: bool
    returncode: int | None
    log_tail: tuple[str, ...]

    @property
    def fraction(self) -> float:
        return min(1.0, self.done / self.total) if self.total else 0.0

    @property
    def failed(self) -> bool:
        return self.returncode not in (None, 0)


Progress = tuple[int, int | None, str]


class Job:
    """A task script in its own process, its output in ``log``, its progress read from the
    files it writes (``progress()``: done, total, message)."""

    def __init__(
        self, kind: str, command: list[str], log: Path, progress: Callable[[], Progress]
    ) -> None:
        self.kind, self.command, self.log = kind, command, log
        self._progress = progress
        log.parent.mkdir(parents=True, exist_ok=True)
        with log.open("w") as out:
            self.process = subprocess.Popen(
                command, cwd=REPO, stdout=out, stderr=subprocess.STDOUT, text=True
            )

    def status(self) -> JobStatus:
        done, total, message = self._progress()
        code = self.process.poll()
        lines = self.log.read_text(errors="replace").replace("\r", "\n").splitlines()
        tail = tuple(line for line in lines if line.strip())[-LOG_LINES:]
        return JobStatus(self.kind, done, total, message, code is None, code, tail)

    def cancel(self) -> None:
        """Stop the process (what it saved stays; the same job started again resumes)."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()

    def wait(self, timeout: float | None = None) -> JobStatus:
        self.process.wait(timeout)
        return self.status()


def generation_progress(out: Path, episodes: int) -> Progress:
    """(kept, episodes, "attempted=N") from a generation job's attempt log."""
    log = out / "generation" / "attempts.jsonl"
    kept = attempts = 0
    if log.is_file():
        for line in log.read_text().splitlines():
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue  # The line being written.
            attempts += 1
            kept += bool(record.get("kept"))
    return kept, episodes, f"attempted={attempts}"


def dataset_episodes(root: Path) -> int:
    """Episodes saved in a dataset so far (0 while it does not exist yet)."""
    try:
        with Dataset(root) as ds:
            return ds.num_episodes
    except (FileNotFoundError, ValueError):
        return 0


@dataclass(frozen=True)
class EpisodeRow:
    index: int
    length: int
    seconds: float
    success: bool
    task: str
    objects: tuple[str, ...]
    belt_speed: float | None
    world: str | None
    behavior: str | None


@dataclass
class PanelState:
    """What the panel shows and does; see the module docstring."""

    python: str = sys.executable
    world: str = "nominal"
    condition: str = "nominal"
    loaded: WorldSpec | None = None
    rows: list[ParameterRow] = field(default_factory=list)
    jobs: dict[str, Job] = field(default_factory=dict)
    error: str = ""

    # ------------------------------------------------------------------ world
    @staticmethod
    def world_choices() -> list[str]:
        return list(WORLDS.names())

    @staticmethod
    def condition_choices() -> list[str]:
        return list(CONDITIONS.names())

    def select(self, world: str, condition: str) -> None:
        """Choose a world (registered name or WorldSpec YAML path) and a condition."""
        if condition not in CONDITIONS:
            raise SpecError(CONDITIONS.unknown(condition))
        if world not in WORLDS and not Path(world).is_file():
            raise SpecError(f"{WORLDS.unknown(world)}; or give the path of a WorldSpec YAML")
        self.world, self.condition = world, condition
        self.loaded, self.rows = None, []

    def load_world(self) -> list[ParameterRow]:
        """Load the chosen world under the chosen condition; its parameters beside the
        nominal world's under the same condition (so only grounding differs)."""
        task = load_task("pick_sort")
        _, world = apply_condition(self.condition, task, load_world(self.world))
        _, nominal = apply_condition(self.condition, task, load_world("nominal"))
        self.loaded, self.rows = world, world_parameters(world, nominal)
        return self.rows

    def differences(self) -> list[ParameterRow]:
        return [r for r in self.rows if r.differs]

    def world_file(self, folder: Path) -> Path:
        """The loaded world (condition applied) as a WorldSpec YAML in ``folder``, for jobs."""
        if self.loaded is None:
            self.load_world()
        assert self.loaded is not None
        path = folder / f"world_{Path(self.world).stem}_{self.condition}.yaml"
        path.parent.mkdir(parents=True, exist_ok=True)
        self.loaded.save(path)
        return path

    # ------------------------------------------------------------------ generation
    def generation_command(
        self,
        out: Path,
        episodes: int,
        behavior: str = "planned",
        source: Path | None = None,
        image_size: int = 0,
        seed: int = 0,
        max_attempts: int | None = None,
    ) -> list[str]:
        """``tasks/generate.py`` headless in the chosen world (with its condition)."""
        world = self.world_file(out.parent / f"{out.name}.panel")
        cmd = [self.python, str(REPO / "tasks" / "generate.py"), "--headless", "--out", str(out)]
        cmd += ["--world", str(world), "--behavior", behavior, "--episodes", str(episodes)]
        cmd += ["--image-size", str(image_size), "--seed", str(seed)]
        if source is not None:
            cmd += ["--source", str(source)]
        if max_attempts is not None:
            cmd += ["--max-attempts", str(max_attempts)]
        return cmd

    def start_generation(self, out: Path, episodes: int, **options: Any) -> Job:
        """Launch a headless generation job; ``status("generate")`` follows it."""
        cmd = self.generation_command(out, episodes, **options)
        log = out.parent / f"{out.name}.panel" / "generate.log"
        return self._start("generate", cmd, log, lambda: generation_progress(out, episodes))

    # ------------------------------------------------------------------ episodes
    @staticmethod
    def episodes(root: Path) -> list[EpisodeRow]:
        """The episodes of dataset ``root``."""
        with Dataset(root) as ds:
            return [
                EpisodeRow(
                    index=int(e["episode_index"]),
                    length=int(e["length"]),
                    seconds=int(e["length"]) / ds.fps,
                    success=bool(e["success"]),
                    task=str(e["tasks"][0]),
                    objects=tuple(e.get("object_ids") or ()),
                    belt_speed=e.get("belt_speed"),
                    world=e.get("world"),
                    behavior=e.get("behavior"),
                )
                for e in ds.episodes
            ]

    @staticmethod
    def preview(root: Path, episode: int, camera: str = "head", frame: int = 0) -> np.ndarray:
        """Frame ``frame`` of ``camera`` in ``episode``: (H, W, 3) uint8."""
        with Dataset(root) as ds:
            if not 0 <= episode < ds.num_episodes:
                raise ValueError(f"episode {episode} is not in {root} ({ds.num_episodes})")
            row = ds.episode(episode)
            if not 0 <= frame < row["length"]:
                raise ValueError(f"frame {frame} is not in episode {episode} ({row['length']})")
            names = [c.name for c in ds.cameras]
            if camera not in names:
                raise ValueError(f"{root} has no camera {camera!r} (it has {names})")
            return ds.image(f"observation.images.{camera}", int(row["dataset_from_index"]) + frame)

    # ------------------------------------------------------------------ render
    def render_command(
        self,
        source: Path,
        out: Path,
        usd: Path | None,
        image_size: int = 256,
        renderer: str = "isaac",
    ) -> list[str]:
        """``tasks/render_isaac.py`` on ``source`` in the chosen world's cameras."""
        world = self.world_file(out.parent / f"{out.name}.panel")
        cmd = [self.python, str(REPO / "tasks" / "render_isaac.py"), str(source), "--out", str(out)]
        cmd += ["--world", str(world), "--image-size", str(image_size), "--renderer", renderer]
        if usd is not None:
            cmd += ["--usd", str(usd)]
        return [*cmd, "--headless", "--enable_cameras"]

    def start_render(self, source: Path, out: Path, usd: Path | None, **options: Any) -> Job:
        """Launch a render job; ``status("render")`` follows it by episodes written."""
        cmd = self.render_command(source, out, usd, **options)
        total = dataset_episodes(source)
        log = out.parent / f"{out.name}.panel" / "render.log"
        return self._start("render", cmd, log, lambda: (dataset_episodes(out), total, ""))

    # ------------------------------------------------------------------ jobs
    def _start(self, kind: str, cmd: list[str], log: Path, progress: Callable[[], Progress]) -> Job:
        running = self.jobs.get(kind)
        if running is not None and running.process.poll() is None:
            raise RuntimeError(f"a {kind} job is running: cancel it or wait for it to end")
        job = self.jobs[kind] = Job(kind, cmd, log, progress)
        return job

    def status(self, kind: str) -> JobStatus | None:
        job = self.jobs.get(kind)
        return job.status() if job is not None else None

    def cancel(self, kind: str) -> None:
        job = self.jobs.get(kind)
        if job is not None:
            job.cancel()

    def shutdown(self) -> None:
        """Stop every running job (the panel closes)."""
        for job in self.jobs.values():
            job.cancel()
