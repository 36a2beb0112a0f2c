"""The real cell: ``HardwareRig`` (``rig``), built from a hardware YAML over the device
drivers (``drivers``). Each vendor SDK is imported only when its device opens."""

from r2s2r.rig.hardware.rig import HardwareRig

__all__ = ["HardwareRig"]
