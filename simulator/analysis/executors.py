"""Where sweep points run, and where finished points are kept.

* executors: `Executor` (serial, in this process), `PoolExecutor` (a spawn-context process
  pool) and `DaskExecutor` (tasks on a Dask scheduler), all with one `map(fn, tasks, done,
  on_result)` that returns results in input order; `make_executor` picks one from the CLI
  options. Every point is a deterministic function of its arguments, so the result is the
  same whichever executor ran it.
* `PointCache`, `point_key`: where a sweep keeps finished points (the CLI's `cli.pointstore`
  keeps them on disk, so an interrupted sweep resumes: ``--resume DIR``).

No simulation logic here: `simulator.analysis.sweep` decides which points to run.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from simulator.specs.checks import SpecError, check_int

if TYPE_CHECKING:
    pass


class Executor:
    """Runs `fn(*args)` for a list of argument tuples; results in input order."""

    name = "serial"

    def map(self, fn: Callable[..., Any], tasks: Sequence[tuple],
            done: Callable[[], None] | None = None,
            on_result: Callable[[int, Any], None] | None = None) -> list[Any]:
        """`on_result(i, result)` is called as each task finishes (before `done()`), so a
        caller can keep finished results even if a later task is interrupted."""
        out = []
        for i, args in enumerate(tasks):
            out.append(fn(*args))
            if on_result:
                on_result(i, out[-1])
            if done:
                done()
        return out

    def close(self) -> None:
        pass

    def __enter__(self) -> Executor:
        return self

    def __exit__(self, exc_type: Any, *exc: Any) -> None:
        if exc_type is not None:
            self.abort()
        self.close()

    def abort(self) -> None:
        """Stop at once (an exception or a signal is in flight): nothing by default."""


SerialExecutor = Executor


def _die_with_parent(parent_pid: int) -> None:
    """Pool-worker initializer: the worker ends when the process that started it does, even
    after `kill -9` of that process (which runs no cleanup): a daemon thread polls the parent
    id once a second and exits when the worker has been reparented. (Not prctl
    PR_SET_PDEATHSIG: it fires when the parent *thread* that spawned the worker ends, which
    would kill a pool still in use when a Python-API caller's thread exits.)"""
    import threading
    import time

    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(1.0)
        os._exit(1)

    if os.getppid() != parent_pid:  # the parent died while this worker started
        os._exit(1)
    threading.Thread(target=watch, daemon=True, name="llmsim-parent-watch").start()


class PoolExecutor(Executor):
    """A `concurrent.futures.ProcessPoolExecutor` (spawn context), started on first use."""

    name = "process-pool"

    def __init__(self, workers: int | None = None) -> None:
        check_int("--workers", workers, optional=True)
        self.workers = workers or os.cpu_count() or 1
        self._pool: Any = None

    def map(self, fn: Callable[..., Any], tasks: Sequence[tuple],
            done: Callable[[], None] | None = None,
            on_result: Callable[[int, Any], None] | None = None) -> list[Any]:
        if len(tasks) <= 1:
            return super().map(fn, tasks, done, on_result)
        import concurrent.futures as cf
        import multiprocessing

        if self._pool is None:
            self._pool = cf.ProcessPoolExecutor(self.workers, mp_context=multiprocessing.get_context("spawn"),
                                                initializer=_die_with_parent, initargs=(os.getpid(),))
        futs = {self._pool.submit(fn, *args): i for i, args in enumerate(tasks)}
        out: list[Any] = [None] * len(tasks)
        try:
            for f in cf.as_completed(futs):
                out[futs[f]] = f.result()
                if on_result:
                    on_result(futs[f], out[futs[f]])
                if done:
                    done()
        except BaseException:
            for f in futs:
                f.cancel()
            raise
        return out

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None

    def abort(self) -> None:
        """Terminate the workers now rather than wait for their running points."""
        if self._pool is None:
            return
        for p in list(getattr(self._pool, "_processes", {}).values()):
            p.terminate()
        self._pool.shutdown(wait=True, cancel_futures=True)
        self._pool = None


class DaskExecutor(Executor):
    """Points as tasks on a Dask scheduler (`distributed.Client(address)`). The workers need
    this package installed (`pip install ".[dask]"` from a checkout)."""

    name = "dask"

    def __init__(self, address: str) -> None:
        try:
            from distributed import Client
        except ImportError:
            raise SpecError(f"--dask {address}: Dask is not installed; pip install \".[dask]\" in an llmsim checkout") from None
        try:
            self.client = Client(address, timeout="20s")
        except (OSError, TimeoutError, ValueError) as e:
            raise SpecError(f"--dask {address}: cannot connect to the Dask scheduler ({e})") from None
        self.address = address

    def map(self, fn: Callable[..., Any], tasks: Sequence[tuple],
            done: Callable[[], None] | None = None,
            on_result: Callable[[int, Any], None] | None = None) -> list[Any]:
        from distributed import as_completed

        futs = [self.client.submit(fn, *args, pure=False) for args in tasks]
        index = {f.key: i for i, f in enumerate(futs)}
        out: list[Any] = [None] * len(tasks)
        try:
            for f in as_completed(futs):
                out[index[f.key]] = f.result()
                if on_result:
                    on_result(index[f.key], out[index[f.key]])
                if done:
                    done()
        except BaseException:
            self.client.cancel(futs)
            raise
        return out

    def close(self) -> None:
        self.client.close()


def usable_cpus() -> int:
    """CPUs this process may run on (its affinity mask where the OS has one)."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except AttributeError:  # macOS, Windows
        return os.cpu_count() or 1


class AutoExecutor(PoolExecutor):
    """The default: serial until a process pool pays for itself.

    Tasks run in this process, each timed; once the serial time still to go, estimated as
    (mean task time) x (tasks left), exceeds `POOL_WORTH_S` and this process may use at least
    `POOL_MIN_CPUS` CPUs, the remaining tasks (and every later `map`) go to a pool of one
    worker per CPU. Why: a spawn-context worker imports numpy, pandas and llmsim (about 0.7 s
    alone, more under load) and competes with the parent for the same cores, so on 2 CPUs the
    pool is slower than serial (README sweep: 6.8 s vs 4.4 s) and on short runs it never
    repays its start-up. Results are identical either way (every point is deterministic)."""

    name = "auto"
    POOL_MIN_CPUS = 3
    POOL_WORTH_S = 5.0

    def __init__(self, cpus: int | None = None, clock: Callable[[], float] | None = None) -> None:
        import time

        super().__init__(cpus or usable_cpus())
        self.clock = clock or time.perf_counter
        self.task_s: list[float] = []

    def pool_pays(self, tasks_left: int) -> bool:
        if self.workers < self.POOL_MIN_CPUS or not self.task_s or tasks_left < 2:
            return False
        return sum(self.task_s) / len(self.task_s) * tasks_left > self.POOL_WORTH_S

    def map(self, fn: Callable[..., Any], tasks: Sequence[tuple],
            done: Callable[[], None] | None = None,
            on_result: Callable[[int, Any], None] | None = None) -> list[Any]:
        out: list[Any] = [None] * len(tasks)
        i = 0
        while i < len(tasks) and self._pool is None and not self.pool_pays(len(tasks) - i):
            t0 = self.clock()
            out[i] = fn(*tasks[i])
            self.task_s.append(self.clock() - t0)
            if on_result:
                on_result(i, out[i])
            if done:
                done()
            i += 1
        if i < len(tasks):
            start = i

            def shifted(j: int, r: Any) -> None:
                if on_result:
                    on_result(start + j, r)

            out[start:] = super().map(fn, tasks[start:], done, shifted)
        return out


def make_executor(serial: bool = False, workers: int | None = None, dask: str | None = None) -> Executor:
    """The executor the options ask for: --serial, --dask ADDRESS, a process pool of
    --workers processes, or by default `AutoExecutor` (serial unless a pool pays off)."""
    if dask and serial:
        raise SpecError("--serial and --dask: choose one")
    if dask:
        return DaskExecutor(dask)
    if serial or workers == 1:
        return Executor()
    if workers is None:
        return AutoExecutor()
    return PoolExecutor(workers)


class PointCache(Protocol):
    """Where a sweep keeps finished points, keyed by `point_key` (the CLI's `PointStore` keeps
    them on disk, so an interrupted sweep resumes)."""

    def get(self, key: str) -> Any: ...

    def add(self, key: str, summary: dict[str, Any]) -> None: ...


def point_key(scenario_dict: dict[str, Any], rate: float) -> str:
    """A sweep point's key: its curve's full scenario dict and its rate, as canonical JSON (a
    kept point is reused only for exactly the same simulation)."""
    return canonical_json([scenario_dict, float(rate)])


def _plain(o: Any) -> Any:
    """JSON fallback: numpy scalars as Python numbers, tuples/sets as lists."""
    if hasattr(o, "item"):
        return o.item()
    if isinstance(o, (set, frozenset)):
        return sorted(o)
    raise TypeError(f"{type(o).__name__} is not JSON serialisable")


def canonical_json(obj: Any, sort: bool = True) -> str:
    """Exact JSON (floats round-trip; NaN/inf as NaN/Infinity), keys sorted for keys/headers."""
    return json.dumps(obj, sort_keys=sort, default=_plain, separators=(",", ":"))


__all__ = ["Executor", "PoolExecutor", "DaskExecutor", "make_executor", "PointCache", "point_key"]
