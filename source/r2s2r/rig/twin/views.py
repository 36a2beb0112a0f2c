"""The twin's cameras: when each one takes a frame, and where its frames are rendered.

``TwinViewsCfg`` says how: each camera at its own frame rate (a real camera delivers 30-60
frames/s, not one per control period; between its frames a read returns its last one, as the
recorder's stream sync expects), motion blur by one render and the image-space motion
(``sim/blur.py``) or by renders at the shutter's start and end, and the renders in worker
processes pipelined with the physics or in this one.

Pipelined, the views of the state after step k are rendered while the caller works and the
physics computes the next ``latency`` steps; a camera read after step k + latency returns
them. So a frame is ``latency`` control periods (by default 2, 40 ms) older than the state
the arms report, and says so: ``Frame.stamp`` is the time of the state it shows. Right after
a discontinuity (an object presented, the calibration board moved) nothing stale is shown:
the first read renders the current state. Paced to the wall clock
(``TwinRig(realtime=True)``, for a person at the keyboard or in a glove) a period never
waits for the worker: when the views of a state are not ready, the cameras skip the frames
they would have taken meanwhile (as a loaded USB camera drops them) and the physics keeps
its 50 Hz. ``TwinViewsCfg.reference()`` is the twin as it was before: every camera every
period, in this process, blurred by two renders, no latency (the calibration captures use
it).
"""

from __future__ import annotations

import contextlib
import ctypes
import math
import multiprocessing
import os
import time
import traceback
import weakref
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing import get_context
from multiprocessing.connection import Connection
from multiprocessing.context import ForkServerContext, SpawnContext
from multiprocessing.process import BaseProcess
from typing import Annotated, Protocol

import mujoco
import numpy as np
from pydantic import Field, field_validator

from r2s2r.rig.interfaces import Frame
from r2s2r.rig.twin.truth import CameraEffects
from r2s2r.sim.lean import StoredObjects
from r2s2r.sim.physics import MujocoPhysics, Physics
from r2s2r.sim.render import BLUR_MODES, SceneRenderer
from r2s2r.spec import WorldSpec
from r2s2r.spec.base import Pos, Spec

# How long close() waits for the worker to finish before it is terminated (s).
_JOIN_S = 5.0


