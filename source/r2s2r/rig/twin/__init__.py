"""The digital twin: a simulated cell behind the rig interfaces, with a hidden truth.

``rig`` (``TwinRig`` and its devices), ``build`` (``TwinCfg``, which twin, and the builder
that draws and compiles it), ``board`` (the calibration board its presenter holds up),
``views`` (how its cameras' views are made), ``truth`` (the true world and camera effects
drawn around the nominal one) and ``imperfect`` (the flaws a real cell has beside its
parameters).
"""

from r2s2r.rig.twin.build import TwinCfg
from r2s2r.rig.twin.rig import TwinRig

__all__ = ["TwinCfg", "TwinRig"]
