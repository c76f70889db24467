"""Where sweep points run, and where finished points are kept.

* executors: `Executor` (serial, in this process), `PoolExecutor` (a spawn-context process
  pool) and `DaskExecutor` (tasks on a Dask scheduler), all with one `map(fn, tasks, done,
  on_result)` that returns results in input order; `make_executor` picks one from the CLI
  options. Every point is a deterministic function of its arguments, so the result is the
  same whichever executor ran it.
* `PointStore`: the resumable on-disk store of finished points (``--resume DIR``).

No simulation logic here: `simulator.sweep` decides which points to run.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from .specs import SpecError

if TYPE_CHECKING:
    from .scenario import Scenario


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
        if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int) or workers < 1):
            raise SpecError(f"--workers {workers!r}: must be an integer >= 1")
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


class PointStore:
    """Finished sweep points kept on disk, so an interrupted sweep can resume (`--resume DIR`).

    ``DIR/points.jsonl``: a header line ``{"llmsim_sweep_points": 1, "scenario": ..., "sweep":
    ...}`` (the requested sweep), then one line per finished point ``{"key": ..., "summary":
    ...}``, appended with flush + fsync as each point completes. A point's key is its
    curve's full scenario dict and its rate (canonical JSON), so a kept point is reused only
    for exactly the same simulation. A torn last line (the process killed mid-write) is
    ignored. `open` starts a fresh file; `resume` loads one and refuses it when its header's
    scenario or sweep differs from the requested one.
    """

    FILE = "points.jsonl"

    def __init__(self, path: Any, header: dict[str, Any], points: dict[str, Any], append: bool) -> None:
        from pathlib import Path

        self.dir = Path(path)
        self.header = header
        self.points = points
        self.loaded = len(points)
        self._fh = open(self.dir / self.FILE, "a" if append else "w", encoding="utf-8")
        if not append:
            self._write(header)

    @staticmethod
    def make_header(scenario: Scenario, sweeps: Sequence[tuple[str, Sequence[Any]]]) -> dict[str, Any]:
        return json.loads(_canon({"llmsim_sweep_points": 2, "scenario": scenario.as_dict(),
                                  "sweep": [[k, list(v)] for k, v in sweeps],
                                  "inputs": input_digests(scenario, sweeps)}))

    @staticmethod
    def key(scenario_dict: dict[str, Any], rate: float) -> str:
        return _canon([scenario_dict, float(rate)])

    @classmethod
    def open(cls, path: Any, header: dict[str, Any]) -> PointStore:
        """A fresh store in `path` (created if needed; an old points file there is replaced)."""
        from pathlib import Path

        d = Path(path)
        try:
            d.mkdir(parents=True, exist_ok=True)
            return cls(d, header, {}, append=False)
        except OSError as e:
            raise SpecError(f"{d}: cannot keep sweep points there ({e.strerror or e})") from None

    @classmethod
    def resume(cls, path: Any, header: dict[str, Any]) -> PointStore:
        """The store kept in `path`; SpecError if there is none or it is another sweep's."""
        from pathlib import Path

        d = Path(path)
        f = d / cls.FILE
        where = f"--resume {path}"
        if not f.is_file():
            raise SpecError(f"{where}: no kept sweep points there ({cls.FILE} missing)")
        try:
            lines = f.read_text(encoding="utf-8").split("\n")
        except (OSError, UnicodeDecodeError) as e:
            raise SpecError(f"{where}: cannot read {cls.FILE} ({e})") from None
        try:
            saved = json.loads(lines[0])
            if not isinstance(saved, dict) or saved.get("llmsim_sweep_points") not in (1, 2):
                raise ValueError
        except ValueError:
            raise SpecError(f"{where}: {cls.FILE} is not an llmsim sweep points file") from None
        if saved.get("llmsim_sweep_points") != 2:
            raise SpecError(f"{where}: {cls.FILE} was written by an older llmsim (no input digests); "
                            "rerun without --resume to start over")
        for part in ("scenario", "sweep", "inputs"):
            if saved.get(part) != header[part]:
                diff = _differences(saved.get(part), header[part])
                raise SpecError(f"{where}: the kept points belong to a different {part} ({diff}); "
                                "rerun with the same options, or without --resume to start over")
        points: dict[str, Any] = {}
        for i, line in enumerate(lines[1:], start=2):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
                points[rec["key"]] = _checked_point(rec)
            except (ValueError, KeyError, TypeError):
                if i == len(lines) or (i == len(lines) - 1 and not lines[-1].strip()):
                    continue  # a torn last line: that point is simply run again
                raise SpecError(f"{where}: {cls.FILE}:{i}: not a kept point (corrupt file)") from None
        # rewrite without a torn tail, then append from there
        store = cls.open(d, saved)
        for k, v in points.items():
            store.add(k, v)
        store.loaded = len(points)
        return store

    def _write(self, obj: Any) -> None:
        self._fh.write(_canon(obj, sort=False) + "\n")
        self._fh.flush()
        os.fsync(self._fh.fileno())

    def add(self, key: str, summary: dict[str, Any]) -> None:
        """Keep one finished point; its line carries a digest so an edited line is refused."""
        self.points[key] = summary
        self._write({"key": key, "summary": summary, "sha256": _digest(key, summary)})

    def get(self, key: str) -> Any:
        return self.points.get(key)

    def __len__(self) -> int:
        return len(self.points)

    def close(self) -> None:
        if not self._fh.closed:
            self._fh.close()