class TwinViewsCfg(Spec):
    """How the twin's cameras are rendered: validated and frozen like every spec.

    The first fields say what the cameras are (their frame rates, their blur, their latency)
    and where their views are rendered. The render path's switches after them (from
    ``match_shadows`` on) each take one of two values outside the benchmark: the default's
    (the fast path) or ``reference()``'s (the plain path, which native cameras and the
    calibration captures use). The combinations between the two exist for ``r2s2r rig
    bench`` (``rig/bench.py``'s ``VIEW_PATHS``), which turns them on one at a time to measure
    each step of the fast path, and for the tests that check each step's picture;
    ``raster_threads=None`` is the benchmark's alone."""

    # Frames per second of every camera (the hardware preset's cameras run at 30); None: a
    # frame every control period.
    fps: Pos | None = 30.0
    # Frames per second of named cameras, instead of ``fps``: ``(("left_wrist", 15.0),
    # ("right_wrist", 15.0))`` takes the wrist views half as often as the head's (each frame
    # still stamped with the time of the state it shows).
    camera_fps: tuple[tuple[str, Pos], ...] = ()
    # Motion blur: ``flow`` (one render blurred along its motion) or ``samples`` (renders at
    # the shutter's start and end, averaged).
    blur: str = "flow"
    # Render in worker processes, pipelined with the physics (``latency`` periods later).
    worker: bool = True
    # How many worker processes share the cameras (each camera always in the same one). One
    # renders the three 256 px views one after another on one core (about 25 ms of CPU per
    # 20 ms period at 30 frames/s) while the physics leaves the other core nearly idle; one
    # per camera spreads them over every core (a worker starts in about a second, forked
    # from a server that has imported the renderer once).
    workers: Annotated[int, Field(strict=True, ge=1)] = 3
    # Control periods from the state a frame shows to the first read that returns it (its
    # transport latency: a USB camera's frames also reach the host tens of milliseconds after
    # their exposure). A worker has that long for a frame and may hold that many requests,
    # so one frame's renders overlap the next periods' physics and the other worker's renders.
    latency: Annotated[int, Field(strict=True, ge=1, le=5)] = 2
    # --- The render path's switches (see above).
    # Shadow map sized to the delivered images (at least twice their larger side) rather than
    # the world's, which is sized for native resolution.
    match_shadows: bool = True
    # Pixel density at the centre of the fisheye cameras' wide pinhole renders, relative to
    # the delivered image's (``RenderSpec.fisheye_oversample``, the world's 0.6 when None).
    # A pinhole view out to 75 degrees off axis is several times denser at its edges than
    # the fisheye image that samples it, so the world's density renders about 3.8 times the
    # delivered pixels; 0.45 renders about 2.1 times (438 x 320 rather than 584 x 426 for a
    # 256 px wrist view). Against the world's density on the same states the wrist views
    # differ by resampling (PSNR 32-36 dB before the camera effects), about as much as a
    # denser render (0.8) differs from it.
    wide_oversample: Annotated[float, Field(gt=0.1, le=4.0)] | None = 0.45
    # Draw the model's sites (small grey markers at the fingertips, the TCP and the bins, no
    # part of the cell a real camera sees): each is one more draw in every render pass.
    sites: bool = False
    # Render the arms' and hands' capsules and cylinders as meshes of the same shape and
    # tessellation (``sim/lean.py``): one draw call each instead of three, about 15 % of a
    # frame set's CPU on the software rasterizer, views above PSNR 45 dB (workers only).
    lean_geoms: bool = True
    # Draw the geoms fixed to the world (bins, belt frame, table, stands, arm bases) as one
    # mesh per colour, and leave out the objects waiting in storage, metres from every camera
    # (``sim/lean.py``'s ``merge_static`` and ``StoredObjects``): the twin's 19 static geoms
    # are drawn as 5 meshes and its 8 stored objects not at all, in every render pass, about
    # 6 % of the views' CPU (workers only; views above PSNR 45 dB).
    lean_cell: bool = True
    # With ``lean_geoms``, tessellate those meshes for the delivered size
    # (``sim/lean.py``'s ``tessellation_for``): the world's slices and stacks at 256 px, fewer
    # below in proportion to the square root of the size, so that the facets stray from the
    # curved surfaces by as many pixels as at 256 px (at 64 px 6 x 4 rather than 12 x 8, a
    # quarter of the arms' and hands' triangles, which weigh on a small render as much as its
    # pixels). The flat faces MuJoCo subdivides itself follow in the same proportion
    # (``match_quality``: the quads of a box face, the floor's grid); the objects keep the
    # world's tessellation. At 64 px a view is about 3,300 triangles rather than 4,900.
    match_detail: bool = True
    # Leave a frame unblurred when its motion over the shutter is bounded (without a render,
    # ``MotionFlow.largest_turn``) under this many delivered pixels: the blur would move no
    # edge by more than a tenth of a pixel (views above PSNR 60 dB). Small views skip more
    # often (their pixels span more of the scene): in two of the scripted operator's takes,
    # 36-76 % of the frames by camera at 64 px, 0-17 % at 256 px. 0 blurs every frame (flow
    # blur only).
    still_px: Annotated[float, Field(ge=0, allow_inf_nan=False)] = 0.1
    # Rasterizer threads of each worker on Mesa's software renderer (``LP_NUM_THREADS``, set
    # in the worker before its first context): 0 rasterizes in the worker's own thread. The
    # workers already share the cores between the cameras, and a 64 px view is one of
    # llvmpipe's 64 x 64 tiles, which only one thread can work on: the handoff to its threads
    # is pure cost there (at 64 px 4-20 % less CPU per period in interleaved one-off runs,
    # up to 20 % more real time; none at 256 px). None leaves Mesa's default (a thread per
    # core, or the environment's).
    raster_threads: Annotated[int, Field(strict=True, ge=0, le=64)] | None = 0

    @field_validator("camera_fps")
    @classmethod
    def _each_camera_once(
        cls, value: tuple[tuple[str, float], ...]
    ) -> tuple[tuple[str, float], ...]:
        """A camera has one frame rate: none is named twice."""
        names = [name for name, _ in value]
        if len(set(names)) != len(names):
            raise ValueError(f"camera_fps names a camera twice: {names}")
        return value

    @field_validator("blur")
    @classmethod
    def _known_blur(cls, value: str) -> str:
        """One of the renderer's blur modes (``sim/render.py``'s ``BLUR_MODES``)."""
        if value not in BLUR_MODES:
            raise ValueError(f"blur must be one of {BLUR_MODES}, got {value!r}")
        return value

    def fps_of(self, name: str) -> float | None:
        """Frames per second of camera ``name`` (None: one every control period)."""
        return dict(self.camera_fps).get(name, self.fps)

    @classmethod
    def reference(cls) -> TwinViewsCfg:
        """Every camera every period, in this process, two-render blur, world's shadows and
        wide-view density, sites drawn."""
        return cls(
            fps=None,
            blur="samples",
            worker=False,
            match_shadows=False,
            wide_oversample=None,
            sites=True,
            lean_geoms=False,
            lean_cell=False,
            match_detail=False,
            still_px=0.0,
        )


