"""The policy server over real localhost sockets: openpi's own client and r2s2r's RemotePolicy
get the in-process chunk; bad requests, tokens, a failing policy and a vanished server."""

from __future__ import annotations

import dataclasses
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from openpi_client import msgpack_numpy
from openpi_client.websocket_client_policy import WebsocketClientPolicy
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

from r2s2r import __version__
from r2s2r.cli.serve import serve, serve_policy
from r2s2r.data.config import IMAGE_PREFIX, STATE_KEY
from r2s2r.policy import wire
from r2s2r.policy.base import (
    BELT_SPEED_KEY,
    STATE_PAD_KEY,
    TASK_KEY,
    Policy,
    PolicyError,
    PolicyMetadata,
)
from r2s2r.policy.client import PolicyServerGone, RemotePolicy
from r2s2r.policy.serve import PolicyServer, is_loopback
from r2s2r.spec.world import CAMERA_NAMES

METADATA = PolicyMetadata(
    "rizon4s_wuji2_bimanual",
    "tcp",
    action_dim=54,
    action_horizon=40,
    control_hz=50.0,
    cameras=CAMERA_NAMES,
    state_dim=68,
    state_history=20,
)


class EchoPolicy:
    """A deterministic policy whose chunk depends on every image, the state history and the
    task; some tasks make it fail, answer NaN or take its time."""

    def __init__(self, metadata: PolicyMetadata = METADATA) -> None:
        self._metadata = metadata
        self.resets = 0
        self.calls = 0
        self._busy = threading.Lock()
        self.overlapped = False

    @property
    def metadata(self) -> PolicyMetadata:
        return self._metadata

    def reset(self) -> None:
        self.resets += 1

    def infer(self, observation: dict[str, Any]) -> np.ndarray:
        if not self._busy.acquire(blocking=False):
            self.overlapped = True
            self._busy.acquire()
        try:
            self.calls += 1
            return self._chunk(observation)
        finally:
            self._busy.release()

    def _chunk(self, observation: dict[str, Any]) -> np.ndarray:
        task = observation[TASK_KEY]
        if task == "explode":
            raise RuntimeError("the gripper model diverged")
        if task.startswith("sleep"):
            time.sleep(float(task.split()[1]))
        m = self._metadata
        views = [observation[IMAGE_PREFIX + c].mean() / 255.0 for c in m.cameras]
        state = observation[STATE_KEY].astype(np.float64)
        steps = np.arange(m.action_horizon)[:, None] / m.action_horizon
        chunk = np.zeros((m.action_horizon, m.action_dim))
        chunk += sum((i + 1) * v for i, v in enumerate(views)) + 0.01 * len(task)
        chunk += steps * (state[-1, : m.action_dim] - state[0, : m.action_dim])
        chunk += state[-1, : m.action_dim]
        if task == "nan":
            chunk[3, 7] = np.nan
        return chunk


def make_request(seed: int = 0, task: str = "sort the red cube") -> dict[str, Any]:
    """A request in the dataset's form for METADATA."""
    rng = np.random.default_rng(seed)
    request: dict[str, Any] = {
        IMAGE_PREFIX + c: rng.integers(0, 256, (48, 64, 3), dtype=np.uint8) for c in CAMERA_NAMES
    }
    request[STATE_KEY] = rng.normal(size=(20, 68)).astype(np.float32)
    request[TASK_KEY] = task
    return request


@pytest.fixture
def policy() -> EchoPolicy:
    return EchoPolicy()


# openpi's client opens its connection outside a context manager (websockets >= 17.1 warns).
pytestmark = pytest.mark.filterwarnings(
    "ignore::DeprecationWarning:openpi_client.websocket_client_policy"
)


@pytest.fixture
def server(policy: EchoPolicy) -> Iterator[PolicyServer]:
    with PolicyServer(policy, port=0) as running:
        yield running


