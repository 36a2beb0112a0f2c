"""A policy behind a websocket, speaking openpi's policy protocol, so that openpi's robot-side
client (``openpi_client.websocket_client_policy.WebsocketClientPolicy``) and r2s2r's own
``RemotePolicy`` both drive it.

The protocol: on connect the server sends the policy's metadata (a map); then each binary
request (a msgpack-numpy map in the dataset's form, see ``policy.base.TASK_KEY``) gets exactly
one reply: a map with ``actions`` (action_horizon, action_dim) float32 in robot units and
``server_timing`` (``infer_ms``, and ``prev_total_ms`` from the second reply on), or a text
frame with the error (openpi's client raises on text). The connection stays open after an
error. ``GET /healthz`` answers 200 without a websocket (and without the token: it says
only that the server is up). r2s2r's client may also send
``{"reset": true}`` (an r2s2r extension openpi's client never sends), which calls the policy's
``reset()`` and is answered with ``{"reset": true, "server_timing": ...}``; and a request with
a prefix (``rtc.*`` keys, see ``wire.read_prefix``), answered by the policy's
``infer_guided`` (RTC) where it has one (``rtc_guided`` in the metadata says so), else by an
error.

One lock serializes inference (one model), while any number of connections stay open; a
stateful policy is therefore shared by all of them.
"""

from __future__ import annotations

import dataclasses
import hmac
import http
import ipaddress
import logging
import threading
import time
from typing import Any, cast

import numpy as np

from r2s2r import __version__
from r2s2r.data.config import ENV_STATE_KEY, IMAGE_PREFIX, STATE_KEY
from r2s2r.optional import missing_extra
from r2s2r.policy import wire
from r2s2r.policy.base import (
    BELT_SPEED_KEY,
    STATE_PAD_KEY,
    TASK_KEY,
    GuidedPolicy,
    Policy,
    PolicyError,
    PolicyMetadata,
)

try:
    from websockets.exceptions import ConnectionClosed
    from websockets.sync.server import Request, Response, Server, ServerConnection, serve
except ImportError as err:  # pragma: no cover - the policy extra is installed in tests
    raise missing_extra(err, "policy") from err

log = logging.getLogger(__name__)

# The key of r2s2r's reset message (an extension of openpi's protocol).
RESET_KEY = "reset"
HEALTH_PATH = "/healthz"
# The metadata key that says whether the server takes RTC prefixes.
GUIDED_KEY = "rtc_guided"
# The largest request taken (three 1080p views are 19 MB); a larger one closes the connection
# (code 1009, message too big).
MAX_MESSAGE_BYTES = 64 << 20
# The Authorization header openpi's client sends for ``api_key=``: "Api-Key <token>".
AUTH_SCHEME = "Api-Key"


def is_loopback(host: str) -> bool:
    """Whether ``host`` is reachable only from this machine."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        # A host name other than localhost may resolve to any interface.
        return False


def ws_url(host: str, port: int) -> str:
    """``ws://host:port`` (an IPv6 address in brackets)."""
    return f"ws://[{host}]:{port}" if ":" in host else f"ws://{host}:{port}"


def check_binding(host: str, token: str | None) -> None:
    """A ``PolicyError`` unless a token guards a server that other machines can reach."""
    if token is not None and not token:
        raise PolicyError("token: expected a non-empty string, got ''")
    if token is None and not is_loopback(host):
        raise PolicyError(
            f"binding to {host} needs --token TOKEN: a server reachable from other machines "
            "accepts only clients that send 'Authorization: Api-Key TOKEN' (openpi's "
            "client: api_key=TOKEN); or bind to 127.0.0.1"
        )


def metadata_message(metadata: PolicyMetadata, guided: bool = False) -> dict[str, Any]:
    """What the server sends on connect: the metadata's fields, plus who serves them and
    whether requests may carry an RTC prefix (``guided``: the policy has ``infer_guided``)."""
    message = dataclasses.asdict(metadata)
    message["cameras"] = list(metadata.cameras)
    message["server"] = "r2s2r"
    message["r2s2r_version"] = __version__
    message["action_dtype"] = "float32"
    message[GUIDED_KEY] = guided
    return message


