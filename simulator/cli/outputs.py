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
* `check_outputs`: the one check every command runs before computing, over every output
  option it has (`Target`s: a file, a folder replaced as a set, or files added to a folder):
  each writable, no two writing the same file (or one a file where another needs a folder),
  none overwriting an input, `--label` / `--result-filename` kept inside `--result-dir`.

This is the only module of the package that writes to the file system
(`tests/test_architecture.py` checks it): other modules render bytes or text and hand them here.
"""

from __future__ import annotations

import os
import re
import shutil
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

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
        raise SpecError(f"{what}: cannot write in folder {d} ({e.strerror or e})") from None
    finally:
        try:
            probe.unlink()
        except OSError:
            pass


def _check_path(path: Any, option: str, want_dir: bool) -> Path:
    if path is None or str(path).strip() == "":
        raise SpecError(f"{option}: {path!r} is empty; give a {'folder' if want_dir else 'file'} path")
    if "\0" in str(path):
        raise SpecError(f"{option}: {str(path)!r} contains a NUL character; give a plain path")
    p = Path(path)
    what = f"{option}: {path}"
    if os.path.islink(p) and not p.exists():
        raise SpecError(f"{what}: a dangling symbolic link (to {os.readlink(p)}); remove it or point it somewhere")
    if p.exists():
        if want_dir and not p.is_dir():
            raise SpecError(f"{what}: exists and is not a folder")
        if not want_dir and p.is_dir():
            raise SpecError(f"{what}: is a folder; give a file name")
        if not want_dir and not p.is_file():  # a FIFO or a device: the rename would replace it
            raise SpecError(f"{what}: is not a regular file (a device, FIFO or socket); give a file path")
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
    except BaseException as e:
        try:
            tmp.unlink()
        except OSError:
            pass
        if isinstance(e, OSError) and e.errno is not None:  # name the file asked for, not the hidden temporary
            raise OSError(e.errno, e.strerror, str(path)) from None
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
        try:
            return self._enter()
        except OSError as e:  # name the folder asked for, not the hidden staging one
            raise OSError(e.errno, e.strerror, str(self.target)) from None

    def _enter(self) -> Path:
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
        except BaseException as e:
            shutil.rmtree(self.stage, ignore_errors=True)
            if isinstance(e, OSError) and e.errno is not None:
                raise OSError(e.errno, e.strerror, str(self.target)) from None
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


# --------------------------------------------------------------------------- every output, checked at once


@dataclass(frozen=True)
class Target:
    """One output option: `option` (as the user spells it) writes `path`. `names` None: `path`
    is one file. Otherwise `path` is a folder and `names` are the files written in it, the
    folder replaced as a set when `replaces` (`OutputSet`) or added to when not (`--result-dir`,
    `--resume`). `pattern`: a regular expression for a file name known only after the run (vLLM's
    default result name ends in the date), matched against the other options' files."""

    option: str
    path: str
    names: tuple[str, ...] | None = None
    replaces: bool = False
    pattern: str | None = None

    def files(self) -> list[Path]:
        base = _real(self.path)
        return [base] if self.names is None else [base / n for n in self.names]


def out_file(option: str, path: Any) -> Target | None:
    """A one-file output option (`--metrics-out`, `--html`, `--points`, a file `--out`); None if not given."""
    return None if path is None else Target(option, str(path))


def out_set(option: str, path: Any, names: Iterable[str]) -> Target | None:
    """A folder written as a set (`--out DIR`): these file names, the folder replaced (OutputSet)."""
    return None if path is None else Target(option, str(path), tuple(names), replaces=True)


def _real(path: Any) -> Path:
    """The file a write lands on: symbolic links followed (as `write_atomic` and `OutputSet` do)."""
    return Path(os.path.realpath(os.path.abspath(str(path))))


#: --label / --result-filename: what a file name component may not contain
_NAME_LIMIT = 255


def _plain_name(option: str, name: str, what: str) -> None:
    if "\0" in name:
        raise SpecError(f"{option}: {name!r} contains a NUL character; {what}")
    if "/" in name or "\\" in name:
        raise SpecError(f"{option}: {name!r} contains a path separator; {what}")
    if name in ("", ".", ".."):
        raise SpecError(f"{option}: {name!r} is not a file name; {what}")
    if len(name.encode("utf-8", "surrogateescape")) > _NAME_LIMIT:
        raise SpecError(f"{option}: the file name is {len(name.encode('utf-8', 'surrogateescape'))} bytes; "
                        f"at most {_NAME_LIMIT} allowed")


def check_file_name(option: str, name: str) -> None:
    """A file name that stays in its folder: no separator, not '.'/'..', no NUL, <= 255 bytes."""
    _plain_name(option, name, "give a plain file name (the folder goes in --result-dir)")