def test_the_wire_format_is_openpi_msgpack_numpy_both_ways() -> None:
    message = {
        "a": np.arange(12, dtype=np.float32).reshape(3, 4),
        "b": np.zeros((2, 0, 3), dtype=np.uint8),
        "c": [np.float32(2.5), np.int16(-3), np.bool_(True)],
        "d": np.array(["x", "yz"]),
        "e": np.asfortranarray(np.arange(6, dtype=">i4").reshape(2, 3)),
        "s": "text",
    }
    for decoded in (
        msgpack_numpy.unpackb(wire.packb(message)),
        wire.unpackb(msgpack_numpy.packb(message)),
    ):
        assert decoded.keys() == message.keys() and decoded["s"] == "text"
        for key in "abde":
            assert decoded[key].dtype == message[key].dtype
            np.testing.assert_array_equal(decoded[key], message[key])
        assert [type(v) for v in decoded["c"]] == [np.float32, np.int16, np.bool_]
        assert decoded["c"] == message["c"]
    assert wire.unpackb(wire.packb(message))["a"].flags.writeable
    with pytest.raises(wire.WireError, match="dtype object"):
        wire.packb({"x": np.array([{}], dtype=object)})
    with pytest.raises(wire.WireError, match="cannot send a set"):
        wire.packb({"x": {1}})
    truncated = {b"__ndarray__": True, b"data": b"\0" * 7, b"dtype": "<f4", b"shape": [2]}
    with pytest.raises(wire.WireError, match=r"\(2,\) float32 needs 8 bytes, got 7"):
        wire.unpackb(msgpack_numpy.packb(truncated))
    objects = {b"__ndarray__": True, b"data": b"\0" * 8, b"dtype": "|O", b"shape": [1]}
    with pytest.raises(wire.WireError, match="cannot travel"):
        wire.unpackb(msgpack_numpy.packb(objects))
    with pytest.raises(wire.WireError, match="not a msgpack message"):
        wire.unpackb(b"\xc1")


def test_openpi_client_gets_the_metadata_and_the_in_process_chunk(
    server: PolicyServer, policy: EchoPolicy
) -> None:
    client = WebsocketClientPolicy("127.0.0.1", server.port)
    try:
        meta = client.get_server_metadata()
        assert meta["cameras"] == list(CAMERA_NAMES)
        assert (meta["state_dim"], meta["state_history"]) == (68, 20)
        assert (meta["action_horizon"], meta["action_dim"]) == (40, 54)
        assert meta["r2s2r_version"] == __version__
        replies = [client.infer(make_request(seed)) for seed in (0, 1)]
    finally:
        client._ws.close()
    for seed, reply in enumerate(replies):
        expected = policy._chunk(make_request(seed))
        assert reply["actions"].dtype == np.float32 and reply["actions"].shape == (40, 54)
        np.testing.assert_array_equal(reply["actions"], expected.astype(np.float32))
        assert reply["server_timing"]["infer_ms"] >= 0
    assert not np.allclose(replies[0]["actions"], replies[1]["actions"])
    assert "prev_total_ms" not in replies[0]["server_timing"]
    assert replies[1]["server_timing"]["prev_total_ms"] > 0


def test_remote_policy_is_a_policy_with_the_same_chunk(
    server: PolicyServer, policy: EchoPolicy
) -> None:
    with RemotePolicy("127.0.0.1", server.port, timeout_s=5.0) as remote:
        assert isinstance(remote, Policy)
        assert remote.metadata == METADATA
        remote.reset()
        assert policy.resets == 1
        request = make_request(3)
        request[STATE_KEY] = request[STATE_KEY].astype(np.float64)
        chunk = remote.infer(request)
        assert chunk.dtype == np.float64 and chunk.shape == (40, 54)
        expected = policy._chunk(make_request(3)).astype(np.float32)
        np.testing.assert_array_equal(chunk, expected)
        assert remote.last_round_trip_ms is not None and remote.last_server_infer_ms is not None
        assert 0 <= remote.last_server_infer_ms <= remote.last_round_trip_ms


def test_healthz_answers_without_a_websocket(server: PolicyServer) -> None:
    with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/healthz", timeout=5) as reply:
        assert reply.status == 200 and reply.read() == b"OK\n"


def _without(key: str) -> dict[str, Any]:
    request = make_request()
    del request[key]
    return request


def _with(key: str, value: Any) -> dict[str, Any]:
    return {**make_request(), key: value}


BAD_REQUESTS = [
    (_without(IMAGE_PREFIX + "left_wrist"), "observation.images.left_wrist: expected (H, W, 3) "
     "uint8 with sides in [8, 4096] px, got nothing"),
    (_with(IMAGE_PREFIX + "head", np.zeros((48, 64, 3), np.float32)),
     "observation.images.head: expected (H, W, 3) uint8 with sides in [8, 4096] px, got "
     "(48, 64, 3) float32"),
    (_with(IMAGE_PREFIX + "head", np.zeros((48, 64), np.uint8)),
     "observation.images.head: expected (H, W, 3) uint8 with sides in [8, 4096] px, got "
     "(48, 64) uint8"),
    (_with(STATE_KEY, np.zeros((19, 68))),
     "observation.state: expected (20, 68) float32, got (19, 68) float64"),
    (_with(STATE_KEY, np.zeros((20, 68), np.int32)),
     "observation.state: expected (20, 68) float32, got (20, 68) int32"),
    (_with(STATE_KEY, np.full((20, 68), np.nan, np.float32)),
     "observation.state: expected finite values, got nan at (0, 0)"),
    (_without(STATE_KEY), "observation.state: expected (20, 68) float32, got nothing"),
    (_without(TASK_KEY), "task: expected the instruction, a str of 1 to 2000 characters, got "
     "nothing"),
    (_with(TASK_KEY, 7), "task: expected the instruction, a str of 1 to 2000 characters, got int"),
    ([1, 2], "request: expected a map of observation keys, got list"),
]  # fmt: skip