def _plain(o: Any) -> Any:
    """JSON fallback: numpy scalars as Python numbers, tuples/sets as lists."""
    if hasattr(o, "item"):
        return o.item()
    if isinstance(o, (set, frozenset)):
        return sorted(o)
    raise TypeError(f"{type(o).__name__} is not JSON serialisable")


def _canon(obj: Any, sort: bool = True) -> str:
    """Exact JSON (floats round-trip; NaN/inf as NaN/Infinity), keys sorted for keys/headers."""
    return json.dumps(obj, sort_keys=sort, default=_plain, separators=(",", ":"))


def _digest(key: str, summary: Any) -> str:
    import hashlib

    return hashlib.sha256(_canon([key, summary]).encode()).hexdigest()


def _checked_point(rec: dict[str, Any]) -> Any:
    """A kept point's summary, or ValueError when its line was edited (digest) or its counts
    are impossible (negative or fractional request counts)."""
    summary = rec["summary"]
    if not isinstance(summary, dict) or rec.get("sha256") != _digest(rec["key"], summary):
        raise ValueError("digest")
    for k in ("completed", "failed"):
        v = summary.get(k)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 0):
            raise ValueError(k)
    return summary


def input_digests(scenario: Scenario, sweeps: Sequence[tuple[str, Sequence[Any]]]) -> dict[str, str]:
    """SHA-256 of every input file a sweep reads (model/hardware YAML, overlays and the files
    they name as `base:`, traces, scenario values that are paths), keyed by the path as given,
    plus the resolved model and hardware specs: a kept point is reused only when none changed."""
    import hashlib
    from pathlib import Path

    values = [v for v in scenario.as_dict().values() if isinstance(v, str)]
    values += [str(v) for _, vs in sweeps for v in vs]
    out: dict[str, str] = {}
    for v in values:
        try:
            p = Path(v)
            if p.is_file():
                out[v] = hashlib.sha256(p.read_bytes()).hexdigest()
        except (OSError, ValueError):
            continue
    try:
        from .catalog import load_hardware, load_model, spec_to_dict

        for name, spec in (("model", load_model(scenario.model)), ("hardware", load_hardware(scenario.hardware))):
            out[f"<resolved {name}>"] = hashlib.sha256(_canon(spec_to_dict(spec)).encode()).hexdigest()
    except (SpecError, OSError, ValueError, TypeError):
        pass  # an unloadable spec fails the run itself, with its own message
    return out


def _differences(a: Any, b: Any) -> str:
    if isinstance(a, dict) and isinstance(b, dict):
        keys = [k for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]
        return ", ".join(f"{k}: kept {a.get(k)!r}, asked {b.get(k)!r}" for k in keys[:3])
    return f"kept {a!r}, asked {b!r}"


__all__ = ["Executor", "SerialExecutor", "PoolExecutor", "DaskExecutor", "make_executor", "PointStore"]
