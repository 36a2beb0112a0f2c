"""The twin's config and its builder: ``TwinCfg`` says which twin, ``build_parts`` makes what
``TwinRig`` runs (the Cfg/Build pair of mjlab and Isaac Lab).

``TwinRig.from_cfg(cfg)`` builds the twin a ``TwinCfg`` describes; ``TwinRig(seed=..., ...)``
takes the same fields as keywords. The builder draws the hidden cell (``draw_truth``), so this
module is, with ``rig.py``, the only one outside evaluation and the benches that holds the
truth (``tests/test_rig.py`` checks it).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import mujoco
import numpy as np

from r2s2r.rig.twin.board import BOARD_PLACEMENTS, TWIN_BOARD, add_board, board_placements
from r2s2r.rig.twin.imperfect import Imperfections
from r2s2r.rig.twin.truth import (
    CameraEffects,
    imperfect_optics,
    true_camera_effects,
    true_world,
)
from r2s2r.rig.twin.views import TwinViewsCfg, ViewScene, shadow_map_for
from r2s2r.sim.embodiment import Embodiment
from r2s2r.sim.lean import match_quality, merge_static, mesh_primitives
from r2s2r.sim.scene import OBJECT_PREFIX, Scene, build_scene
from r2s2r.spec import TaskSpec, WorldSpec
from r2s2r.spec.base import NonNegInt, Spec
from r2s2r.spec.conditions import apply_condition
from r2s2r.spec.world import CAMERA_NAMES
from r2s2r.spec.worlds import load_task, load_world


class TwinCfg(Spec):
    """Which twin to build: its seeds, its nominal world and task, the condition it runs
    under, its flaws and how its cameras' views are made."""

    # Draws the episodes (which object, where), the readings' noise, the views' noise and the
    # board's placements; and the hidden cell too, unless ``cell`` is set.
    seed: NonNegInt = 0
    # Draws the hidden cell (its truth and imperfections) apart from ``seed``: one cell, many
    # episodes, as a study records, grounds and evaluates in one real cell. None: the seed.
    cell: NonNegInt | None = None
    # The nominal (CAD) world the truth is drawn around: a preset's name, a YAML file or a
    # spec. Its observation size is the size of the views the cameras deliver.
    world: str | Path | WorldSpec = "nominal"
    # The task: a preset's name, a YAML file or a spec.
    task: str | Path | TaskSpec = "pick_sort"
    # The condition (``r2s2r.spec.conditions``) that shifts the task and the hidden world.
    condition: str = "nominal"
    # Pace ``step()`` to the wall clock (for a person teleoperating the twin); else it runs
    # as fast as the machine allows.
    realtime: bool = False
    # The cameras deliver their own resolution (as the calibration captures want) rather
    # than the world's observation size.
    native_cameras: bool = False
    # Only the hidden world's parameters differ from nominal: no imperfections
    # (``imperfect.py``), for checks that need an exact answer.
    ideal: bool = False
    # The imperfections, instead of the ones the cell draws (the optics stay drawn); ignored
    # by the ideal twin.
    imperfections: Imperfections | None = None
    # How the cameras' views are made. None: ``TwinViewsCfg()``, or for native cameras
    # ``TwinViewsCfg.reference()`` (every period, in this process, no latency).
    views: TwinViewsCfg | None = None

    @property
    def cell_seed(self) -> int:
        """The seed of the hidden cell: ``cell``, or ``seed`` when that is None."""
        return self.seed if self.cell is None else self.cell

    @property
    def views_cfg(self) -> TwinViewsCfg:
        """``views``, or the default for the cameras' resolution when it is None."""
        if self.views is not None:
            return self.views
        return TwinViewsCfg.reference() if self.native_cameras else TwinViewsCfg()


@dataclass(frozen=True)
class TwinTruth:
    """Everything the twin hides: its world, its cameras' effects and the imperfections
    no grounded world represents (``imperfect.py``; none for the ideal twin)."""

    world: WorldSpec
    camera_effects: dict[str, CameraEffects]
    imperfections: Imperfections = Imperfections()


def draw_truth(
    cfg: TwinCfg, nominal: WorldSpec, task: TaskSpec, robot: Embodiment
) -> tuple[TaskSpec, TwinTruth]:
    """The hidden cell of ``cfg`` (the true world around ``nominal``, whose robot is
    ``robot``, its cameras' effects and its flaws), shifted with ``task`` by its condition:
    the shifted task and the truth.

    The imperfections draw from streams of their own, so that the ideal twin of a cell is the
    same cell as before they existed."""
    rng = np.random.default_rng(cfg.cell_seed)
    task, world = apply_condition(cfg.condition, task, true_world(nominal, rng, robot.hand_dof))
    effects = true_camera_effects(rng, list(CAMERA_NAMES))
    if cfg.ideal:
        return task, TwinTruth(world, effects, Imperfections.none())
    flaws = cfg.imperfections
    if flaws is None:
        objects = [o.name for o in task.objects]
        flaws = Imperfections.draw(np.random.default_rng([cfg.cell_seed, 7]), robot, objects)
    effects = imperfect_optics(effects, world, np.random.default_rng([cfg.cell_seed, 8]))
    return task, TwinTruth(world, effects, flaws)