def _describe(value: Any) -> str:
    if value is None:
        return "nothing"
    if isinstance(value, np.ndarray):
        return f"{value.shape} {value.dtype}"
    if isinstance(value, str):
        return f"str of {len(value)} characters"
    return type(value).__name__


# What a request may hold besides its images and the ``rtc.*`` prefix.
_REQUEST_KEYS = (STATE_KEY, STATE_PAD_KEY, TASK_KEY, BELT_SPEED_KEY, ENV_STATE_KEY)
# Bounds of what a cell can send: image sides (px), proprio magnitude (m, rad), belt speed
# (m/s), instruction length, and how far from 1 a quaternion's norm may be.
IMAGE_SIDE = (8, 4096)
STATE_ABS_MAX = 100.0
BELT_SPEED_MAX = 10.0
TASK_MAX_CHARS = 2000
QUATERNION_TOL = 0.05


def _first_bad(mask: np.ndarray) -> tuple[int, ...]:
    return tuple(int(i) for i in np.argwhere(mask)[0])


def validate_request(request: Any, metadata: PolicyMetadata) -> dict[str, Any]:
    """The request checked against ``metadata`` before inference (state as float32): its keys,
    each view's shape and dtype, the state history's shape, finite values within what a cell
    can hold and unit quaternions, the padding mask, the belt speed and the instruction. A
    ``PolicyError`` names the key, the index and the value where one is wrong."""
    if not isinstance(request, dict):
        raise PolicyError(f"request: expected a map of observation keys, got {_describe(request)}")
    images = [IMAGE_PREFIX + c for c in metadata.cameras]
    unknown = sorted(
        str(k)
        for k in request
        if not isinstance(k, str)
        or (k not in images and k not in _REQUEST_KEYS and not k.startswith(wire.RTC_PREFIX))
    )
    if unknown:
        raise PolicyError(
            f"request: unexpected keys {unknown}; this policy reads {images + [STATE_KEY]}, "
            f"{TASK_KEY!r}, optionally {[STATE_PAD_KEY, BELT_SPEED_KEY]} and rtc.* keys"
        )
    out = dict(request)
    for key in images:
        image = request.get(key)
        ok = (
            isinstance(image, np.ndarray)
            and image.dtype == np.uint8
            and image.ndim == 3
            and image.shape[2] == 3
            and all(IMAGE_SIDE[0] <= side <= IMAGE_SIDE[1] for side in image.shape[:2])
        )
        if not ok:
            raise PolicyError(
                f"{key}: expected (H, W, 3) uint8 with sides in {list(IMAGE_SIDE)} px, "
                f"got {_describe(image)}"
            )
    if metadata.state_dim > 0:
        out[STATE_KEY] = _checked_state(request.get(STATE_KEY), metadata)
        pad = request.get(STATE_PAD_KEY)
        if pad is not None and not (
            isinstance(pad, np.ndarray)
            and pad.dtype == bool
            and pad.shape == (len(out[STATE_KEY]),)
        ):
            raise PolicyError(
                f"{STATE_PAD_KEY}: expected ({metadata.state_history},) bool, got {_describe(pad)}"
            )
    speed = request.get(BELT_SPEED_KEY)
    if speed is not None:
        ok = isinstance(speed, (int, float, np.floating, np.integer)) and not isinstance(
            speed, bool
        )
        if not ok or not 0.0 <= float(speed) <= BELT_SPEED_MAX:
            raise PolicyError(
                f"{BELT_SPEED_KEY}: expected a speed in [0, {BELT_SPEED_MAX}] m/s, got "
                f"{speed if ok else _describe(speed)}"
            )
    pose = request.get(ENV_STATE_KEY)
    if pose is not None and not (
        isinstance(pose, np.ndarray)
        and pose.shape == (7,)
        and pose.dtype in (np.float32, np.float64)
        and np.isfinite(pose).all()
        and (np.abs(pose) <= STATE_ABS_MAX).all()
    ):
        raise PolicyError(
            f"{ENV_STATE_KEY}: expected a finite pose (7,) float32, got {_describe(pose)}"
        )
    task = request.get(TASK_KEY)
    if not isinstance(task, str) or not 0 < len(task) <= TASK_MAX_CHARS:
        raise PolicyError(
            f"{TASK_KEY}: expected the instruction, a str of 1 to {TASK_MAX_CHARS} characters, "
            f"got {_describe(task)}"
        )
    return out