@dataclass(frozen=True)
class ViewState:
    """What a renderer needs of the twin's state to draw it."""

    time: float
    qpos: np.ndarray
    qvel: np.ndarray
    mocap_pos: np.ndarray
    mocap_quat: np.ndarray
    # Object sizes change between episodes (the cell scales them): sent with a discontinuity.
    geom_size: np.ndarray | None = None
    geom_rbound: np.ndarray | None = None
    geom_aabb: np.ndarray | None = None

    @classmethod
    def of(cls, physics: Physics, shapes: bool) -> ViewState:
        data, model = physics.mjdata(0), physics.model
        return cls(
            float(data.time),
            data.qpos.copy(),
            data.qvel.copy(),
            data.mocap_pos.copy(),
            data.mocap_quat.copy(),
            model.geom_size.copy() if shapes else None,
            model.geom_rbound.copy() if shapes else None,
            model.geom_aabb.copy() if shapes else None,
        )

    def write(self, physics: Physics) -> mujoco.MjData:
        """Put this state into ``physics`` (one world); its data, kinematics computed."""
        model, data = physics.model, physics.mjdata(0)
        if self.geom_size is not None:
            # A lean render model may have geoms after the simulated model's (``merge_static``).
            n = len(self.geom_size)
            # Planes keep the render model's: their third size is only the spacing of the
            # grid they are drawn in, which a lean model sets for its size (``match_quality``).
            solid = model.geom_type[:n] != int(mujoco.mjtGeom.mjGEOM_PLANE)
            model.geom_size[:n][solid] = self.geom_size[solid]
            model.geom_rbound[:n] = self.geom_rbound
            model.geom_aabb[:n] = self.geom_aabb
        data.time = self.time
        data.qpos[:], data.qvel[:] = self.qpos, self.qvel
        data.mocap_pos[:], data.mocap_quat[:] = self.mocap_pos, self.mocap_quat
        return physics.mjdata(0)


def shadow_map_for(size: tuple[int, int], world_map: int) -> int:
    """The shadow map for images of ``size``: the power of two at least twice their larger
    side (at least 128), never above the world's ``world_map``."""
    need = max(128, 2 ** math.ceil(math.log2(2 * max(size))))
    return min(world_map, need)


