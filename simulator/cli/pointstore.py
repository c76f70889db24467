"""Finished sweep points kept on disk (`llmsim sweep --out DIR`, `--resume DIR`)."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from simulator.analysis.executors import canonical_json as _canon
from simulator.analysis.executors import point_key
from simulator.cli.outputs import open_log
from simulator.scenario import Scenario
from simulator.specs.checks import SpecError


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
        self.dir = Path(path)
        self.header = header
        self.points = points
        self.loaded = len(points)
        self._fh = open_log(self.dir / self.FILE, append)
        if not append:
            self._write(header)

    @staticmethod
    def make_header(scenario: Scenario, sweeps: Sequence[tuple[str, Sequence[Any]]]) -> dict[str, Any]:
        return json.loads(_canon({"llmsim_sweep_points": 2, "scenario": scenario.as_dict(),
                                  "sweep": [[k, list(v)] for k, v in sweeps],
                                  "inputs": input_digests(scenario, sweeps)}))

    key = staticmethod(point_key)

    @classmethod
    def open(cls, path: Any, header: dict[str, Any]) -> PointStore:
        """A fresh store in `path` (created if needed; an old points file there is replaced)."""
        d = Path(path)
        try:
            return cls(d, header, {}, append=False)
        except OSError as e:
            raise SpecError(f"{d}: cannot keep sweep points there ({e.strerror or e})") from None

    @classmethod
    def resume(cls, path: Any, header: dict[str, Any]) -> PointStore:
        """The store kept in `path`; SpecError if there is none or it is another sweep's."""
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
        from simulator.specs.catalog import load_hardware, load_model, spec_to_dict

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