def _checked_state(state: Any, metadata: PolicyMetadata) -> np.ndarray:
    """``observation.state`` as float32, or a ``PolicyError`` naming what is wrong and where."""
    expected = (metadata.state_history, metadata.state_dim)
    if not (
        isinstance(state, np.ndarray)
        and state.shape == expected
        and state.dtype in (np.float32, np.float64)
    ):
        raise PolicyError(f"{STATE_KEY}: expected {expected} float32, got {_describe(state)}")
    if not np.isfinite(state).all():
        bad = _first_bad(~np.isfinite(state))
        raise PolicyError(f"{STATE_KEY}: expected finite values, got {state[bad]} at {bad}")
    if (np.abs(state) > STATE_ABS_MAX).any():
        bad = _first_bad(np.abs(state) > STATE_ABS_MAX)
        raise PolicyError(
            f"{STATE_KEY}: expected values within +-{STATE_ABS_MAX} (metres and radians), got "
            f"{state[bad]:.6g} at {bad}"
        )
    for q in metadata.quaternions:
        norm = np.linalg.norm(state[:, q : q + 4].astype(np.float64), axis=-1)
        off = np.abs(norm - 1.0) > QUATERNION_TOL
        if off.any():
            row = int(np.argmax(off))
            raise PolicyError(
                f"{STATE_KEY}[{row}, {q}:{q + 4}]: expected a unit quaternion (qw qx qy qz, norm "
                f"within {QUATERNION_TOL} of 1), got norm {norm[row]:.4g}"
            )
    return state.astype(np.float32, copy=False)


def check_chunk(actions: Any, metadata: PolicyMetadata) -> np.ndarray:
    """The policy's chunk as (action_horizon, action_dim) float32, or a ``PolicyError``."""
    expected = (metadata.action_horizon, metadata.action_dim)
    chunk = np.asarray(actions)
    if chunk.shape != expected or chunk.dtype.kind not in "fiu":
        raise PolicyError(f"policy returned actions {_describe(chunk)}, expected {expected} floats")
    if not np.isfinite(chunk).all():
        rows = sorted({int(i) for i in np.argwhere(~np.isfinite(chunk))[:, 0]})
        raise PolicyError(f"policy returned non-finite actions (steps {rows}); none were sent")
    return chunk.astype(np.float32)