class _Views:
    """Renders views and applies the camera effects: in this process, or in the worker."""

    def __init__(
        self,
        physics: Physics,
        world: WorldSpec,
        effects: dict[str, CameraEffects],
        cfg: TwinViewsCfg,
        native: bool,
        cameras: tuple[str, ...] | None = None,
        depth: bool = True,
        skip_stored: bool = False,
    ) -> None:
        """``cfg``: its blur, sites and still threshold; ``skip_stored``: leave out the objects
        waiting in storage (``StoredObjects``)."""
        self.renderer = SceneRenderer(
            physics, world, depth, native, cfg.blur, cfg.sites, cameras, cfg.still_px
        )
        self.physics, self.effects = physics, effects
        self.stored = StoredObjects(physics.model) if skip_stored else None

    def render(self, names: tuple[str, ...], rng: np.random.Generator) -> dict[str, np.ndarray]:
        """The views ``names`` of the current state, their noise drawn from ``rng``."""
        data = self.physics.mjdata(0)
        if self.stored is not None:
            self.stored.hide(self.physics.model, data.qpos)
        views = self.renderer.render_cameras(data, names)
        return {n: self.effects[n].apply(img, rng) for n, img in views.items()}


def _serve(conn: Connection, skip_below: ctypes.c_longlong) -> None:
    """The worker: take its scene (model, world, effects, seed, views config, its cameras)
    from ``conn``, then render (state, camera names, serial number) requests until ``None``
    arrives. A request numbered below ``skip_below`` (a shared integer the twin raises when
    its state jumps) is answered without a render."""
    views = None
    try:
        model, world, effects, seed, cfg, cameras = conn.recv()
        if cfg.raster_threads is not None:
            # Read by Mesa's software renderer when this process makes its first context.
            os.environ["LP_NUM_THREADS"] = str(cfg.raster_threads)
        physics = MujocoPhysics(model)
        # Only its own cameras get render contexts (each takes a fifth of a second to make).
        views = _Views(physics, world, effects, cfg, False, cameras, False, cfg.lean_cell)
        while True:
            request = conn.recv()
            if request is None:
                break
            state, names, serial = request
            if serial < skip_below.value:
                # Asked before the twin's state jumped: nobody reads these views.
                conn.send(("skipped", None))
                continue
            state.write(physics)
            # A frame's noise depends on the worker's seed and the request's number alone, so
            # which stale requests were skipped (a matter of timing) changes no later frame.
            images = views.render(names, np.random.default_rng((seed, serial)))
            conn.send(("ok", (images, time.process_time())))
    except (EOFError, BrokenPipeError, ConnectionResetError):
        pass  # The twin went away without closing: nothing to answer.
    except Exception:  # noqa: BLE001 - any failure goes back to the twin, which raises it.
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            conn.send(("error", traceback.format_exc()))
    finally:
        if views is not None:
            views.renderer.close()


def _context() -> ForkServerContext | SpawnContext:
    """Where view workers start: never a fork of a process that may hold OpenGL contexts.
    Where the platform has it, a fork server that has imported this module once (a worker
    then starts without importing mujoco, OpenCV and r2s2r again, which is most of its start
    time); else a fresh interpreter."""
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return get_context("spawn")
    ctx = get_context("forkserver")
    # Read when the fork server starts (once per process); harmless afterwards.
    ctx.set_forkserver_preload([__name__])
    return ctx


def _stop(process: BaseProcess, conn: Connection) -> None:
    """End the worker: ask, hang up, wait, then terminate (also run when a twin is
    collected). Hanging up before waiting matters: a worker with views still out is blocked
    sending them (two frame sets are more than the connection's buffer holds) and would
    never read the request to stop; with the connection closed its send fails and it ends."""
    with contextlib.suppress(BrokenPipeError, OSError):
        conn.send(None)
    conn.close()
    process.join(_JOIN_S)
    if process.is_alive():
        process.terminate()
        process.join(_JOIN_S)


@dataclass(frozen=True)
class _Request:
    """Views asked of a worker: of the state at ``time``, shown from period ``due`` on."""

    time: float
    due: int


