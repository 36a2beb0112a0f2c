"""The chunk executor and the delay estimate, on chunks whose every value is known."""

from __future__ import annotations

import numpy as np
import pytest

from r2s2r.runtime import RuntimeCfg
from r2s2r.runtime.chunks import ChunkExecutor, DelayEstimator


def _chunk(start: int, horizon: int = 16, dim: int = 3, offset: float = 0.0) -> np.ndarray:
    """Action i of a chunk from step ``start`` is (start + i + offset) in every entry, so an
    executed value names the step it was meant for and the chunk it came from."""
    return np.repeat((start + np.arange(horizon) + offset)[:, None], dim, axis=1).astype(float)


def _run(ex: ChunkExecutor, steps: range) -> list[float | None]:
    out = []
    for k in steps:
        a, _ = ex.action(k)
        out.append(None if a is None else float(a[0]))
    return out


def test_rtc_executes_the_committed_prefix_exactly_then_switches() -> None:
    ex = ChunkExecutor("rtc", exec_horizon=5)
    assert ex.due(0)
    ex.accept(_chunk(0), start=0, step=0, committed=0, index=0)
    assert _run(ex, range(0, 5)) == [0, 1, 2, 3, 4]
    ex.last_request = 0  # The loop records when it asked for the running chunk.
    assert not ex.due(4) and ex.due(5)
    # The next chunk is asked for at step 5 with d = 3 committed; it arrives early (step 6).
    prefix = ex.prefix(5, 16)
    assert prefix is not None and prefix[:, 0].tolist() == list(range(5, 16))
    switch = ex.accept(_chunk(5, offset=0.5), start=5, step=6, committed=3, index=1)
    assert switch == 8
    # Steps 6 and 7 are still the old chunk's (committed); from 8 on the new one runs.
    assert _run(ex, range(6, 11)) == [6, 7, 8.5, 9.5, 10.5]


def test_rtc_late_chunk_switches_on_arrival() -> None:
    ex = ChunkExecutor("rtc", exec_horizon=4)
    ex.accept(_chunk(0), 0, 0, 0, 0)
    _run(ex, range(0, 4))
    switch = ex.accept(_chunk(4, offset=0.5), start=4, step=9, committed=2, index=1)
    assert switch == 9
    assert _run(ex, range(9, 11)) == [9.5, 10.5]


def test_blend_moves_linearly_from_old_to_new() -> None:
    ex = ChunkExecutor("blend", exec_horizon=4, blend_steps=3)
    ex.accept(_chunk(0), 0, 0, 0, 0)
    ex.accept(_chunk(4, offset=1.0), start=4, step=6, committed=0, index=1)
    got = _run(ex, range(6, 11))
    # Weights of the new chunk 1/4, 2/4, 3/4, then the new chunk alone.
    want = [6 + 0.25, 7 + 0.5, 8 + 0.75, 10.0, 11.0]
    assert got == pytest.approx(want)


def test_sync_runs_each_chunk_from_its_first_action() -> None:
    ex = ChunkExecutor("sync", exec_horizon=3)
    ex.accept(_chunk(0), 0, 0, 0, 0)
    assert _run(ex, range(0, 3)) == [0, 1, 2]
    assert ex.due(3)
    # The loop waited: a chunk asked for at step 3 (values from 3) runs from step 7.
    ex.accept(_chunk(3), start=3, step=7, committed=0, index=1)
    assert _run(ex, range(7, 9)) == [3, 4]


def test_a_chunk_that_runs_out_leaves_the_step_uncovered() -> None:
    ex = ChunkExecutor("rtc", exec_horizon=10)
    ex.accept(_chunk(0, horizon=4), 0, 0, 0, 0)
    assert _run(ex, range(0, 6)) == [0, 1, 2, 3, None, None]


def test_delay_estimate_ignores_warm_up_calls() -> None:
    est = DelayEstimator(warmup=2, window=5, quantile=0.9)
    assert est.estimate() == 0
    est.add(25)  # A first call (allocation, compilation) takes half a second.
    est.add(12)
    assert est.estimate() == 12  # The fastest warm-up call, not a running maximum.
    for d in (3, 3, 4, 3, 3):
        est.add(d)
    assert est.estimate() == 4
    for _ in range(5):
        est.add(2)
    assert est.estimate() == 2  # The window forgets older delays.


def test_runtime_cfg_rejects_bad_values() -> None:
    with pytest.raises(ValueError, match="exec_horizon"):
        RuntimeCfg(exec_horizon=0)
    with pytest.raises(ValueError, match="execution"):
        RuntimeCfg(execution="fast")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="delay_quantile"):
        RuntimeCfg(delay_quantile=0.0)
