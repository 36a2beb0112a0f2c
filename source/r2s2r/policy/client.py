"""r2s2r's client of a policy server (``r2s2r serve``, or any server of openpi's protocol that
answers requests in the dataset's form): itself a ``Policy``, and a ``GuidedPolicy`` where
the server says it takes RTC prefixes."""

from __future__ import annotations

import threading
import time
from contextlib import ExitStack
from dataclasses import fields
from typing import Any

import numpy as np

from r2s2r.optional import missing_extra
from r2s2r.policy import wire
from r2s2r.policy.base import ChunkPrefix, PolicyError, PolicyMetadata
from r2s2r.policy.serve import AUTH_SCHEME, GUIDED_KEY, RESET_KEY, ws_url

try:
    from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidStatus
    from websockets.sync.client import ClientConnection, connect
except ImportError as err:  # pragma: no cover - the policy extra is installed in tests
    raise missing_extra(err, "policy") from err


class PolicyServerGone(ConnectionError):
    """The policy server cannot be reached, closed the connection, or stopped answering."""


def parse_metadata(message: Any, source: str) -> PolicyMetadata:
    """The ``PolicyMetadata`` in a server's connect message."""
    if not isinstance(message, dict):
        raise PolicyError(f"{source}: expected a metadata map on connect, got {message!r}")
    names = {f.name for f in fields(PolicyMetadata)}
    known = {k: v for k, v in message.items() if k in names}
    for key in ("cameras", "quaternions"):
        if key in known:
            known[key] = tuple(known[key])
    try:
        return PolicyMetadata(**known)
    except TypeError as err:
        raise PolicyError(f"{source}: incomplete policy metadata {message!r} ({err})") from err