class ViewWorker:
    """A process that renders the twin's views of the states it is sent, in order; several
    requests may be out at once (the pipe queues them)."""

    def __init__(
        self,
        model: mujoco.MjModel,
        world: WorldSpec,
        effects: dict[str, CameraEffects],
        seed: int,
        cfg: TwinViewsCfg,
        cameras: tuple[str, ...] | None = None,
    ) -> None:
        """``cfg``: how it renders (its blur, sites, still threshold; with ``lean_cell`` it
        leaves out the objects waiting in storage); ``cameras``: the ones it will be asked
        for (default all)."""
        ctx = _context()
        self._conn, child = ctx.Pipe()
        # Requests numbered below it are skipped (``skip_pending``); in shared memory, so the
        # worker sees a raise before it reads the requests already queued.
        self._skip_below = ctx.RawValue("q", 0)
        self._serial = 0
        # The scene goes over the pipe, not as the process's arguments: multiprocessing
        # writes those to the new process while it still holds the pipe's other end, so a
        # child that dies on start (a script without a main guard, or read from stdin) would
        # leave that write, and the twin, waiting forever.
        self.process = ctx.Process(
            target=_serve, args=(child, self._skip_below), name="twin-views", daemon=True
        )
        self.process.start()
        child.close()
        try:
            self._conn.send((model, world, effects, seed, cfg, cameras))
        except (BrokenPipeError, ConnectionResetError) as err:
            self.process.join(_JOIN_S)
            raise RuntimeError(
                f"the twin's view worker ended on start (exit code {self.process.exitcode}); "
                "it is a spawned process, which imports the script that made the twin: the "
                "script must be a file whose main code sits under "
                '`if __name__ == "__main__":`'
            ) from err
        # The requests out, oldest first.
        self.pending: deque[_Request] = deque()
        # The worker's CPU time (s, all its threads) when it finished its latest views.
        self.cpu_s = 0.0
        # How many requests it skipped (``skip_pending``).
        self.skipped = 0
        self._finalizer = weakref.finalize(self, _stop, self.process, self._conn)

    def submit(self, state: ViewState, names: tuple[str, ...], time: float, due: int) -> None:
        """Ask for the views ``names`` of ``state`` (the twin's ``time``), to be shown from
        period ``due`` on."""
        self._conn.send((state, names, self._serial))
        self._serial += 1
        self.pending.append(_Request(time, due))

    def skip_pending(self) -> None:
        """Have the worker skip the requests out that it has not begun: they are still
        answered, in order, without views."""
        self._skip_below.value = self._serial

    def ready(self) -> bool:
        """Whether the oldest request's views are done (or nothing is out)."""
        return not self.pending or self._conn.poll()

    def collect(self) -> tuple[float, dict[str, np.ndarray]]:
        """(time of its state, views) of the oldest request out (waits for them)."""
        request = self.pending.popleft()
        try:
            kind, payload = self._conn.recv()
        except EOFError:
            raise RuntimeError(
                f"the twin's view worker ended (exit code {self.process.exitcode})"
            ) from None
        if kind == "error":
            raise RuntimeError(f"the twin's view worker failed:\n{payload}")
        if kind == "skipped":
            self.skipped += 1
            return request.time, {}
        views: dict[str, np.ndarray]
        views, self.cpu_s = payload
        return request.time, views

    def close(self) -> None:
        self._finalizer()


def share(names: tuple[str, ...], workers: int, k: int) -> tuple[str, ...]:
    """The cameras of ``names`` that worker ``k`` of ``workers`` renders (every n-th)."""
    return names[k::workers]


