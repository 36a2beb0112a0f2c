"""The rig: everything that touches the physical world, behind one contract.

The contract is this package's top level: the devices and the ``Rig`` protocol
(``interfaces``), the safety supervisor (``safety``) and the observation read from a rig
(``observe``). Three rooms implement or drive it, and none imports another:

- ``twin``: the digital twin, a simulated cell with a hidden truth (``TwinRig``);
- ``hardware``: the real cell and its device drivers (``HardwareRig``);
- ``teleop``: teleoperation, a tracked human hand (or the scripted operator) driving a rig.

``kinds`` is the registry of rig kinds, which every rig opens through (``open_rig``);
``bench`` measures the twin and teleoperation.
"""
