"""Shared by the reliability tests (test_reliability.py, test_reliability_inputs.py): bounded
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