class ViewWorkers:
    """The twin's view processes: each camera is always rendered by the same one, a request's
    cameras side by side, and each process works through its requests in order."""

    def __init__(self, members: list[ViewWorker], names: tuple[str, ...]) -> None:
        """``members[k]`` renders ``share(names, len(members), k)``."""
        self.members = members
        self._of = {
            name: w for k, w in enumerate(members) for name in share(names, len(members), k)
        }
        # The members that have the object sizes of the current episode.
        self._shaped: set[int] = set()

    @property
    def cpu_s(self) -> float:
        """The workers' CPU time (s, all their threads) when they finished their latest views."""
        return sum(w.cpu_s for w in self.members)

    def backlog(self, name: str) -> int:
        """How many requests are out at the worker of camera ``name``."""
        return len(self._of[name].pending)

    def submit(self, physics: Physics, names: tuple[str, ...], time: float, due: int) -> None:
        """Send the views ``names`` of ``physics``' state (at ``time``) to their workers, to be
        shown from period ``due`` on."""
        states: dict[bool, ViewState] = {}
        for worker in self.members:
            mine = tuple(n for n in names if self._of[n] is worker)
            if not mine:
                continue
            shapes = id(worker) not in self._shaped
            if shapes not in states:
                states[shapes] = ViewState.of(physics, shapes=shapes)
            worker.submit(states[shapes], mine, time, due)
            self._shaped.add(id(worker))

    def collect(self, period: int | None, wait: bool) -> list[tuple[float, dict[str, np.ndarray]]]:
        """(time, views) of the requests due by ``period`` (None: every request out), oldest
        first per worker; with ``wait`` off only those already done."""
        out = []
        for worker in self.members:
            while worker.pending and (period is None or worker.pending[0].due <= period):
                if not wait and not worker.ready():
                    break
                out.append(worker.collect())
        return out

    def restart(self) -> None:
        """Drop every request out (those not begun are skipped, not rendered); the next ones
        carry the object sizes again."""
        for worker in self.members:
            worker.skip_pending()
        self.collect(None, wait=True)
        self._shaped.clear()

    def close(self) -> None:
        for worker in self.members:
            worker.close()


@dataclass(frozen=True)
class ViewScene:
    """What the twin's views show, fixed when the twin is built (``build.py``)."""

    # How the views are made.
    cfg: TwinViewsCfg
    # The true world as the views draw it, and each camera's effects (both hidden).
    world: WorldSpec
    effects: dict[str, CameraEffects]
    # The cameras.
    names: tuple[str, ...]
    # The cameras deliver their own resolution rather than the world's observation size.
    native: bool
    # The twin's control period (s): a camera without a frame rate takes a frame each one.
    period_s: float
    # Seeds the views' noise (each worker process draws from a stream of its own).
    seed: int
    # Makes the model the worker processes render, when they start (the physics' own when
    # None): the same state layout, drawn with fewer calls (``TwinViewsCfg.lean_geoms``,
    # ``lean_cell``).
    render_model: Callable[[], mujoco.MjModel] | None = None


class ViewClock(Protocol):
    """What the views ask of their twin as it runs."""

    def now(self) -> float:
        """The twin's time, which stamps the frames."""
        ...

    def paced(self) -> bool:
        """Whether the twin keeps to the wall clock: then a period never waits for a view."""
        ...

    def drops(self, camera: str) -> bool:
        """Whether ``camera`` drops the frame it is due to take now (the imperfect twin's):
        it delivers its last frame again, and takes the next one on schedule."""
        ...


