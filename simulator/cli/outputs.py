"""Output files as a set: checked before any work, staged, then swapped into place.

* `check_out_dir` / `check_out_file`: run before computing, so an unwritable `--out` (empty
  name, read-only folder, a parent that is a file, a dangling link) fails in well under a
  second with one line instead of after the whole run.
* `OutputSet`: a run's files are written into a hidden staging folder beside the target
  (same file system), then the staging folder replaces the target by two renames, so a
  reader sees the old set or the new set, never a mix (files of the old folder that this
  run does not write, e.g. a sweep's `points.jsonl`, are carried over). On any failure the
  staging folder is removed. A target that is a symlink is resolved: the link is kept and
  points at the new set.
* `write_atomic`: one file, through symlinks, with a short temporary name (a 255-byte file
  name still works), removed when the write fails (a full disk leaves nothing behind).
"""

from __future__ import annotations

import os
import shutil
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

from simulator.specs.checks import SpecError

if TYPE_CHECKING:  # the writers import numpy, pandas and the workload layer when they run
    from simulator.workloads.sharegpt import ShareGPTTable
    from simulator.workloads.workload import Workload


def _nearest_existing(p: Path) -> Path:
    while not os.path.lexists(p) and p != p.parent:
        p = p.parent
    return p


def _probe_dir(d: Path, what: str) -> None:
    """SpecError unless a file can be created in the existing directory `d`."""
    probe = d / f".llmsim-probe-{uuid.uuid4().hex[:8]}"
    try:
        with open(probe, "wb"):
            pass
    except OSError as e:
        raise SpecError(f"{what}: cannot write in {d} ({e.strerror or e})") from None
    finally:
        try:
            probe.unlink()
        except OSError:
            pass


def _check_path(path: Any, option: str, want_dir: bool) -> Path:
    if path is None or str(path).strip() == "":
        raise SpecError(f"{option}: {path!r} is empty; give a {'folder' if want_dir else 'file'} path")
    p = Path(path)
    what = f"{option} {path}"
    if os.path.islink(p) and not p.exists():
        raise SpecError(f"{what}: a dangling symbolic link (to {os.readlink(p)}); remove it or point it somewhere")
    if p.exists():
        if want_dir and not p.is_dir():
            raise SpecError(f"{what}: exists and is not a folder")
        if not want_dir and p.is_dir():
            raise SpecError(f"{what}: is a folder; give a file name")
    base = _nearest_existing(p.resolve().parent if not want_dir else p.resolve())
    if not base.is_dir():
        raise SpecError(f"{what}: {base} is a file, not a folder")
    if not want_dir and len(p.name.encode()) > 255:
        raise SpecError(f"{what}: file name is {len(p.name.encode())} bytes; at most 255 allowed")
    _probe_dir(p.resolve() if (want_dir and p.is_dir()) else base, what)
    return p


def check_out_dir(path: Any, option: str = "--out") -> Path:
    """The output folder `path`, after checking it can be created or replaced (SpecError if not)."""
    return _check_path(path, option, want_dir=True)


def check_out_file(path: Any, option: str = "--out") -> Path:
    """The output file `path`, after checking it can be written (SpecError if not)."""
    return _check_path(path, option, want_dir=False)


def write_atomic(path: Any, data: bytes | str) -> None:
    """Write a file so that an interrupted run never leaves a truncated one: a temporary
    sibling (short name), flushed to disk, renamed over the target; removed on failure."""
    path = Path(os.path.realpath(path))  # through symlinks: the link keeps pointing here
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f".llmsim-{os.getpid()}-{uuid.uuid4().hex[:8]}.tmp"
    raw = data if isinstance(data, bytes) else data.encode("utf-8")
    try:
        with open(tmp, "wb") as f:
            f.write(raw)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            tmp.unlink()
        except OSError:
            pass
        raise


class OutputSet:
    """`with OutputSet(out_dir) as d:` write files under `d`; on a clean exit they replace the
    target folder as one set; on an exception the staging folder is removed."""

    def __init__(self, target: Any) -> None:
        self.target = Path(os.path.realpath(target))
        tag = f"{os.getpid()}-{uuid.uuid4().hex[:6]}"
        self.stage = self.target.parent / f".llmsim-stage-{tag}"
        self.old = self.target.parent / f".llmsim-old-{tag}"

    def __enter__(self) -> Path:
        self.target.parent.mkdir(parents=True, exist_ok=True)
        cwd = Path(os.getcwd())
        # the working folder (or one above it) is never renamed away under the shell, and a
        # folder whose parent is read-only cannot be swapped: files are replaced one by one
        self.inplace = (cwd == self.target or self.target in cwd.parents
                        or not os.access(self.target.parent, os.W_OK))
        if self.inplace:
            self.target.mkdir(exist_ok=True)
            return self.target
        self.stage.mkdir()
        return self.stage

    def __exit__(self, exc_type: Any, *exc: Any) -> None:
        if self.inplace:
            return
        if exc_type is not None:
            shutil.rmtree(self.stage, ignore_errors=True)
            return
        try:
            self._commit()
        except BaseException:
            shutil.rmtree(self.stage, ignore_errors=True)
            raise

    def _commit(self) -> None:
        if self.target.is_dir():
            for entry in self.target.iterdir():  # keep what this run does not write
                dst = self.stage / entry.name
                if not os.path.lexists(dst):
                    _carry(entry, dst)
            os.replace(self.target, self.old)
            os.replace(self.stage, self.target)
            shutil.rmtree(self.old, ignore_errors=True)
        else:
            os.replace(self.stage, self.target)


def _carry(src: Path, dst: Path) -> None:
    if src.is_dir() and not src.is_symlink():
        shutil.copytree(src, dst, symlinks=True)
        return
    try:
        os.link(src, dst, follow_symlinks=False)
    except OSError:
        shutil.copy2(src, dst, follow_symlinks=False)


def write_trace(w: Workload, path: str | Path) -> None:
    """Write `w` as a simple CSV trace (`arrived_at,num_prefill_tokens,num_decode_tokens`).

    The simple form has no place for `w.extra`: those columns are not written.

    Floats are written in shortest round-trip form, so `read_trace` gives back the same arrays.
    """
    import pandas as pd

    from simulator.workloads.traces.csv_formats import SIMPLE_COLUMNS

    pd.DataFrame(
        {SIMPLE_COLUMNS[0]: w.arrival_s, SIMPLE_COLUMNS[1]: w.input_len, SIMPLE_COLUMNS[2]: w.output_len}
    ).to_csv(path, index=False)


def save_table(table: ShareGPTTable, path: str | Path) -> None:
    """Write `table` as a compressed .npz (uint32 counts)."""
    import numpy as np

    arrays: dict[str, np.ndarray] = {
        "prompt_chars": table.prompt_chars.astype(np.uint32),
        "completion_chars": table.completion_chars.astype(np.uint32),
        "truncated": np.array(table.truncated),
        "source": np.array(table.source),
    }
    for fam in table.prompt_tokens:
        arrays[f"prompt_tokens_{fam}"] = table.prompt_tokens[fam].astype(np.uint32)
        arrays[f"completion_tokens_{fam}"] = table.completion_tokens[fam].astype(np.uint32)
    if table.turn_tokens:
        arrays["turn_offsets"] = table.turn_offsets.astype(np.uint32)
        arrays["turn_chars"] = table.turn_chars.astype(np.uint32)
        for fam, arr in table.turn_tokens.items():
            arrays[f"turn_tokens_{fam}"] = arr.astype(np.uint32)
    np.savez_compressed(path, **arrays)  # type: ignore[arg-type]