def test_each_malformed_request_gets_its_error_and_the_connection_goes_on(
    server: PolicyServer, policy: EchoPolicy
) -> None:
    with connect(server.url) as ws:
        assert wire.unpackb(ws.recv())["cameras"] == list(CAMERA_NAMES)
        for request, error in BAD_REQUESTS:
            ws.send(wire.packb(request))
            assert ws.recv(timeout=5) == error
            ws.send(wire.packb(make_request(5)))
            good = wire.unpackb(ws.recv(timeout=5))
            expected = policy._chunk(make_request(5)).astype(np.float32)
            np.testing.assert_array_equal(good["actions"], expected)
        ws.send("not msgpack")
        assert "expected a binary msgpack-numpy message, got text" in ws.recv(timeout=5)
        ws.send(b"\xc1")
        assert "not a msgpack message" in ws.recv(timeout=5)
        ws.send(wire.packb(make_request()))
        assert isinstance(ws.recv(timeout=5), bytes)
    # No malformed request reached the policy.
    assert policy.calls == len(BAD_REQUESTS) + 1


# A policy whose state holds the two arms' TCP quaternions at columns 3 and 10 (the contract's).
QUAT_METADATA = dataclasses.replace(METADATA, quaternions=(3, 10))


def _valid(seed: int) -> dict[str, Any]:
    """make_request with unit quaternions where QUAT_METADATA has them, padding and a speed."""
    request = make_request(seed)
    state = request[STATE_KEY]
    for q in QUAT_METADATA.quaternions:
        state[:, q : q + 4] /= np.linalg.norm(state[:, q : q + 4], axis=1, keepdims=True)
    request[STATE_PAD_KEY] = np.zeros(20, dtype=bool)
    request[BELT_SPEED_KEY] = 0.08
    return request


def malformed_requests(count: int, seed: int = 0) -> list[tuple[dict[str, Any], str]]:
    """``count`` requests each with one thing wrong, and the key its error must name:
    non-finite, huge and non-unit state values, images of wrong shapes and dtypes, missing
    and extra keys, bad padding, belt speeds and instructions, and the all-zero request."""
    rng = np.random.default_rng(seed)
    views = [IMAGE_PREFIX + c for c in CAMERA_NAMES]

    def state_value(value: float) -> tuple[dict[str, Any], str]:
        request = _valid(int(rng.integers(1 << 30)))
        row, col = int(rng.integers(20)), int(rng.integers(68))
        request[STATE_KEY][row, col] = value
        return request, STATE_KEY

    def non_unit() -> tuple[dict[str, Any], str]:
        request = _valid(int(rng.integers(1 << 30)))
        row, q = int(rng.integers(20)), int(rng.choice(QUAT_METADATA.quaternions))
        request[STATE_KEY][row, q : q + 4] *= rng.choice([0.0, 0.5, 0.9, 1.1, 3.0])
        return request, f"{STATE_KEY}[{row}, {q}:{q + 4}]"

    def image() -> tuple[dict[str, Any], str]:
        request, key = _valid(int(rng.integers(1 << 30))), str(rng.choice(views))
        shape = [(48, 64), (48, 64, 4), (1, 48, 64, 3), (4, 64, 3), (48, 5000, 3), (0, 0, 3)]
        dtype = [np.float32, np.int64, np.uint16, np.float16, bool]
        if rng.random() < 0.5:
            request[key] = np.zeros(shape[int(rng.integers(len(shape)))], np.uint8)
        else:
            request[key] = np.zeros((48, 64, 3), dtype[int(rng.integers(len(dtype)))])
        return request, key

    def state_shape() -> tuple[dict[str, Any], str]:
        request = _valid(int(rng.integers(1 << 30)))
        shapes = [(19, 68), (21, 68), (20, 67), (68,), (20, 68, 1), (0, 68)]
        dtypes = [np.int32, np.float16, np.int64, bool]
        if rng.random() < 0.5:
            request[STATE_KEY] = np.zeros(shapes[int(rng.integers(len(shapes)))], np.float32)
        else:
            request[STATE_KEY] = request[STATE_KEY].astype(dtypes[int(rng.integers(len(dtypes)))])
        return request, STATE_KEY

    def missing() -> tuple[dict[str, Any], str]:
        request = _valid(int(rng.integers(1 << 30)))
        key = str(rng.choice([*views, STATE_KEY, TASK_KEY]))
        del request[key]
        return request, key

    def extra() -> tuple[dict[str, Any], str]:
        request = _valid(int(rng.integers(1 << 30)))
        key = str(rng.choice(["observation.images.top", "state", "prompt", "actions", "obs"]))
        request[key] = np.zeros(3)
        return request, "request: unexpected keys"

    def other() -> tuple[dict[str, Any], str]:
        request = _valid(int(rng.integers(1 << 30)))
        key, values = [
            (STATE_PAD_KEY, [np.zeros(19, bool), np.zeros(20, np.int8), [False] * 20]),
            (BELT_SPEED_KEY, [-0.1, float("nan"), float("inf"), 1e9, "fast", True]),
            (TASK_KEY, ["", "x" * 5000, 7, ["sort"], None]),
        ][int(rng.integers(3))]
        request[key] = values[int(rng.integers(len(values)))]
        return request, key

    makers = [
        lambda: state_value(float(rng.choice([np.nan, np.inf, -np.inf]))),
        lambda: state_value(float(rng.choice([1e3, -1e6, 1e30, 3e38]))),
        non_unit, image, state_shape, missing, extra, other,
    ]  # fmt: skip
    zeros = {k: np.zeros_like(v) for k, v in _valid(0).items() if isinstance(v, np.ndarray)}
    out = [({**_valid(0), **zeros}, f"{STATE_KEY}[0, 3:7]")]
    while len(out) < count:
        out.append(makers[int(rng.integers(len(makers)))]())
    return out