class RemotePolicy:
    """A ``Policy`` whose ``infer`` is answered by the server at ``ws://host:port``.

    Requests are in the dataset's form (``policy.base.TASK_KEY``); the server validates them.
    After the connection is lost, the next call reconnects (and raises ``PolicyServerGone``
    where that fails). ``last_round_trip_ms`` and ``last_server_infer_ms`` hold the latest
    request's times.
    """

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 8000,
        token: str | None = None,
        timeout_s: float = 10.0,
    ) -> None:
        if not timeout_s > 0:
            raise PolicyError(f"timeout_s: expected a positive time, got {timeout_s}")
        self.url = ws_url(host, port)
        self.timeout_s = timeout_s
        self._headers = None if token is None else {"Authorization": f"{AUTH_SCHEME} {token}"}
        self._lock = threading.Lock()
        self._conn: ClientConnection | None = None
        self._stack = ExitStack()
        # Everything the server sent on connect (the metadata's fields and the server's own).
        self.server_info: dict[str, Any] = {}
        self.last_round_trip_ms: float | None = None
        self.last_server_infer_ms: float | None = None
        self._metadata = self._connect(None)

    @property
    def metadata(self) -> PolicyMetadata:
        return self._metadata

    def _connect(self, expected: PolicyMetadata | None) -> PolicyMetadata:
        try:
            # An open connection outlives this call: its context is held in an ExitStack.
            stack = ExitStack()
            conn = stack.enter_context(
                connect(
                    self.url,
                    additional_headers=self._headers,
                    compression=None,
                    max_size=None,
                    open_timeout=self.timeout_s,
                    # Closing a connection to a hung server gives up as quickly as a request.
                    close_timeout=self.timeout_s,
                )
            )
        except InvalidStatus as err:
            status = err.response.status_code
            if status == 401:
                raise PolicyError(
                    f"{self.url} refused the connection (HTTP 401): "
                    + ("a token is required" if self._headers is None else "wrong token")
                ) from err
            raise PolicyServerGone(f"{self.url} refused the connection (HTTP {status})") from err
        except (OSError, TimeoutError, InvalidHandshake) as err:
            raise PolicyServerGone(f"cannot reach the policy server at {self.url}: {err}") from err
        try:
            hello = conn.recv(timeout=self.timeout_s)
        except (ConnectionClosed, TimeoutError) as err:
            stack.close()
            raise PolicyServerGone(f"{self.url} sent no metadata on connect: {err}") from err
        try:
            info: Any = wire.unpackb(hello) if isinstance(hello, bytes) else hello
            metadata = parse_metadata(info, self.url)
        except PolicyError:
            stack.close()
            raise
        if expected is not None and metadata != expected:
            stack.close()
            raise PolicyError(f"{self.url} now serves another policy: {metadata}, was {expected}")
        self.server_info = dict(info)
        self._conn, self._stack = conn, stack
        return metadata

    def _exchange(self, message: dict[str, Any]) -> dict[str, Any]:
        # One request, one reply; a lost connection is dropped so that the next call reconnects.
        with self._lock:
            if self._conn is None:
                self._connect(self._metadata)
            assert self._conn is not None
            data = wire.packb(message)
            start = time.perf_counter()
            try:
                self._conn.send(data)
                reply = self._conn.recv(timeout=self.timeout_s)
            except ConnectionClosed as err:
                self._drop()
                raise PolicyServerGone(
                    f"the policy server at {self.url} closed the connection: {err}"
                ) from err
            except TimeoutError as err:
                # A late reply would answer the next request: start over on a new connection.
                self._drop()
                raise PolicyServerGone(
                    f"the policy server at {self.url} sent no reply within {self.timeout_s} s"
                ) from err
            self.last_round_trip_ms = (time.perf_counter() - start) * 1000.0
        if isinstance(reply, str):
            raise PolicyError(f"policy server at {self.url}: {reply}")
        body = wire.unpackb(reply)
        if not isinstance(body, dict):
            raise PolicyError(f"policy server at {self.url}: expected a reply map, got {body!r}")
        timing = body.get("server_timing") or {}
        self.last_server_infer_ms = timing.get("infer_ms")
        return body

    def _drop(self) -> None:
        # Leaving the connection's context closes it.
        self._stack.close()
        self._conn = None

    @property
    def guided(self) -> bool:
        """Whether the server takes RTC prefixes (``infer_guided``): r2s2r's server of a
        policy that has ``infer_guided`` says so on connect."""
        return self.server_info.get(GUIDED_KEY) is True

    def infer(self, observation: dict[str, Any]) -> np.ndarray:
        """The server's chunk (action_horizon, action_dim) float64 for ``observation``, a
        request in the dataset's form."""
        return self._actions(self._exchange(observation))

    def infer_guided(self, observation: dict[str, Any], prefix: ChunkPrefix) -> np.ndarray:
        """The server's chunk (action_horizon, action_dim) float64 for ``observation`` guided
        onto ``prefix`` (the served policy's ``infer_guided``). Refused here, before sending,
        where the server does not say it takes prefixes: openpi's would ignore them."""
        if not isinstance(prefix, ChunkPrefix):
            raise PolicyError(f"prefix: expected a ChunkPrefix, got {type(prefix).__name__}")
        if not self.guided:
            raise PolicyError(
                f"the policy server at {self.url} does not take RTC prefixes (no "
                f"'{GUIDED_KEY}: true' in its metadata): its policy has no infer_guided, or it "
                "is not r2s2r's server"
            )
        prefix.check(self._metadata.action_horizon, self._metadata.action_dim)
        return self._actions(self._exchange({**observation, **wire.prefix_message(prefix)}))

    def _actions(self, body: dict[str, Any]) -> np.ndarray:
        # The reply's chunk, checked against the metadata.
        actions = body.get("actions")
        expected = (self._metadata.action_horizon, self._metadata.action_dim)
        if not isinstance(actions, np.ndarray) or actions.shape != expected:
            got = actions.shape if isinstance(actions, np.ndarray) else type(actions).__name__
            raise PolicyError(f"policy server at {self.url}: actions {got}, expected {expected}")
        return actions.astype(np.float64)

    def reset(self) -> None:
        """Start a new episode: the served policy's ``reset()`` where r2s2r serves it (openpi's
        protocol has no reset; its servers keep no episode state)."""
        if self.server_info.get("server") == "r2s2r":
            self._exchange({RESET_KEY: True})

    def close(self) -> None:
        """Close the connection (a later call reconnects)."""
        with self._lock:
            self._drop()

    def __enter__(self) -> RemotePolicy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
