"""The rig: hardware interfaces, the digital twin and the safety supervisor."""
