"""Shared by the reliability tests (test_reliability*.py, test_hostile*.py): bounded
hypothesis settings and the checks every hostile-input and CLI run must pass."""

from __future__ import annotations

import math
import re

from hypothesis import HealthCheck, settings


def fuzz(n: int):
    """Bounded, deterministic hypothesis settings for the reliability tests."""
    return settings(max_examples=n, deadline=None, derandomize=True, database=None,
                    suppress_health_check=list(HealthCheck))


def _one_line_error(r) -> str:
    """A CLI failure must be exit 2 with an `error:`/`Error:` line, never a Python exception."""
    assert r.exception is None or isinstance(r.exception, SystemExit), repr(r.exception)
    assert r.exit_code == 2, (r.exit_code, r.output)
    assert "Traceback" not in r.output
    errs = [ln for ln in r.output.splitlines() if re.match(r"^(error|Error): ", ln)]
    assert len(errs) == 1, r.output
    return errs[0]


def invoke(*args: str):
    """Run the CLI in-process with stderr kept apart from stdout."""
    from click.testing import CliRunner

    from simulator.cli.commands import main

    try:  # click < 8.2 mixes stderr into output unless told not to
        runner = CliRunner(mix_stderr=False)  # type: ignore[call-arg]
    except TypeError:
        runner = CliRunner()
    return runner.invoke(main, list(args))


def one_line_error(r, *words: str) -> str:
    """Exit 2, exactly one `error: ` line on stderr holding every word, no traceback."""
    assert r.exception is None or isinstance(r.exception, SystemExit), repr(r.exception)
    assert r.exit_code == 2, (r.exit_code, r.output)
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), r.stderr
    for w in words:
        assert w in lines[0], f"{w!r} not in {lines[0]!r}"
    return lines[0]


def load_script(relpath: str):
    """A repository script (e.g. benchmarks/ledger_property.py) imported as a module."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / relpath
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _check_json_numbers(obj, path: str = "") -> None:
    """No NaN/inf (written as null by the CLI anyway) and no negative time in a JSON result."""
    if isinstance(obj, dict):
        for k, v in obj.items():
            _check_json_numbers(v, f"{path}.{k}")
    elif isinstance(obj, list):
        for v in obj:
            _check_json_numbers(v, path)
    elif isinstance(obj, float):
        assert math.isfinite(obj), path
        if re.search(r"(_ms|_s|duration)$", path) and "slope" not in path:
            assert obj >= 0, (path, obj)
