"""The runtime: the 50 Hz loop that runs any policy on any rig, safely.

``Runtime(rig, policy, supervisor, cfg)`` runs episodes (``run_episode``) of a ``Policy``
(a learned one, a remote policy server, the scripted operator or a generated plan) with
inference in a background thread, chunks joined by real-time chunking, overlap blending or
synchronous execution, and every command through the ``SafetySupervisor``.
"""

from r2s2r.runtime.config import RuntimeCfg
from r2s2r.runtime.episode import ChunkLog, EpisodeLog, EpisodeStart, StepLog, start_episode
from r2s2r.runtime.loop import Runtime

__all__ = [
    "ChunkLog",
    "EpisodeLog",
    "EpisodeStart",
    "Runtime",
    "RuntimeCfg",
    "StepLog",
    "start_episode",
]
