"""Issue 26, causes 3, 7 and 12: one output layer (every output option checked before the run,
no collisions, nothing written outside its folder) and `achieved_rate` with never-sent requests.

Each test fails on 46cef90 (the base of issue 26) and passes after; "before the run" is
asserted by making every computation raise (`no_work`), not by timing.
"""

from __future__ import annotations

import json
import math
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st
from reliability_helpers import _one_line_error, fuzz

from simulator.cli import commands as cli
from simulator.cli.outputs import write_atomic
from simulator.specs.checks import SpecError

ROOT = Path(__file__).resolve().parent.parent


def _run(args: list[str]):
    return CliRunner().invoke(cli.main, args)


def _error(args: list[str]) -> str:
    return _one_line_error(_run(args))


@pytest.fixture
def no_work(monkeypatch):
    """Any computation started is a failure: every output must be checked first."""
    from simulator import scenario
    from simulator.analysis import calibrate, plan, sweep, validate, whatif
    from simulator.cli import plots
    from simulator.workloads import sharegpt

    def boom(*a, **k):
        raise AssertionError("computed before checking the outputs")

    monkeypatch.setattr(scenario.Scenario, "run", boom)
    for mod, names in ((sweep, ["sweep"]), (plan, ["plan"]), (validate, ["validate"]), (calibrate, ["calibrate"]),
                       (whatif, ["kv_dtype_whatif", "speculative_whatif", "hardware_whatif"]),
                       (plots, ["roofline_bytes"]), (sharegpt, ["build_table"])):
        for n in names:
            monkeypatch.setattr(mod, n, boom)


# --------------------------------------------------------------------------- cause 3: every output option, first

#: every command that writes, as a user would call it (inputs that need not exist: the
#: outputs are checked first)
COMMANDS = {
    "simulate": ["simulate", "-n", "5"],
    "sweep": ["sweep", "-n", "5", "--rates", "1,2"],
    "plan": ["plan", "-n", "5", "-r", "1"],
    "whatif-kv": ["whatif", "kv-dtype", "-n", "5"],
    "whatif-spec": ["whatif", "speculative", "-n", "5"],
    "whatif-hw": ["whatif", "hardware", "-H", "a100-80gb", "-n", "5"],
    "validate": ["validate", "MISSING"],
    "calibrate": ["calibrate", "MISSING", "-H", "h100-sxm"],
    "roofline": ["roofline", "-m", "llama-3.1-8b", "-H", "h100-sxm"],
    "sharegpt-table": ["sharegpt-table"],
}

#: (command, option, file name it is given, extra flags): every output option of every command
OUTPUT_OPTIONS = [
    ("simulate", "--out", "o", []), ("simulate", "--metrics-out", "m.prom", []),
    ("simulate", "--html", "r.html", []), ("simulate", "--result-dir", "r", ["--save-result"]),
    ("simulate", "--result-filename", "r.json", ["--save-result"]),
    ("simulate", "--result-filename", "r.json", ["--append-result"]),
    ("sweep", "--out", "o", []), ("sweep", "--resume", "o", []), ("sweep", "--html", "r.html", []),
    ("plan", "--out", "o", []), ("plan", "--html", "r.html", []),
    ("whatif-kv", "--out", "o", []), ("whatif-spec", "--out", "o", []), ("whatif-hw", "--out", "o", []),
    ("validate", "--out", "o", []), ("validate", "--points", "p.csv", []), ("validate", "--html", "r.html", []),
    ("calibrate", "--out", "o.yaml", []), ("roofline", "--out", "o.png", []),
    ("sharegpt-table", "--out", "t.npz", []),
]


def _argv(cmd: str, tmp_path: Path) -> list[str]:
    return [str(tmp_path / "missing.csv") if a == "MISSING" else a for a in COMMANDS[cmd]]


@pytest.mark.parametrize("cmd,option,name,extra", OUTPUT_OPTIONS,
                         ids=[f"{c}{o}{'+' + e[0] if e else ''}" for c, o, _, e in OUTPUT_OPTIONS])
