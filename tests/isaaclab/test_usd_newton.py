"""Newton's own USD importer reads the cell's USD export: every body with its mass, every
hinge and slide joint, every geom (the ellipsoid as a convex hull)."""

from __future__ import annotations

import mujoco
import newton
import numpy as np

from r2s2r.sim.scene import build_scene
from r2s2r.sim.usd import export_usd
from r2s2r.spec.worlds import load_task, load_world


def test_newton_reads_the_usd_export(tmp_path):
    scene = build_scene(load_task("pick_sort"), load_world("nominal"))
    path = export_usd(scene, tmp_path / "cell.usda")
    builder = newton.ModelBuilder()
    builder.add_usd(str(path))
    model = scene.model
    assert builder.body_count == model.nbody - 1
    # A mesh collided as its convex hull (the ellipsoid) gets the hull as its shape and the
    # mesh itself as a visual-only shape beside it.
    keys = list(builder.shape_label)
    ellipsoids = int((model.geom_type == mujoco.mjtGeom.mjGEOM_ELLIPSOID).sum())
    assert builder.shape_count == model.ngeom + ellipsoids
    hull = keys.index("/World/obj_pink_egg/geom_obj_pink_egg")
    assert int(builder.shape_type[hull]) == int(newton.GeoType.CONVEX_MESH)
    np.testing.assert_allclose(sorted(builder.body_mass), sorted(model.body_mass[1:]), rtol=1e-6)
    kinds = [int(t) for t in model.jnt_type]
    hinges = kinds.count(int(mujoco.mjtJoint.mjJNT_HINGE))
    slides = kinds.count(int(mujoco.mjtJoint.mjJNT_SLIDE))
    types = list(builder.joint_type)
    assert types.count(newton.JointType.REVOLUTE) == hinges
    assert types.count(newton.JointType.PRISMATIC) == slides


def test_the_mujoco_3_export_loads_in_this_venvs_mujoco(tmp_path, core_python):
    """``r2s2r sim export --mujoco 3`` run by the core venv (MuJoCo 4) writes a file this
    venv's MuJoCo 3.12 loads: the same bodies, joints, geoms, actuators and masses as the
    cell this venv builds itself."""
    import subprocess

    assert mujoco.__version__.startswith("3."), mujoco.__version__
    out = tmp_path / "cell3.xml"
    cmd = [str(core_python), "-m", "r2s2r", "sim", "export", "--out", str(out), "--mujoco", "3"]
    subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=300)
    loaded = mujoco.MjModel.from_xml_path(str(out))
    built = build_scene(load_task("pick_sort"), load_world("nominal")).model
    for field in ("nbody", "njnt", "ngeom", "nu", "nq", "ncam", "nlight"):
        assert getattr(loaded, field) == getattr(built, field), field
    np.testing.assert_allclose(loaded.body_mass, built.body_mass, rtol=1e-6)
    np.testing.assert_allclose(loaded.actuator_gainprm, built.actuator_gainprm, rtol=1e-6)