def vllm_result_target(opts: dict[str, Any]) -> Target | None:
    """The vLLM result file of `simulate --save-result` (`opts`: the result-file options), checked
    to stay inside --result-dir: with --result-dir, --result-filename is a plain name (vLLM joins
    the two; without it, vLLM takes --result-filename as a path, and so does this); --label, which
    vLLM puts at the start of its default name (`{label}-{rate}qps-...-{date}.json`), has no
    separator. None when no result file is written."""
    if not (opts.get("save_result") or opts.get("append_result") or opts.get("result_dir")
            or opts.get("result_filename")):
        return None
    folder = str(opts.get("result_dir") or ".")
    # the option a folder or collision error names: the folder's when one is given
    option = "--result-dir" if opts.get("result_dir") else None
    name = opts.get("result_filename")
    if name is not None and not opts.get("result_dir"):
        return Target("--result-filename", str(name))  # vLLM's: without --result-dir, a path of its own
    if name is not None:
        check_file_name("--result-filename", str(name))
        return Target(option or "--result-filename", folder, (str(name),))
    label = opts.get("label")
    if label is not None:
        # the label starts a file name: '..' alone would not escape, but with no separator
        # allowed nothing can, so the rule is the file name's rule
        _plain_name("--label", str(label), "it starts the result file name: give a label without "
                    "'/', '\\' or NUL (or name the file with --result-filename)")
    from simulator.cli.vllm_result import BACKEND  # the name's start without a label

    start = re.escape(str(label) if label else BACKEND)
    return Target(option or "--save-result", folder, (), pattern=rf"{start}-.*qps.*\.json")


def _check_named_files(t: Target) -> None:
    """A folder (or FIFO) where a folder option writes one of its files is refused: swapping the
    set in replaced it, deleting what the folder held (`--out D` with a folder D/summary.json)."""
    for f in t.files() if t.names else ():
        if os.path.lexists(f) and not (f.is_file() or os.path.islink(f)):
            raise SpecError(f"{t.option}: {t.path}: {f} exists and is not a regular file (a folder, FIFO "
                            "or device) where this option writes a file; move it or give another path")


def check_outputs(*targets: Target | None, inputs: Iterable[tuple[str, Any]] = ()) -> None:
    """Every output option of a command, checked before anything is computed (SpecError, one line
    naming the option and the path): each can be written (`check_out_file` / `check_out_dir`); no
    two options write the same file, or one a file where another needs a folder; none writes over
    a file the command reads (`inputs`: (option, path) pairs)."""
    ts = [t for t in targets if t is not None]
    for t in ts:
        _check_path(t.path, t.option, want_dir=t.names is not None)
        _check_named_files(t)
    owner: dict[Path, Target] = {}
    for t in ts:
        for f in t.files():
            other = owner.get(f)
            if other is not None and other is not t:
                raise SpecError(f"{t.option} {t.path} and {other.option} {other.path} both write {f}; "
                                "give them different paths")
            owner[f] = t
    for t in ts:  # a file of one option where another needs a folder (the same path or one above)
        for u in ts:
            if u is t:
                continue
            d = _real(u.path) if u.names is not None else _real(u.path).parent
            for f in t.files():
                if f == d or f in d.parents:
                    raise SpecError(f"{t.option} {t.path} writes the file {f}, but {u.option} {u.path} needs "
                                    "it as a folder; give them different paths")
                if u.pattern and f.parent == d and re.fullmatch(u.pattern, f.name):
                    raise SpecError(f"{t.option} {t.path} has the name {u.option} gives its result file in "
                                    f"{u.path}; give them different paths")
    for opt_in, p in inputs:
        if p is None or not os.path.isfile(str(p)):
            continue
        src = _real(p)
        for t in ts:
            if src in t.files():
                raise SpecError(f"{t.option} {t.path} would overwrite the input {opt_in} {p}; "
                                "give the output another path")


def temp_dir(prefix: str) -> Path:
    """A fresh private folder (a sweep's points when neither --out nor --resume names one)."""
    import tempfile

    return Path(tempfile.mkdtemp(prefix=prefix))


def remove_tree(path: Any) -> None:
    """Remove a folder this run created (errors ignored: it is only a temporary keep)."""
    shutil.rmtree(path, ignore_errors=True)


def open_log(path: Any, append: bool) -> IO[str]:
    """A line log kept as it grows (a sweep's `points.jsonl`): its folder created, opened to
    append or afresh. The caller flushes and fsyncs each line; a torn last line is its reader's
    to skip."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    return open(p, "a" if append else "w", encoding="utf-8")


def npz_path(path: Any) -> Path:
    """Where `save_table` writes: numpy's `.npz` suffix added when missing, as `np.savez` did."""
    p = Path(path)
    return p if p.suffix == ".npz" else p.with_name(p.name + ".npz")


def write_trace(w: Workload, path: str | Path) -> None:
    """Write `w` as a simple CSV trace (`arrived_at,num_prefill_tokens,num_decode_tokens`).

    The simple form has no place for `w.extra`: those columns are not written.

    Floats are written in shortest round-trip form, so `read_trace` gives back the same arrays.
    """
    import pandas as pd

    from simulator.workloads.traces.csv_formats import SIMPLE_COLUMNS

    write_atomic(path, pd.DataFrame(
        {SIMPLE_COLUMNS[0]: w.arrival_s, SIMPLE_COLUMNS[1]: w.input_len, SIMPLE_COLUMNS[2]: w.output_len}
    ).to_csv(index=False))


def save_table(table: ShareGPTTable, path: str | Path) -> Path:
    """Write `table` as a compressed .npz (uint32 counts), atomically, at `npz_path(path)`
    (returned)."""
    import io

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
    buf = io.BytesIO()
    np.savez_compressed(buf, **arrays)  # type: ignore[arg-type]
    out = npz_path(path)
    write_atomic(out, buf.getvalue())
    return out