class TwinViews:
    """The twin's three cameras under one ``TwinViewsCfg``: the frames a read returns."""

    def __init__(self, scene: ViewScene, physics: Physics, clock: ViewClock) -> None:
        """The views of ``scene``, drawn from ``physics``' state at ``clock``'s times."""
        self.scene, self.physics, self.clock = scene, physics, clock
        self.cfg, self.world, self.effects = scene.cfg, scene.world, scene.effects
        self.native, self.names, self.period_s = scene.native, scene.names, scene.period_s
        self.render_model = scene.render_model
        unknown = sorted({name for name, _ in self.cfg.camera_fps} - set(self.names))
        if unknown:
            raise ValueError(f"camera_fps names cameras the twin does not have: {unknown}")
        self._seed = scene.seed
        self._rng = np.random.default_rng(scene.seed)
        self._local: _Views | None = None
        self.worker: ViewWorkers | None = None
        # The frames a read returns now, and each camera's latest frame number taken.
        self._held: dict[str, Frame] = {}
        self._taken: dict[str, int] = {}

    # -------------------------------------------------------------- schedule
    def _number(self, name: str, t: float) -> int:
        """The number of the frame camera ``name`` takes at or before time ``t``."""
        fps = self.cfg.fps_of(name)
        if fps is None:
            return int(round(t / self.period_s))
        return math.floor(t * fps + 1e-6)

    def _due(self, t: float) -> tuple[str, ...]:
        due = tuple(
            name for name in self.names if self._taken.get(name, -1) < self._number(name, t)
        )
        # Only a stream read frame after frame drops one: the last frame is then one frame
        # old, never the view from before a pause (a capture after the arm settled).
        dropped = tuple(
            name
            for name in due
            if name in self._held
            and self._taken.get(name) == self._number(name, t) - 1
            and self.clock.drops(name)
        )
        self._mark(dropped, t)
        return tuple(name for name in due if name not in dropped)

    def _mark(self, names: tuple[str, ...], t: float) -> None:
        for name in names:
            self._taken[name] = self._number(name, t)

    # ---------------------------------------------------------------- frames
    def _period(self, t: float) -> int:
        return int(round(t / self.period_s))

    def read(self, name: str) -> Frame:
        """The camera's frame now (rendering what must be rendered first)."""
        if self.cfg.worker:
            if name not in self._held and self.worker is not None:
                self._absorb(self.worker.collect(None, wait=True))
            if name not in self._held:
                self._render_now(self.names)
            return self._held[name]
        t = self.clock.now()
        due = self._due(t)
        if name in due or name not in self._held:
            self._render_now(due or (name,))
        return self._held[name]

    def depth(self) -> np.ndarray:
        """Head depth (H, W) float32 of the current state, rendered in this process."""
        return self.local().renderer.render_depth()[0]

    def after_step(self) -> None:
        """The physics advanced one period: take the views due now (``cfg.latency`` periods
        after the state they show) and send the views this state's due frames need (only
        once the cameras are being read)."""
        pool = self.worker
        if pool is None:
            return
        t = self.clock.now()
        period = self._period(t)
        # Paced to the wall clock a period never waits: views not done yet come later, and
        # a camera whose worker is still behind skips the frames it would take meanwhile.
        paced = self.clock.paced()
        self._absorb(pool.collect(period, wait=not paced))
        due = self._due(t)
        if paced:
            due = tuple(n for n in due if pool.backlog(n) < self.cfg.latency)
        if due:
            pool.submit(self.physics, due, t, period + self.cfg.latency)
            self._mark(due, t)

    def restart(self) -> None:
        """The state jumped (an episode started, a prop moved): forget every frame; the next
        read shows the state as it is now."""
        if self.worker is not None:
            self.worker.restart()
        self._held.clear()
        self._taken.clear()

    def _absorb(self, done: list[tuple[float, dict[str, np.ndarray]]]) -> None:
        for stamp, views in done:
            for cam, image in views.items():
                self._held[cam] = Frame(stamp, image)

    def _render_now(self, names: tuple[str, ...]) -> None:
        """Render ``names`` of the current state and wait for them."""
        t = self.clock.now()
        if self.cfg.worker:
            pool = self._start()
            pool.submit(self.physics, names, t, self._period(t))
            self._mark(names, t)
            self._absorb(pool.collect(None, wait=True))
            return
        for cam, image in self.local().render(names, self._rng).items():
            self._held[cam] = Frame(t, image)
        self._mark(names, t)

    def local(self) -> _Views:
        if self._local is None:
            self._local = _Views(self.physics, self.world, self.effects, self.cfg, self.native)
        return self._local

    def _start(self) -> ViewWorkers:
        if self.worker is None:
            model = self.physics.model if self.render_model is None else self.render_model()
            world, effects, seed = self.world, self.effects, self._seed
            # Each worker draws its cameras' noise from a stream of its own.
            n = self.cfg.workers
            members = [
                ViewWorker(
                    model, world, effects, seed + 7919 * k, self.cfg, share(self.names, n, k)
                )
                for k in range(n)
            ]
            self.worker = ViewWorkers(members, self.names)
        return self.worker

    def close(self) -> None:
        if self.worker is not None:
            self.worker.close()
            self.worker = None
        if self._local is not None:
            self._local.renderer.close()
            self._local = None
        self._held.clear()
        self._taken.clear()


__all__ = [
    "TwinViews",
    "TwinViewsCfg",
    "ViewClock",
    "ViewScene",
    "ViewState",
    "ViewWorker",
    "ViewWorkers",
    "shadow_map_for",
]