class PolicyServer:
    """Serves ``policy`` on ``ws://host:port``; ``start()`` serves from a background thread
    (``wait()`` blocks until it stops), ``serve_forever()`` until Ctrl-C; ``close()`` (or
    leaving the ``with``) stops it."""

    def __init__(
        self, policy: Policy, host: str = "127.0.0.1", port: int = 8000, token: str | None = None
    ) -> None:
        check_binding(host, token)
        self.policy = policy
        self.metadata = policy.metadata
        self.host = host
        self._port = port
        self._expected_auth = None if token is None else f"{AUTH_SCHEME} {token}".encode()
        self.guided = isinstance(policy, GuidedPolicy)
        self._hello = wire.packb(metadata_message(self.metadata, self.guided))
        self._infer_lock = threading.Lock()
        self._server: Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        """The bound port (the one the OS chose where ``port=0``), once listening."""
        return self._port

    @property
    def url(self) -> str:
        return ws_url(self.host, self.port)

    def _listen(self) -> Server:
        if self._server is None:
            try:
                self._server = serve(
                    self._handle,
                    self.host,
                    self._port,
                    process_request=self._check_request,
                    compression=None,
                    max_size=MAX_MESSAGE_BYTES,
                )
            except OSError as err:
                raise PolicyError(f"cannot listen on {self.host}:{self._port}: {err}") from err
            self._port = int(self._server.socket.getsockname()[1])
            log.info("policy server listening on %s", self.url)
        return self._server

    def start(self) -> PolicyServer:
        """Listen and serve from a background thread; returns once listening."""
        if self._thread is None:
            server = self._listen()
            self._thread = threading.Thread(
                target=server.serve_forever, name="r2s2r-policy-server", daemon=True
            )
            self._thread.start()
        return self

    def wait(self) -> None:
        """Block until the server is closed (from another thread); Ctrl-C interrupts it."""
        thread = self._thread
        while thread is not None and thread.is_alive():
            thread.join(0.5)

    def serve_forever(self) -> None:
        """Serve until ``close()`` from another thread or Ctrl-C, then close."""
        try:
            self.start().wait()
        finally:
            self.close()

    def close(self) -> None:
        """Stop listening, close open connections (code 1001) and wait for their handlers."""
        if self._server is not None:
            self._server.shutdown()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()
            self._thread = None

    def __enter__(self) -> PolicyServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _check_request(self, connection: ServerConnection, request: Request) -> Response | None:
        # Runs on the HTTP request, before the websocket opens.
        if request.path == HEALTH_PATH:
            return connection.respond(http.HTTPStatus.OK, "OK\n")
        if self._expected_auth is not None:
            given = request.headers.get("Authorization", "").encode("utf-8", "replace")
            if not hmac.compare_digest(given, self._expected_auth):
                log.warning("refused %s: missing or wrong token", connection.remote_address)
                return connection.respond(
                    http.HTTPStatus.UNAUTHORIZED, f"expected 'Authorization: {AUTH_SCHEME} ...'\n"
                )
        return None

    def _handle(self, connection: ServerConnection) -> None:
        # One thread per connection: the metadata, then one reply per request until it closes.
        peer = connection.remote_address
        log.info("connection from %s", peer)
        try:
            connection.send(self._hello)
            prev_total_ms: float | None = None
            while True:
                message = connection.recv()
                start = time.perf_counter()
                reply = self._reply(message, prev_total_ms)
                connection.send(reply)
                prev_total_ms = (time.perf_counter() - start) * 1000.0
        except ConnectionClosed:
            log.info("connection from %s closed", peer)

    def _reply(self, message: str | bytes, prev_total_ms: float | None) -> str | bytes:
        # The reply to one message: a msgpack map, or the error as text.
        try:
            if isinstance(message, str):
                raise PolicyError("request: expected a binary msgpack-numpy message, got text")
            request = wire.unpackb(message)
            timing: dict[str, float] = {}
            if isinstance(request, dict) and request.keys() == {RESET_KEY}:
                with self._infer_lock:
                    self.policy.reset()
                body: dict[str, Any] = {RESET_KEY: True}
            else:
                checked, prefix = wire.read_prefix(
                    validate_request(request, self.metadata), self.metadata
                )
                if prefix is not None and not self.guided:
                    raise PolicyError(
                        f"{wire.RTC_PREFIX}actions: the served policy "
                        f"({type(self.policy).__name__}) has no infer_guided, so it cannot "
                        "follow a prefix; send requests without rtc.* keys"
                    )
                name = "infer" if prefix is None else "infer_guided"
                with self._infer_lock:
                    start = time.perf_counter()
                    try:
                        if prefix is None:
                            actions = self.policy.infer(checked)
                        else:
                            guided = cast(GuidedPolicy, self.policy)
                            actions = guided.infer_guided(checked, prefix)
                    except PolicyError:
                        raise  # The request's fault, named by the policy: sent as it is.
                    except Exception as err:
                        log.exception("policy.%s failed", name)
                        raise PolicyError(
                            f"policy.{name} failed: {type(err).__name__}: {err}"
                        ) from err
                    timing["infer_ms"] = (time.perf_counter() - start) * 1000.0
                body = {"actions": check_chunk(actions, self.metadata)}
            if prev_total_ms is not None:
                timing["prev_total_ms"] = prev_total_ms
            body["server_timing"] = timing
            return wire.packb(body)
        except PolicyError as err:
            log.warning("error reply: %s", err)
            return str(err)
        except Exception as err:
            # Anything else (a policy's reset failing, say) is still one reply, and the
            # connection goes on.
            log.exception("request failed")
            return f"{type(err).__name__}: {err}"