def test_every_output_option_is_checked_before_the_run_and_named(tmp_path, no_work, cmd, option, name, extra):
    """An output under a regular file cannot be written: refused before any work, the error
    naming the option and the path (46cef90: --result-dir / --result-filename / sharegpt-table
    --out were checked only after the run, and no message put the option first)."""
    blocker = tmp_path / "file"
    blocker.write_text("x")
    bad = blocker / "sub" / name
    line = _error([*_argv(cmd, tmp_path), *extra, option, str(bad)])
    assert line.startswith(f"error: {option}: "), line
    assert str(blocker) in line


def _sys_is_read_only() -> bool:
    probe = Path("/sys") / f"llmsim-probe-{os.getpid()}"
    try:
        probe.touch()
    except OSError:
        return True
    probe.unlink()
    return False


@pytest.mark.skipif(not _sys_is_read_only(), reason="needs a folder no one (not even root) can create files in")
@pytest.mark.parametrize("args,option", [
    (["--metrics-out", "/sys/llmsim-x.prom"], "--metrics-out"),
    (["--save-result", "--result-dir", "/sys/llmsim-r"], "--result-dir"),
    (["--save-result", "--result-filename", "/sys/llmsim-x.json"], "--result-filename"),
    (["--html", "/sys/llmsim-x.html"], "--html"),
])
def test_an_unwritable_folder_is_refused_before_the_run(no_work, args, option):
    """The issue's case: an unwritable path failed after the run with the hidden temporary file's
    name (`/sys/.llmsim-5823-b9e04a42.tmp: Permission denied`)."""
    line = _error(["simulate", "-n", "5", *args])
    assert line.startswith(f"error: {option}: /sys/llmsim-"), line
    assert ".llmsim-" not in line and ".tmp" not in line


@pytest.mark.parametrize("args,field", [
    (["--metadata", "no-equals-sign"], "metadata"),
    (["--metric-percentiles", "abc"], "percentile"),
    (["--percentile-metrics", "client_queue_time"], "client_queue_time"),  # needs --max-concurrency
    (["--label", "a" * 250], "--label"),  # the full file name would be > 255 bytes
])
def test_result_file_options_are_checked_before_the_run(no_work, args, field):
    line = _error(["simulate", "-n", "5", "--save-result", *args])
    assert field in line