def drawn_world(world: WorldSpec, views: TwinViewsCfg, native: bool) -> WorldSpec:
    """``world`` as the views draw it: its shadow map sized to the delivered images and its
    fisheye wide views at the views' density, as ``views`` asks (never for ``native``
    cameras, which keep the world's)."""
    if native:
        return world
    render: dict[str, object] = {}
    if views.match_shadows:
        render["shadow_map"] = shadow_map_for(world.render.obs_size, world.render.shadow_map)
    if views.wide_oversample is not None:
        render["fisheye_oversample"] = views.wide_oversample
    return world.replace(render=render) if render else world


def is_object(body: str) -> bool:
    """Whether ``body`` is one of the task's objects (the bodies ``mesh_primitives`` skips)."""
    return body.startswith(OBJECT_PREFIX)


@dataclass(frozen=True)
class CellEdits:
    """What the twin's model has beyond the task's scene (an ``extras`` of ``build_scene``):
    the calibration board and the flaws' edits. With ``lean``, also what the view workers'
    leaner model leaves out (``TwinViewsCfg.lean_geoms``, ``lean_cell``), its primitives
    tessellated for ``detail`` px views if that is set (``match_detail``)."""

    flaws: Imperfections
    robot: Embodiment
    lean: TwinViewsCfg | None = None
    detail: int | None = None

    def __call__(self, spec: mujoco.MjSpec) -> None:
        add_board(spec, TWIN_BOARD)
        self.flaws.edit(spec, self.robot)
        if self.lean is None:
            return
        if self.lean.lean_geoms:
            mesh_primitives(spec, is_object, self.detail)
        if self.lean.lean_cell:
            merge_static(spec)
        if self.detail is not None:
            match_quality(spec, self.detail)


@dataclass(frozen=True)
class RenderModel:
    """Compiles the model the view workers draw, when they start (a twin that is never looked
    at does not compile it): the same cell and state layout, edited by ``edits``."""

    task: TaskSpec
    world: WorldSpec
    edits: CellEdits

    def __call__(self) -> mujoco.MjModel:
        return build_scene(self.task, self.world, self.edits, action_mode="tcp").model


@dataclass(frozen=True)
class TwinParts:
    """What ``build_parts`` makes of a ``TwinCfg``: what ``TwinRig`` runs."""

    cfg: TwinCfg
    # The nominal world, and the task as the condition shifts it.
    nominal: WorldSpec
    task: TaskSpec
    truth: TwinTruth
    # The compiled cell: the true world with the board and the flaws (``CellEdits``).
    scene: Scene
    # What the cameras' views show: the true world as they draw it (``drawn_world``), the
    # cameras' effects, and the lean model their workers draw, if any (``RenderModel``).
    views: ViewScene
    # The board's pose (7,) at each placement number (``TwinPresenter.place_board``).
    board_poses: list[np.ndarray]


def build_parts(cfg: TwinCfg) -> TwinParts:
    """Draw the hidden cell of ``cfg`` and compile it (``TwinRig.from_cfg`` runs them)."""
    views, native = cfg.views_cfg, cfg.native_cameras
    nominal, task = load_world(cfg.world), load_task(cfg.task)
    # The truth draws per-joint hand gains, so it needs the nominal cell's hand.
    robot = build_scene(task, nominal).embodiment
    task, truth = draw_truth(cfg, nominal, task, robot)
    drawn = drawn_world(truth.world, views, native)
    scene = build_scene(task, drawn, CellEdits(truth.imperfections, robot), action_mode="tcp")
    render_model = None
    if views.worker and (views.lean_geoms or views.lean_cell):
        detail = max(drawn.render.obs_size) if views.match_detail and not native else None
        lean = CellEdits(truth.imperfections, robot, views, detail)
        render_model = RenderModel(task, drawn, lean)
    period_s = 1.0 / task.control_hz
    shown = ViewScene(
        views,
        drawn,
        truth.camera_effects,
        CAMERA_NAMES,
        native,
        period_s,
        cfg.seed + 2,
        render_model,
    )
    rng = np.random.default_rng(cfg.seed + 3)
    belt_top = truth.world.layout.belt.pos[2]
    board_poses = board_placements(TWIN_BOARD, rng, belt_top, BOARD_PLACEMENTS)
    return TwinParts(cfg, nominal, task, truth, scene, shown, board_poses)
