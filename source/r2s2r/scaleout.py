"""Independent tasks over indices, in local worker processes or as Ray tasks.

``run_tasks(job, indices, workers, ray)`` calls ``job.run(state, i)`` for each index, where
``state = job.setup(*job.args)`` is built once per worker process (and again after the job
changes), and yields ``(i, result)`` in the order the tasks finish; ``in_order`` puts them
back in index order. Without ``ray`` the tasks run in ``workers`` local spawn processes;
with ``ray`` (a cluster address, ``auto``, or ``local`` for a cluster of this machine's
own) they run as Ray tasks. A task whose worker process dies (killed, out of memory, a
crash in native code) runs again, up to ``retries`` times; an exception raised by the task
itself is not retried: it stops the run, naming the index. ``job.setup``, ``job.run`` and
``job.args`` must be picklable (module-level functions, plain data), and on a Ray cluster
r2s2r must be importable on every node.

A task is a function of its index and the job only, so where and how often it ran does
not change its result: that is what keeps a scaled-out run's output the same as a
single-process one.
"""

from __future__ import annotations

import logging
import pickle
import signal
from collections.abc import Callable, Iterable, Iterator
from collections.abc import Generator as Stream
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from itertools import islice
from multiprocessing import get_context
from typing import Any, Generic, TypeVar

from r2s2r.optional import missing_extra

log = logging.getLogger("r2s2r.scaleout")
S = TypeVar("S")
R = TypeVar("R")
# A worker process that dies runs its task again this many times before the run fails.
RETRIES = 3


class ScaleoutError(RuntimeError):
    """A task that failed (its own error, or its worker died more than ``retries`` times);
    ``index`` names it (None: no task in particular)."""

    def __init__(self, message: str, index: int | None = None) -> None:
        super().__init__(message)
        self.index = index


class ClusterUnreachable(ScaleoutError, ValueError):
    """A ``--ray`` address with no Ray cluster to connect to (bad input: the CLI says so)."""


@dataclass(frozen=True)
class Job(Generic[S, R]):
    """What every task of a run shares: ``setup(*args)`` makes a worker's state (once per
    process), ``run(state, i)`` does task ``i``."""

    setup: Callable[..., S]
    run: Callable[[S, int], R]
    args: tuple[Any, ...] = field(default=())


# The state of the job this worker process ran last: (its pickled key, the state).
_WORKER_STATE: list[Any] = []


def _task(job: Job[Any, R], i: int) -> R:
    """Task ``i`` in a worker process (the job's state is built on its first task there)."""
    key = pickle.dumps((job.setup, job.args))
    if not _WORKER_STATE or _WORKER_STATE[0] != key:
        _WORKER_STATE.clear()
        _WORKER_STATE.extend((key, job.setup(*job.args)))
    return job.run(_WORKER_STATE[1], i)


def run_tasks(
    job: Job[Any, R],
    indices: Iterable[int],
    workers: int = 1,
    ray: str | None = None,
    retries: int = RETRIES,
) -> Stream[tuple[int, R], None, None]:
    """``(i, job.run(state, i))`` for each index, as the tasks finish (see the module
    docstring); ``2 * workers`` tasks are in flight (with Ray and ``workers`` 1: twice the
    cluster's CPUs). Closing the stream stops the tasks not yet finished."""
    if workers < 1:
        raise ValueError(f"workers: expected at least 1, got {workers}")
    if ray is not None:
        return _ray_tasks(job, iter(indices), workers, ray, retries)
    return _local_tasks(job, iter(indices), workers, retries)


def in_order(
    results: Iterable[tuple[int, R]], order: Iterable[int]
) -> Stream[tuple[int, R], None, None]:
    """``results`` (in any order) in the order of ``order``, each yielded as soon as the
    ones before it are in."""
    waiting: dict[int, R] = {}
    it = iter(results)
    try:
        for want in order:
            while want not in waiting:
                try:
                    i, result = next(it)
                except StopIteration:
                    return
                waiting[i] = result
            yield want, waiting.pop(want)
    finally:
        close = getattr(it, "close", None)
        if close is not None:
            close()  # Stops the tasks still running.