def test_a_fifo_or_device_as_output_is_refused(tmp_path, no_work):
    """The atomic rename would replace a FIFO (or /dev/null) with a regular file."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    line = _error(["simulate", "-n", "5", "--metrics-out", str(fifo)])
    assert line.startswith("error: --metrics-out: ") and "not a regular file" in line
    assert fifo.is_fifo()


def test_a_failed_write_names_the_file_not_its_temporary(tmp_path, monkeypatch):
    target = tmp_path / "x.prom"

    def refuse(src, dst):
        raise PermissionError(13, "Permission denied", str(src))

    monkeypatch.setattr(os, "replace", refuse)
    with pytest.raises(OSError) as e:
        write_atomic(target, "data")
    assert e.value.filename == str(target)
    assert list(tmp_path.iterdir()) == []  # the temporary is gone


# --------------------------------------------------------------------------- cause 12: collisions

def _collide_cases(tmp: Path) -> list[tuple[list[str], tuple[str, str]]]:
    d, f = tmp / "D", tmp / "F.prom"
    model = tmp / "model.yaml"
    return [
        (["simulate", "-n", "5", "--out", str(d), "--metrics-out", str(d / "summary.json")], ("--metrics-out", "--out")),
        (["simulate", "-n", "5", "--out", str(d), "--html", str(d / "requests.csv")], ("--html", "--out")),
        (["simulate", "-n", "5", "--out", str(d), "--save-result", "--result-dir", str(d),
          "--result-filename", "timeline.png"], ("--result-dir", "--out")),
        (["simulate", "-n", "5", "--metrics-out", str(f), "--html", str(f)], ("--html", "--metrics-out")),
        (["simulate", "-n", "5", "--metrics-out", str(f), "--save-result", "--result-filename", str(f)],
         ("--result-filename", "--metrics-out")),
        (["simulate", "-n", "5", "--out", str(tmp / "E"), "--metrics-out", str(tmp / "E")], ("--metrics-out", "--out")),
        (["simulate", "-n", "5", "--metrics-out", str(f), "--save-result", "--result-dir", str(f / "sub")],
         ("--metrics-out", "--result-dir")),
        (["simulate", "-n", "5", "--out", str(d), "--metrics-out", str(tmp / "link" / "summary.json")],
         ("--metrics-out", "--out")),  # the same file through a symbolic link to D
        (["simulate", "-n", "5", "--save-result", "--result-dir", str(d), "--label", "lbl",
          "--metrics-out", str(d / "lbl-inf-qps-Llama-3.1-8B-20260101-000000.json")], ("--metrics-out", "--result-dir")),
        (["simulate", "-n", "5", "-m", str(model), "--metrics-out", str(model)], ("--metrics-out", "--model")),
        (["sweep", "-n", "5", "--rates", "1", "--out", str(d), "--html", str(d / "sweep.json")], ("--html", "--out")),
        (["sweep", "-n", "5", "--rates", "1", "--out", str(d), "--html", str(d / "points.jsonl")], ("--html", "--out")),
        (["plan", "-n", "5", "-r", "1", "--out", str(d), "--html", str(d / "plan.png")], ("--html", "--out")),
        (["validate", str(tmp / "m.csv"), "--out", str(d), "--points", str(d / "validation.csv")], ("--points", "--out")),
        (["validate", str(tmp / "m.csv"), "--points", str(tmp / "m.csv")], ("--points", "FILE")),
        (["calibrate", str(tmp / "m.csv"), "-H", "h100-sxm", "--out", str(tmp / "m.csv")], ("--out", "FILE")),
    ]


@pytest.mark.parametrize("i", range(16))
def test_two_options_writing_the_same_file_are_refused(tmp_path, no_work, i):
    """`--out D --metrics-out D/summary.json` replaced the metrics silently (46cef90); now any two
    options (or an output and an input) resolving to one file are refused before the run, in one
    line naming both, and nothing is touched."""
    d = tmp_path / "D"
    d.mkdir()
    (tmp_path / "link").symlink_to(d)
    (d / "summary.json").write_text("old")
    (tmp_path / "m.csv").write_text("measured\n")
    shutil.copy(ROOT / "model_specs" / "llama-3.1-8b.yaml", tmp_path / "model.yaml")
    cases = _collide_cases(tmp_path)
    assert len(cases) == 16
    args, (a, b) = cases[i]
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    line = _error(args)
    assert a in line and b in line, line
    assert {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == before


def test_outputs_side_by_side_in_one_folder_all_survive(tmp_path):
    """Not a collision: --metrics-out, --html and the result file inside --out's folder are
    carried over when the set is swapped in (no option is refused that works)."""
    d = tmp_path / "D"
    r = _run(["simulate", "-n", "3", "-q", "--out", str(d), "--metrics-out", str(d / "metrics.prom"),
              "--html", str(d / "report.html"), "--save-result", "--result-dir", str(d)])
    assert r.exit_code == 0, r.output
    names = sorted(p.name for p in d.iterdir())
    assert {"summary.json", "requests.csv", "timeline.csv", "timeline.png", "metrics.prom", "report.html"} <= set(names)
    assert len([n for n in names if n.startswith("llmsim-") and n.endswith(".json")]) == 1


@pytest.mark.parametrize("label", ["../../x", "a/b", "/abs", "..", "a\\b", "x\x00y"])
def test_a_label_that_leaves_the_result_dir_is_refused(tmp_path, no_work, label):
    """vLLM's default result name is `{label}-{rate}qps-...-{date}.json` joined to --result-dir:
    `--label ../../x` wrote two folders above it (46cef90)."""
    rd = tmp_path / "a" / "b" / "R"
    line = _error(["simulate", "-n", "5", "--save-result", "--result-dir", str(rd), "--label", label])
    assert line.startswith("error: --label: ") and "--result-filename" in line
    assert [p for p in tmp_path.rglob("*")] == []


@pytest.mark.parametrize("name", ["../x.json", "/tmp/x.json", "a/b.json", "x\x00.json", "a" * 300 + ".json",
                                  ".", ".."])
def test_a_result_filename_that_leaves_the_result_dir_is_refused(tmp_path, no_work, name):
    rd = tmp_path / "R"
    line = _error(["simulate", "-n", "5", "--save-result", "--result-dir", str(rd), "--result-filename", name])
    assert line.startswith("error: --result-filename: "), line
    assert [p for p in tmp_path.rglob("*")] == []


_NAME_CHARS = st.characters(blacklist_categories=("Cs",), blacklist_characters="/\\\x00")


@fuzz(150)
@given(label=st.text(_NAME_CHARS, min_size=1, max_size=60), sep=st.sampled_from(["/", "\\", "\x00"]),
       at=st.integers(0, 60))
def test_property_the_result_file_stays_inside_result_dir(label, sep, at):
    """Any label without a separator gives a file directly in --result-dir (vLLM's name built as
    vLLM builds it); the same label with a separator anywhere is refused naming --label."""
    from datetime import datetime

    from simulator.cli import outputs
    from simulator.cli.vllm_result import result_filename

    rd = Path("/results/R")
    if label not in (".", ".."):
        t = outputs.vllm_result_target({"save_result": True, "result_dir": str(rd), "label": label})
        assert t is not None and t.path == str(rd)
        header = {"label": label, "backend": "vllm", "model_id": "meta-llama/Llama-3.1-8B", "request_rate": "inf",
                  "max_concurrency": None, "date": datetime(2026, 1, 1).strftime("%Y%m%d-%H%M%S")}
        name = result_filename(header)
        assert os.path.dirname(os.path.normpath(rd / name)) == str(rd)
    bad = label[:at] + sep + label[at:]
    with pytest.raises(SpecError, match="^--label: "):
        outputs.vllm_result_target({"save_result": True, "result_dir": str(rd), "label": bad})


# --------------------------------------------------------------------------- cause 7: achieved_rate

def _result(arrival, finish, status):
    from simulator.serving.records import SimResult

    n = len(arrival)
    nan = np.full(n, np.nan)
    return SimResult(arrival_s=np.array(arrival, float), input_len=np.full(n, 10), output_len=np.full(n, 2),
                     first_token_s=np.array(finish, float) - 0.1, finish_s=np.array(finish, float),
                     preemptions=np.zeros(n, int), replica=np.zeros(n, int), status=np.array(status),
                     reasons={}, itl_values_s=nan[:0], itl_counts=np.zeros(0, int), timeline={},
                     meta={"offered_rate": 2.0})


def test_achieved_rate_ignores_requests_never_sent():
    """By hand: requests sent at 0.5, 1.0, 1.5 finish at 2.0, 3.0, 4.5; one sent at 2.0 is cut off
    by the cap; two were never sent (NaN arrival). achieved = 3 completed / (4.5 - 0.5) s = 0.75
    req/s (46cef90: NaN, printed as null)."""
    from simulator.metrics.summary import stability
    from simulator.serving.records import COMPLETED, REJECTED

    C, R = COMPLETED, REJECTED
    res = _result([0.5, 1.0, 1.5, 2.0, np.nan, np.nan], [2.0, 3.0, 4.5, np.nan, np.nan, np.nan],
                  [C, C, C, R, R, R])
    assert stability(res)["achieved_rate"] == pytest.approx(0.75, rel=1e-12)
    # sent, none completed: 0, not null
    res = _result([0.5, np.nan], [np.nan, np.nan], [R, R])
    assert stability(res)["achieved_rate"] == 0.0


@pytest.mark.parametrize("args", [
    ["-n", "200", "--concurrency", "4", "--max-duration-s", "2"],  # closed loop stopped by the cap
    ["-w", "shared-prefix", "--multi-turn", "--num-groups", "2", "--prompts-per-group", "2", "-n", "40",
     "-r", "20", "--max-duration-s", "3"],  # chat turns after the cap are never sent
])
def test_achieved_rate_in_the_json_with_never_sent_requests(tmp_path, args):
    r = _run(["simulate", *args, "--json", "-q", "--out", str(tmp_path / "o")])
    assert r.exit_code == 0, r.output
    s = json.loads(r.output[r.output.index("{"):])
    import pandas as pd

    rows = pd.read_csv(tmp_path / "o" / "requests.csv")
    assert rows["arrival_s"].isna().any()  # the case: some requests were never sent
    done = rows[rows["status"] == "completed"]
    expect = len(done) / (done["finish_s"].max() - rows["arrival_s"].min())  # pandas skips NaN
    assert s["achieved_rate"] is not None and math.isfinite(s["achieved_rate"])
    assert s["achieved_rate"] == pytest.approx(expect, rel=1e-9)
    assert s["completed"] == len(done) > 0


# --------------------------------------------------------------------------- cause 12: the property

#: simulate's output options over a small pool of paths that collide in every way (the same
#: file, through a link, a file where a folder is needed, a missing folder, an existing file)
_POOL = ["D", "D/summary.json", "D/requests.csv", "D/x.prom", "F", "F2", "L", "L/summary.json", "E",
         "E/summary.json", "F/sub"]
_SET = ("requests.csv", "timeline.csv", "timeline.png", "summary.json")  # simulate --out's files


def _layout(t: Path) -> None:
    (t / "D").mkdir()
    (t / "D" / "summary.json").write_text("old")
    (t / "F").write_text("old file")
    (t / "L").symlink_to(t / "D")


def _write_all(t: Path, out, metrics, html, result) -> dict[str, tuple[Path, str]]:
    """simulate's writes in its order, unchecked: the result file, --metrics-out, --html, then
    --out's set. Returns what each option's file should read afterwards."""
    from simulator.cli.outputs import OutputSet

    want: dict[str, tuple[Path, str]] = {}
    if result is not None:
        rdir, rname = result
        p = (t / rdir / rname) if rdir else (t / rname)
        write_atomic(p, "result")
        want["result"] = (p, "result")
    for opt_name, rel in (("metrics", metrics), ("html", html)):
        if rel is not None:
            write_atomic(t / rel, opt_name)
            want[opt_name] = (t / rel, opt_name)
    if out is not None:
        with OutputSet(t / out) as d:
            for n in _SET:
                write_atomic(d / n, f"set:{n}")
        want.update({f"out:{n}": (t / out / n, f"set:{n}") for n in _SET})
    return want


def _intact(want: dict[str, tuple[Path, str]]) -> bool:
    try:
        return all(p.read_text() == text for p, text in want.values())
    except OSError:
        return False


_maybe = st.one_of(st.none(), st.sampled_from(_POOL))


@fuzz(120)
@given(out=st.one_of(st.none(), st.sampled_from(["D", "E", "L", "F", "D/sub"])), metrics=_maybe, html=_maybe,
       result=st.one_of(st.none(), st.tuples(st.sampled_from([None, "D", "E", "L"]),
                                             st.sampled_from(["summary.json", "r.json", "x.prom", "F2"]))))
def test_property_accepted_outputs_never_lose_a_file_refused_ones_would(out, metrics, html, result):
    """For any choice of simulate's output options: when `check_outputs` accepts them, writing
    them all (in simulate's order) leaves every option's file with its own content; when it
    refuses them, writing them unchecked fails or overwrites one option's file with another's."""
    import tempfile

    from simulator.cli import outputs

    if result is not None and result[0] is None and result[1] not in _POOL:
        result = (None, result[1])
    with tempfile.TemporaryDirectory() as a, tempfile.TemporaryDirectory() as b:
        ta, tb = Path(a), Path(b)
        for t in (ta, tb):
            _layout(t)

        def p(t: Path, rel: str | None) -> str | None:
            return None if rel is None else str(t / rel)

        opts = {} if result is None else {"save_result": True, "result_dir": p(ta, result[0]),
                                          "result_filename": result[1] if result[0] else str(ta / result[1])}
        try:
            outputs.check_outputs(outputs.out_set("--out", p(ta, out), _SET), outputs.out_file("--metrics-out", p(ta, metrics)),
                                  outputs.out_file("--html", p(ta, html)), outputs.vllm_result_target(opts))
            refused = None
        except SpecError as e:
            refused = str(e)
        try:
            want = _write_all(tb, out, metrics, html, result)
            ok = _intact(want)
        except OSError:
            ok = False
        if refused is None:
            assert ok, (out, metrics, html, result)
        else:
            assert not ok, (refused, out, metrics, html, result)
