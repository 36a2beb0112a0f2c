"""The policy server's message encoding: msgpack with numpy arrays, as openpi-client's
``msgpack_numpy`` writes and reads them, so either side can be openpi's.

An array travels as a map with bytes keys ``__ndarray__`` (true), ``data`` (its C-order bytes),
``dtype`` (``numpy.dtype.str``, e.g. ``"<f4"``) and ``shape``; a numpy scalar as ``__npgeneric__``
(true), ``data`` (the Python value) and ``dtype``. Tuples arrive as lists. Only plain numeric,
boolean and string dtypes travel: object, void and complex arrays are refused both ways (an
object array could not be rebuilt without pickle, which never crosses this wire).

A request for a guided chunk (RTC, ``base.ChunkPrefix``) is a plain request plus the keys
``rtc.actions`` (n, A) float64 in robot units, ``rtc.delay`` and ``rtc.exec_horizon`` (ints),
``rtc.beta`` (float) and ``rtc.schedule`` (str) (``prefix_message``, ``read_prefix``): an r2s2r
extension that openpi's client never sends.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from r2s2r.optional import missing_extra
from r2s2r.policy.base import ChunkPrefix, PolicyError, PolicyMetadata

try:
    import msgpack
except ImportError as err:  # pragma: no cover - the policy extra is installed in tests
    raise missing_extra(err, "policy") from err

# The dtype kinds that travel: bool, signed and unsigned integers, floats, bytes and unicode.
_KINDS = "biufSU"


class WireError(PolicyError):
    """A message that is not msgpack-numpy, or holds something that cannot travel."""


def _encode(obj: Any) -> Any:
    # msgpack calls this for every value it cannot pack itself.
    if isinstance(obj, np.ndarray):
        if obj.dtype.kind not in _KINDS:
            raise WireError(f"cannot send an array of dtype {obj.dtype} (kinds {_KINDS} only)")
        return {
            b"__ndarray__": True,
            b"data": obj.tobytes(),
            b"dtype": obj.dtype.str,
            b"shape": obj.shape,
        }
    if isinstance(obj, np.generic):
        if obj.dtype.kind not in _KINDS:
            raise WireError(f"cannot send a scalar of dtype {obj.dtype} (kinds {_KINDS} only)")
        return {b"__npgeneric__": True, b"data": obj.item(), b"dtype": obj.dtype.str}
    raise WireError(f"cannot send a {type(obj).__name__} (msgpack types and numpy arrays only)")


def _dtype(code: Any) -> np.dtype[Any]:
    try:
        dtype = np.dtype(code)
    except TypeError as err:
        raise WireError(f"array dtype: {code!r} is not a numpy dtype") from err
    if dtype.kind not in _KINDS or dtype.hasobject:
        raise WireError(f"array dtype: {dtype} cannot travel (kinds {_KINDS} only)")
    return dtype


def _decode(obj: dict[Any, Any]) -> Any:
    # msgpack calls this for every map it reads; arrays and scalars are maps with marker keys.
    if b"__ndarray__" in obj:
        dtype = _dtype(obj.get(b"dtype"))
        shape = obj.get(b"shape")
        data = obj.get(b"data")
        if not isinstance(shape, list | tuple) or not all(
            isinstance(n, int) and n >= 0 for n in shape
        ):
            raise WireError(f"array shape: expected a list of sizes, got {shape!r}")
        if not isinstance(data, bytes):
            raise WireError(f"array data: expected bytes, got {type(data).__name__}")
        expected = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        if len(data) != expected:
            raise WireError(
                f"array data: {tuple(shape)} {dtype} needs {expected} bytes, got {len(data)}"
            )
        # A copy, so that the receiver owns a writable array rather than a view of the message.
        return np.frombuffer(data, dtype=dtype).reshape(shape).copy()
    if b"__npgeneric__" in obj:
        return _dtype(obj.get(b"dtype")).type(obj.get(b"data"))
    return obj


def packb(obj: Any) -> bytes:
    """``obj`` (dicts, lists, str, numbers, numpy arrays and scalars) as one message."""
    try:
        out: bytes = msgpack.packb(obj, default=_encode)
    except (TypeError, ValueError, OverflowError) as err:
        if isinstance(err, WireError):
            raise
        raise WireError(f"cannot encode the message: {err}") from err
    return out


def unpackb(data: bytes) -> Any:
    """The value of one message (arrays come back as numpy arrays)."""
    try:
        return msgpack.unpackb(data, object_hook=_decode)
    except WireError:
        raise
    except (ValueError, TypeError, msgpack.UnpackException) as err:
        raise WireError(f"not a msgpack message ({type(err).__name__}: {err})") from err


# The request keys of a prefix: ``rtc.<field>`` for each field of ``ChunkPrefix``.
RTC_PREFIX = "rtc."
RTC_FIELDS = ("actions", "delay", "exec_horizon", "beta", "schedule")


def prefix_message(prefix: ChunkPrefix) -> dict[str, Any]:
    """The keys that make a request a guided one (merged into the observation's map)."""
    return {
        RTC_PREFIX + "actions": np.ascontiguousarray(prefix.actions, dtype=np.float64),
        RTC_PREFIX + "delay": prefix.delay,
        RTC_PREFIX + "exec_horizon": prefix.exec_horizon,
        RTC_PREFIX + "beta": prefix.beta,
        RTC_PREFIX + "schedule": prefix.schedule,
    }


def read_prefix(
    request: dict[str, Any], metadata: PolicyMetadata
) -> tuple[dict[str, Any], ChunkPrefix | None]:
    """The request without its ``rtc.*`` keys, and the prefix they hold (None: a plain
    request), checked against ``metadata``'s chunks; a ``PolicyError`` naming the key."""
    keys = {k for k in request if isinstance(k, str) and k.startswith(RTC_PREFIX)}
    if not keys:
        return request, None
    unknown = sorted(keys - {RTC_PREFIX + f for f in RTC_FIELDS})
    if unknown:
        raise PolicyError(
            f"{unknown[0]}: unknown key (a prefix has {[RTC_PREFIX + f for f in RTC_FIELDS]})"
        )
    fields = {f: request[RTC_PREFIX + f] for f in RTC_FIELDS if RTC_PREFIX + f in request}
    for required in ("actions", "delay", "exec_horizon"):
        if required not in fields:
            raise PolicyError(f"{RTC_PREFIX}{required}: missing from a request with {sorted(keys)}")
    actions = fields["actions"]
    if not isinstance(actions, np.ndarray):
        raise PolicyError(
            f"{RTC_PREFIX}actions: expected an (n, {metadata.action_dim}) float array, "
            f"got {type(actions).__name__}"
        )
    if "beta" in fields and (
        isinstance(fields["beta"], bool) or not isinstance(fields["beta"], int | float | np.number)
    ):
        raise PolicyError(
            f"{RTC_PREFIX}beta: expected a number, got {type(fields['beta']).__name__}"
        )
    try:
        prefix = ChunkPrefix(**fields)
        prefix.check(metadata.action_horizon, metadata.action_dim)
    except PolicyError as err:
        # The prefix's errors name its fields (``prefix.delay``); here they are keys.
        raise PolicyError(str(err).replace("prefix.", RTC_PREFIX)) from None
    return {k: v for k, v in request.items() if k not in keys}, prefix