# ------------------------------------------------------------------ local processes
def _local_tasks(
    job: Job[Any, R], indices: Iterator[int], workers: int, retries: int
) -> Stream[tuple[int, R], None, None]:
    deaths: dict[int, int] = {}
    pool = _pool(workers)
    pending: dict[Future[R], int] = {}
    try:
        for i in islice(indices, 2 * workers):
            pending[pool.submit(_task, job, i)] = i
        while pending:
            done, _ = wait(pending, return_when=FIRST_COMPLETED)
            if any(isinstance(f.exception(), BrokenProcessPool) for f in done):
                # A worker died: every task in flight is lost with the pool; they run again.
                lost = sorted(pending.values())
                for i in lost:
                    deaths[i] = deaths.get(i, 0) + 1
                    if deaths[i] > retries:
                        raise ScaleoutError(
                            f"task {i}: its worker process died {deaths[i]} times (retries: "
                            f"{retries}); see the log above for its last output",
                            i,
                        )
                log.warning("a worker process died; tasks %s run again", lost)
                pool.shutdown(wait=True, cancel_futures=True)
                pool = _pool(workers)
                pending = {pool.submit(_task, job, i): i for i in lost}
                continue
            for future in done:
                i = pending.pop(future)
                err = future.exception()
                if err is not None:
                    raise ScaleoutError(f"task {i} failed: {err!r}", i) from err
                nxt = next(indices, None)
                if nxt is not None:
                    pending[pool.submit(_task, job, nxt)] = nxt
                yield i, future.result()
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def _pool(workers: int) -> ProcessPoolExecutor:
    return ProcessPoolExecutor(workers, mp_context=get_context("spawn"), initializer=_worker_init)


def _worker_init() -> None:
    """Ctrl-C reaches the whole process group: this process decides what stops (it closes
    the run), so a worker does not die of it in the middle of a task."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


# ------------------------------------------------------------------------ Ray tasks
def check_address(address: str | None) -> str | None:
    """A ``--ray`` value as given (None: no cluster); an empty one is refused."""
    if address is not None and not address.strip():
        raise ValueError(
            "--ray: expected a Ray cluster's address (HOST:PORT, ray://HOST:PORT, auto or "
            "local), got an empty string (is RAY_ADDRESS set to nothing?)"
        )
    return address


def import_ray() -> Any:
    """The ``ray`` package (the ``ray`` extra), imported here only."""
    try:
        import ray
    except ImportError as err:
        raise missing_extra(err, "ray") from err
    return ray


def _ray_tasks(
    job: Job[Any, R], indices: Iterator[int], workers: int, address: str, retries: int
) -> Stream[tuple[int, R], None, None]:
    ray = import_ray()
    connected = not ray.is_initialized()
    if connected:
        try:
            ray.init(address=None if address == "local" else address, log_to_driver=True)
        except (ConnectionError, RuntimeError, ValueError) as err:
            raise ClusterUnreachable(
                f"--ray {address}: cannot connect to a Ray cluster there ({err})"
            ) from err
    pending: dict[Any, int] = {}
    try:
        remote = ray.remote(max_retries=retries, retry_exceptions=False)(_task)
        job_ref = ray.put(job)
        if workers == 1:
            workers = max(1, int(ray.cluster_resources().get("CPU", 1)))
        for i in islice(indices, 2 * workers):
            pending[remote.remote(job_ref, i)] = i
        while pending:
            (ref,), _ = ray.wait(list(pending), num_returns=1)
            i = pending.pop(ref)
            try:
                result = ray.get(ref)
            except (ray.exceptions.WorkerCrashedError, ray.exceptions.NodeDiedError) as err:
                raise ScaleoutError(
                    f"task {i}: its Ray worker died more than {retries} times ({err})", i
                ) from err
            except ray.exceptions.RayTaskError as err:
                raise ScaleoutError(f"task {i} failed on the Ray cluster: {err}", i) from err
            nxt = next(indices, None)
            if nxt is not None:
                pending[remote.remote(job_ref, nxt)] = nxt
            yield i, result
    finally:
        for ref in pending:
            ray.cancel(ref)
        if connected:
            ray.shutdown()
