"""Running a policy server's policy in the runtime.

A policy server (``r2s2r serve``, ``PolicyServer``) takes requests in the dataset's form
(``policy.base.TASK_KEY``) only: one image per camera under ``IMAGE_PREFIX + camera``, the
proprio history under ``STATE_KEY`` and the instruction. The runtime builds them for
policies that read views or a history; ``RequestForm`` builds them for a client of a server
(``RemotePolicy``) whose policy reads neither. ``LocalServer``
serves a policy of this process on a loopback port through a real server and client, and
can take the server down mid-episode (the disconnect fault).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

import numpy as np

from r2s2r.data.config import STATE_KEY
from r2s2r.policy.base import (
    ChunkPrefix,
    GuidedPolicy,
    Policy,
    PolicyError,
    PolicyMetadata,
)
from r2s2r.runtime.episode import EpisodeStart
from r2s2r.runtime.request import StateHistory, build_request
from r2s2r.sim.contract import PROPRIO_KEYS

log = logging.getLogger("r2s2r.runtime")


class RequestForm:
    """Drives ``policy`` (which takes requests in the dataset's form only, as a policy
    server's client does) with whatever the runtime hands it. The runtime builds requests
    itself for policies that read views or a proprio history (``runtime.request``); those
    pass through. It hands the others (no views, one state) its observation, which becomes
    a request here. ``begin`` is handed to ``on_begin`` (a served policy of this process)."""

    def __init__(
        self, policy: Policy, on_begin: Callable[[EpisodeStart], None] | None = None
    ) -> None:
        self.inner = policy
        self.on_begin = on_begin
        self._history = StateHistory(policy.metadata.state_history, policy.metadata.quaternions)

    @property
    def metadata(self) -> PolicyMetadata:
        return self.inner.metadata

    @property
    def guided(self) -> bool:
        return takes_prefixes(self.inner)

    def reset(self) -> None:
        self._history.reset()
        self.inner.reset()

    def begin(self, start: EpisodeStart) -> None:
        if self.on_begin is not None:
            self.on_begin(start)

    def request(self, observation: dict[str, Any]) -> dict[str, Any]:
        """The request in the dataset's form of what the runtime handed over."""
        if STATE_KEY in observation:
            return observation
        meta = self.metadata
        if meta.cameras or meta.state_history > 1:
            raise PolicyError(
                "a policy that reads views or a proprio history gets its request from the "
                "runtime (runtime.request.build_request), not an observation"
            )
        parts = [np.asarray(observation[k]).reshape(-1) for k in PROPRIO_KEYS]
        self._history.reset()
        self._history.push(np.concatenate(parts))
        return build_request(observation, self._history, ())

    def infer(self, observation: dict[str, Any]) -> np.ndarray:
        return self.inner.infer(self.request(observation))

    def close(self) -> None:
        close = getattr(self.inner, "close", None)
        if close is not None:
            close()


class GuidedRequestForm(RequestForm):
    """A ``RequestForm`` of a policy that takes RTC prefixes."""

    def infer_guided(self, observation: dict[str, Any], prefix: ChunkPrefix) -> np.ndarray:
        inner: Any = self.inner
        return np.asarray(inner.infer_guided(self.request(observation), prefix))


def takes_prefixes(policy: Policy) -> bool:
    """Whether ``policy`` makes guided chunks (RTC): it has ``infer_guided`` and, where it
    says (a policy server's client, a wrapper), ``guided``."""
    return isinstance(policy, GuidedPolicy) and bool(getattr(policy, "guided", True))


def request_form(
    policy: Policy, on_begin: Callable[[EpisodeStart], None] | None = None
) -> RequestForm:
    """``policy`` driven with requests in the dataset's form; guided (RTC) where it takes
    prefixes."""
    return (GuidedRequestForm if takes_prefixes(policy) else RequestForm)(policy, on_begin)


class LocalServer:
    """``policy`` served from this process on a loopback port by a real ``PolicyServer``,
    and the ``RequestForm`` of a real ``RemotePolicy`` connected to it (``policy``).
    ``stop()`` takes the server down (from any thread, without waiting for it);
    ``restart()`` brings it back on the same port."""

    def __init__(self, policy: Policy, timeout_s: float = 2.0) -> None:
        from r2s2r.policy.client import RemotePolicy
        from r2s2r.policy.serve import PolicyServer

        self.served = policy
        self._server: PolicyServer | None = PolicyServer(policy, "127.0.0.1", 0).start()
        self.port = self._server.port
        self.client = RemotePolicy("127.0.0.1", self.port, timeout_s=timeout_s)
        self.policy = request_form(self.client, getattr(policy, "begin", None))
        self._closing: threading.Thread | None = None

    @property
    def up(self) -> bool:
        return self._server is not None

    def stop(self) -> None:
        """Close the server in a thread of its own (its connections close with code 1001)."""
        server, self._server = self._server, None
        if server is not None:
            log.info("the policy server on port %d goes down", self.port)
            self._closing = threading.Thread(
                target=server.close, name="r2s2r-server-stop", daemon=True
            )
            self._closing.start()

    def restart(self) -> None:
        from r2s2r.policy.serve import PolicyServer

        if self._server is None:
            if self._closing is not None:
                self._closing.join()
            self._server = PolicyServer(self.served, "127.0.0.1", self.port).start()

    def close(self) -> None:
        self.client.close()
        server, self._server = self._server, None
        if server is not None:
            server.close()
        if self._closing is not None:
            self._closing.join()