def test_hundreds_of_malformed_requests_are_each_named_and_never_reach_the_policy() -> None:
    policy = EchoPolicy(QUAT_METADATA)
    requests = malformed_requests(300)
    with PolicyServer(policy, port=0) as server, connect(server.url) as ws:
        ws.recv()
        good = _valid(5)
        expected = policy._chunk(good).astype(np.float32)
        for request, key in requests:
            ws.send(wire.packb(request))
            reply = ws.recv(timeout=5)
            assert isinstance(reply, str) and reply.startswith(key), (key, reply)
            ws.send(wire.packb(good))
            np.testing.assert_array_equal(wire.unpackb(ws.recv(timeout=5))["actions"], expected)
        # openpi's own client, sending the all-zero observation a robot program may send
        # before its first reading, gets the error that names the quaternion.
        client = WebsocketClientPolicy("127.0.0.1", server.port)
        try:
            with pytest.raises(RuntimeError, match=r"observation.state\[0, 3:7\]: expected a unit"):
                client.infer(requests[0][0])
            assert client.infer(good)["actions"].shape == (40, 54)
        finally:
            client._ws.close()
    assert policy.calls == len(requests) + 1


def test_a_failing_policy_gets_an_error_reply_and_the_server_goes_on(server: PolicyServer) -> None:
    with RemotePolicy("127.0.0.1", server.port) as remote:
        with pytest.raises(PolicyError, match="RuntimeError: the gripper model diverged"):
            remote.infer(make_request(task="explode"))
        with pytest.raises(PolicyError, match=r"non-finite actions \(steps \[3\]\); none were"):
            remote.infer(make_request(task="nan"))
        assert remote.infer(make_request()).shape == (40, 54)
    client = WebsocketClientPolicy("127.0.0.1", server.port)
    try:
        with pytest.raises(RuntimeError, match="the gripper model diverged"):
            client.infer(make_request(task="explode"))
        assert client.infer(make_request())["actions"].shape == (40, 54)
    finally:
        client._ws.close()


def test_a_required_token_refuses_clients_without_it() -> None:
    with PolicyServer(EchoPolicy(), port=0, token="s3cret") as server:
        for api_key in (None, "wrong", "S3CRET", "s3cret2"):
            with pytest.raises(InvalidStatus) as refused:
                WebsocketClientPolicy("127.0.0.1", server.port, api_key=api_key)
            assert refused.value.response.status_code == 401
        with pytest.raises(PolicyError, match="HTTP 401.*a token is required"):
            RemotePolicy("127.0.0.1", server.port)
        with pytest.raises(PolicyError, match="HTTP 401.*wrong token"):
            RemotePolicy("127.0.0.1", server.port, token="guess")
        client = WebsocketClientPolicy("127.0.0.1", server.port, api_key="s3cret")
        try:
            assert client.infer(make_request())["actions"].shape == (40, 54)
        finally:
            client._ws.close()
        with RemotePolicy("127.0.0.1", server.port, token="s3cret") as remote:
            assert remote.infer(make_request()).shape == (40, 54)
        with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/healthz", timeout=5) as r:
            assert r.status == 200


def test_binding_beyond_loopback_needs_a_token() -> None:
    for host in ("0.0.0.0", "192.168.1.20", "robot-pc.local", "::"):
        with pytest.raises(PolicyError, match=f"binding to {host} needs --token"):
            PolicyServer(EchoPolicy(), host=host, port=0)
    with pytest.raises(PolicyError, match="token: expected a non-empty string"):
        PolicyServer(EchoPolicy(), host="0.0.0.0", port=0, token="")
    assert all(is_loopback(h) for h in ("127.0.0.1", "127.0.0.2", "localhost", "::1"))
    # The command refuses before it loads the policy.
    with pytest.raises(PolicyError, match="binding to 0.0.0.0 needs --token"):
        serve(Path("no-such-run"), host="0.0.0.0")


def test_a_vanished_server_raises_policy_server_gone(policy: EchoPolicy) -> None:
    server = PolicyServer(policy, port=0).start()
    port = server.port
    remote = RemotePolicy("127.0.0.1", port, timeout_s=2.0)
    assert remote.infer(make_request()).shape == (40, 54)
    server.close()
    with pytest.raises(PolicyServerGone, match="closed the connection"):
        remote.infer(make_request())
    with pytest.raises(
        PolicyServerGone, match=f"cannot reach the policy server at ws://127.0.0.1:{port}"
    ):
        remote.infer(make_request())
    with pytest.raises(PolicyServerGone, match="cannot reach"):
        RemotePolicy("127.0.0.1", port, timeout_s=2.0)
    # A server back on the same port serves the same client again.
    with PolicyServer(policy, port=port):
        assert remote.infer(make_request()).shape == (40, 54)
    # Not a server of another policy (the first call finds the connection closed).
    other = EchoPolicy(dataclasses.replace(METADATA, action_horizon=16))
    with PolicyServer(other, port=port):
        with pytest.raises(PolicyServerGone, match="closed the connection"):
            remote.infer(make_request())
        with pytest.raises(PolicyError, match="now serves another policy"):
            remote.infer(make_request())
    remote.close()


def test_a_late_reply_is_a_timeout_and_the_next_call_reconnects(server: PolicyServer) -> None:
    with RemotePolicy("127.0.0.1", server.port, timeout_s=0.3) as remote:
        with pytest.raises(PolicyServerGone, match="no reply within 0.3 s"):
            remote.infer(make_request(task="sleep 0.6"))
        # The next call waits for the server to finish the late chunk (one model, one lock).
        remote.timeout_s = 5.0
        # The late chunk went to the closed connection, not to this request.
        chunk = remote.infer(make_request(seed=9))
        np.testing.assert_array_equal(
            chunk, EchoPolicy()._chunk(make_request(9)).astype(np.float32)
        )


def test_inference_is_serialized_across_connections(
    server: PolicyServer, policy: EchoPolicy
) -> None:
    errors: list[BaseException] = []

    def episode(seed: int) -> None:
        try:
            with RemotePolicy("127.0.0.1", server.port) as remote:
                for _ in range(4):
                    remote.infer(make_request(seed, task="sleep 0.01"))
        except BaseException as err:
            errors.append(err)

    threads = [threading.Thread(target=episode, args=(s,)) for s in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors and policy.calls == 12 and not policy.overlapped


def test_serve_policy_prints_the_address_and_serves_until_closed(
    policy: EchoPolicy, capsys: pytest.CaptureFixture[str]
) -> None:
    listening: list[PolicyServer] = []
    ready = threading.Event()

    def on_listening(server: PolicyServer) -> None:
        listening.append(server)
        ready.set()

    runner = threading.Thread(
        target=serve_policy, args=(policy, "127.0.0.1", 0), kwargs={"on_listening": on_listening}
    )
    runner.start()
    assert ready.wait(5)
    server = listening[0]
    with RemotePolicy("127.0.0.1", server.port) as remote:
        assert remote.infer(make_request()).shape == (40, 54)
    server.close()
    runner.join(5)
    assert not runner.is_alive()
    out = capsys.readouterr().out
    assert f"serving on ws://127.0.0.1:{server.port}" in out
    assert "cameras: ['head', 'left_wrist', 'right_wrist']" in out and "state_history: 20" in out
