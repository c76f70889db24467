"""Issue 26 reviewed again from the CLI and file surfaces (a hostile user against the merged
fixes). Each test failed on the merged main before its fix (af57e05): a hang on a FIFO input,
an OOM kill instead of a refusal, a folder deleted by `--out`, an empty value run as the
default, a timestamp domain that let 1e308 and year 1 through, an unreadable message."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
from reliability_helpers import invoke, one_line_error

from simulator import scenario as scenario_mod
from simulator.specs import readers
from simulator.specs.checks import SpecError, read_text_bounded

pytestmark = pytest.mark.reliability

ROOT = Path(__file__).resolve().parents[1]
RUN = ["simulate", "-m", "llama-3.1-8b", "-H", "h100-sxm", "-q"]




# ------------------------------------------------------------- FIFO inputs: a hang before

@pytest.fixture
def fifo(tmp_path: Path) -> Path:
    if not hasattr(os, "mkfifo"):
        pytest.skip("no FIFOs on this OS")
    f = tmp_path / "in.json"
    os.mkfifo(f)
    return f


@contextlib.contextmanager
def _unblocking(fifo: Path):
    """A writer opens and closes `fifo` every second from 2 s on, so that code which (wrongly)
    opens it for reading, once or more, gets empty reads and the test fails instead of hanging."""
    stop = threading.Event()

    def unblock() -> None:
        delay = 2.0
        while not stop.wait(delay):
            delay = 1.0
            try:
                os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
            except OSError:  # no reader waiting: nothing opened it
                pass

    t = threading.Thread(target=unblock, daemon=True)
    t.start()
    try:
        yield
    finally:
        stop.set()
        t.join()


@pytest.mark.parametrize("reader", [
    lambda p: readers.read_bytes(p, 1000, "ShareGPT dataset file"),
    lambda p: read_text_bounded(p, 1000, "spec file"),
    lambda p: readers.read_head(p, 64),
    lambda p: readers.read_csv_file(p, 1000, "trace file"),
    lambda p: readers.csv_dict_reader(p, 1000, "measurement CSV"),
])
def test_reader_layer_refuses_a_fifo_before_opening_it(fifo, reader):
    """open() on a FIFO blocks until a writer comes: every reader refuses it from its stat first."""
    with _unblocking(fifo):
        with pytest.raises(SpecError, match=r"not a regular file \(a FIFO, socket or device\)"):
            reader(fifo)


@pytest.mark.parametrize("args", [
    ("-w", "sharegpt", "--dataset-path", "{f}"),
    ("-c", "{f}"),
])
def test_cli_fifo_input_is_one_line_not_a_hang(fifo, args):
    """`--dataset-path FIFO` hung until killed (60 s timeout); now one line in about a second."""
    cmd = [sys.executable, "-c", "import sys; from simulator.cli.commands import main; sys.argv[0]='llmsim'; main()",
           *RUN, "-n", "5", *(a.format(f=fifo) for a in args)]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=30, cwd=ROOT,
                           env={**os.environ, "PYTHONPATH": str(ROOT)})
    except subprocess.TimeoutExpired:
        pytest.fail(f"hung on a FIFO input: {args}")
    assert p.returncode == 2, p.stderr
    lines = p.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and str(fifo) in lines[0], p.stderr
    assert "not a regular file" in lines[0]


def test_validate_fifo_is_one_line(fifo):
    """validate sniffed the file's head: it waited for a writer."""
    with _unblocking(fifo):
        r = invoke("validate", str(fifo), "-m", "llama-3.1-8b", "-H", "h100-sxm", "-q")
    one_line_error(r, str(fifo), "not a regular file")


# ------------------------------------------------ request count beyond memory: an OOM kill before

def test_requests_beyond_memory_are_refused_before_building(monkeypatch):
    """-n 2147483648 was OOM-killed after 72 s at 23 GB (numpy commits pages lazily, so no
    MemoryError came); now refused from docs/reliability.md's 181 B per request before any
    array is built. Simulated here with a 100 MB machine and -n 1,000,000 (181 MB)."""
    monkeypatch.setattr(scenario_mod, "_physical_memory_bytes", lambda: 100_000_000, raising=False)

    def built(self):  # the refusal must come first
        raise AssertionError("the workload was built")

    monkeypatch.setattr(scenario_mod.Scenario, "_make_workload", built)
    line = one_line_error(invoke(*RUN, "-n", "1000000"), "num_requests", "1,000,000", "0.2 GB",
                          "181 bytes", "0.1 GB")
    assert "simulate fewer" in line


def test_requests_within_memory_are_not_refused(monkeypatch):
    """At the bound: 552,486 requests x 181 B = 99,999,966 B fit a 100 MB machine; one more does not."""
    monkeypatch.setattr(scenario_mod, "_physical_memory_bytes", lambda: 100_000_000, raising=False)
    scenario_mod.check_requests_fit(552_486)
    with pytest.raises(SpecError, match="num_requests: 552,487 requests"):
        scenario_mod.check_requests_fit(552_487)
    monkeypatch.setattr(scenario_mod, "_physical_memory_bytes", lambda: None)
    scenario_mod.check_requests_fit(10**12)  # an OS that does not say: the 1e12 cap still holds


def test_the_per_request_figure_is_the_documented_bound():
    text = (ROOT / "docs" / "reliability.md").read_text()
    assert "105 B × n + max(76 B × n, 450 MB)" in text
    assert scenario_mod.PEAK_BYTES_PER_REQUEST == 105 + 76


# ------------------------------------------------ --out over a folder of the same name: data loss

def test_out_does_not_delete_a_folder_where_it_writes_a_file(tmp_path):
    """`--out D` with a folder D/summary.json: swapping the set in deleted the folder and what
    it held, exit 0. Now refused before the run, naming --out and the folder."""
    d = tmp_path / "D"
    (d / "summary.json").mkdir(parents=True)
    (d / "summary.json" / "mine.txt").write_text("keep")
    one_line_error(invoke(*RUN, "-n", "5", "--out", str(d)), "--out", str(d / "summary.json"),
                   "not a regular file")
    assert (d / "summary.json" / "mine.txt").read_text() == "keep"


def test_result_filename_naming_a_folder_names_the_option(tmp_path):
    """It was `error: DIR/o: Is a directory` (no option named)."""
    (tmp_path / "o").mkdir()
    one_line_error(invoke(*RUN, "-n", "5", "--save-result", "--result-dir", str(tmp_path), "--result-filename", "o"),
                   "--result-dir", str(tmp_path / "o"), "not a regular file")


# ------------------------------------------------ --metric-percentiles '': silently the default

def test_empty_metric_percentiles_is_refused(tmp_path):
    """'' ran as the default 99 (vLLM's float('') fails); now one line naming the option."""
    one_line_error(invoke(*RUN, "-n", "5", "--save-result", "--result-dir", str(tmp_path), "--metric-percentiles", ""),
                   "metric-percentiles", "''", "not a number")
    assert not list(tmp_path.iterdir())


def test_metric_percentiles_given_are_written(tmp_path):
    r = invoke(*RUN, "-n", "5", "--save-result", "--result-dir", str(tmp_path), "--result-filename", "r.json",
               "--metric-percentiles", "50,90")
    assert r.exit_code == 0, r.output
    data = json.loads((tmp_path / "r.json").read_text())
    assert "p50_ttft_ms" in data and "p90_ttft_ms" in data and "p99_ttft_ms" not in data


# ------------------------------------------------ --metrics-start: 1e308 and year 1 accepted

@pytest.mark.parametrize("value", ["1e308", "253402300800", "0001-01-01T00:00:00Z", "1969-12-31T23:59:59Z"])
def test_metrics_start_outside_its_domain_is_refused(tmp_path, value):
    """1e308 wrote 309-digit OpenMetrics timestamps, year 1 negative ones; both exit 0."""
    out = tmp_path / "m.prom"
    one_line_error(invoke(*RUN, "-n", "5", "--metrics-out", str(out), "--metrics-start", value),
                   "--metrics-start", value, "[0, 253402300799]")
    assert not out.exists()


@pytest.mark.parametrize("value", ["253402300799", "9999-12-31T23:59:59Z", "0", "1970-01-01T00:00:00Z"])
def test_metrics_start_at_its_limits_is_used(tmp_path, value):
    out = tmp_path / "m.prom"
    r = invoke(*RUN, "-n", "5", "--metrics-out", str(out), "--metrics-start", value, "--metrics-points", "2")
    assert r.exit_code == 0, r.output
    ts = [float(line.split()[-1]) for line in out.read_text().splitlines()
          if line.startswith("vllm:num_requests_running")]
    start = 0.0 if value.startswith(("0", "1970")) else 253402300799.0
    assert ts and min(ts) == pytest.approx(start, abs=1e-3)


# ------------------------------------------------ --metrics-interval 1e-300: a 301-digit message

def test_metrics_interval_refusal_stays_readable(tmp_path):
    line = one_line_error(invoke(*RUN, "-n", "5", "--metrics-out", str(tmp_path / "m.prom"),
                                 "--metrics-interval", "1e-300"), "--metrics-interval", "1e-300", "100000")
    assert len(line) < 200, line


# ------------------------------------------------ disaggregation: input dropped or coerced

def test_disagg_link_values_must_be_numbers(tmp_path):
    """`overhead_s: true` ran with 1 s per transfer (float(True)); a quoted '0.001' was read as
    a number although every other scenario number refuses text. YAML's 1e-3 stays a number."""
    base = ("model: llama-3.1-8b\nhardware: h100-sxm\nworkload: random\ninput_len: 200\noutput_len: 20\n"
            "num_requests: 5\ndisagg: '1:1'\ndeployment:\n  link: {%s}\n")
    for value, shown in (("overhead_s: true", "True"), ("latency_s: '0.001'", "'0.001'")):
        c = tmp_path / "c.yaml"
        c.write_text(base % value)
        one_line_error(invoke("simulate", "-q", "-c", str(c)), f"deployment.link.{value.split(':')[0]}", shown,
                       "must be a number")
    c.write_text(base % "latency_s: 1e-3, overhead_s: 0")
    r = invoke("simulate", "-q", "--json", "-c", str(c))
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["completed"] == 5


def test_disagg_refuses_replicas(tmp_path):
    """`--disagg 1:1 --replicas 2` ran 1 + 1 GPUs and reported replicas 2: the option was dropped."""
    one_line_error(invoke(*RUN, "-n", "5", "-w", "random", "--disagg", "1:1", "--replicas", "2"),
                   "replicas: 2", "disagg 1:1")
    r = invoke(*RUN, "-n", "5", "-w", "random", "--input-len", "64", "--output-len", "4", "--disagg", "1:2", "--json")
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert (d["replicas"], d["num_gpus"], d["completed"]) == (3, 3, 5)


# ------------------------------------------------ Azure trace dates outside pandas' ns range

@pytest.mark.parametrize("rows, line", [
    (["9999-12-31 23:59:59,10,4", "0001-01-01 00:00:00,10,4"], 2),  # every date outside: wrapped
    (["2023-11-16 18:15:46.6805900,374,44", "9999-12-31 23:59:59,10,4"], 3),
])
def test_azure_dates_outside_the_ns_range_are_bad_rows(tmp_path, rows, line):
    """Years 0001 and 9999 ran as two requests 1.94e9 s apart (a datetime64[us] column cast to
    ns wraps around); now the row is refused by the declared domain (years 1678-2261)."""
    f = tmp_path / "az.csv"
    f.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n" + "\n".join(rows) + "\n")
    one_line_error(invoke(*RUN, "-w", str(f)), f"az.csv:{line}:", "'9999-12-31 23:59:59'", "years 1678-2261")


def test_azure_dates_in_range_keep_their_spacing(tmp_path):
    """Two dates 4 s apart in a coarse unit (the path pandas takes for far dates) stay 4 s apart."""
    from simulator.workloads.traces.cells import _as_ns

    arr = np.array(["1700-01-01T00:00:00", "1700-01-01T00:00:04"], dtype="datetime64[s]")
    ns = _as_ns(arr)
    assert (ns[1] - ns[0]) == 4_000_000_000
    assert ns[0] == np.datetime64("1700-01-01T00:00:00", "ns").view(np.int64)


# ------------------------------------------------ validate on llmsim-written results: re-priced

def _own_result(tmp_path: Path, *args: str) -> Path:
    r = invoke(*RUN, "-n", "20", "--save-result", "--result-dir", str(tmp_path), "--result-filename", "r.json", *args)
    assert r.exit_code == 0, r.output
    return tmp_path / "r.json"


@pytest.mark.parametrize("engine", ["vllm-v0", "trtllm-static", "trtllm-mlperf", "vllm-v0-rocm", "sglang"])
def test_validate_prices_an_own_result_under_its_engine(tmp_path, engine):
    """A run saved under --engine vllm-v0 was validated as vllm (V1), trtllm-static and
    trtllm-mlperf as trtllm, vllm-v0-rocm as vllm: the text rules read the id as free text.
    A random-workload run re-validated against itself is exact (0 % error)."""
    from simulator.profiles.profile import engine_for_row

    assert engine_for_row(engine) == engine
    f = _own_result(tmp_path, "-w", "random", "--input-len", "100", "--output-len", "10", "--engine", engine)
    r = invoke("validate", str(f), "-m", "llama-3.1-8b", "-H", "h100-sxm", "-q", "--json")
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert list(out["by_engine"]) == [engine], out["by_engine"]
    assert out["by_engine"][engine]["median_ape"] == pytest.approx(0.0, abs=0.05)


@pytest.mark.parametrize("engine", ["bogus", "/etc/passwd"])
def test_validate_refuses_an_own_result_with_an_unknown_engine(tmp_path, engine):
    """`llmsim_scenario.engine: bogus` was priced as generic without a word."""
    f = _own_result(tmp_path, "-w", "random", "--input-len", "100", "--output-len", "10")
    data = json.loads(f.read_text())
    saved = json.loads(data["llmsim_scenario"])
    data["llmsim_scenario"] = json.dumps({**saved, "engine": engine})
    f.write_text(json.dumps(data))
    one_line_error(invoke("validate", str(f), "-m", "llama-3.1-8b", "-H", "h100-sxm", "-q"),
                   "llmsim_scenario.engine", repr(engine), "not a built-in engine profile")


def test_validate_refuses_an_own_trace_timed_result(tmp_path):
    """azure-conv replayed at its own timing is saved with request_rate "inf"; validate priced
    it as an offline run, 1,268 % off its own numbers. Refused, naming the trace."""
    f = _own_result(tmp_path)
    assert json.loads(f.read_text())["request_rate"] == "inf"
    one_line_error(invoke("validate", str(f), "-m", "llama-3.1-8b", "-H", "h100-sxm", "-q"),
                   "llmsim_scenario", "'azure-conv'", "own arrival times", "--rate")
    g = _own_result(tmp_path / "g", "-r", "2")  # given a rate: validated
    r = invoke("validate", str(g), "-m", "llama-3.1-8b", "-H", "h100-sxm", "-q")
    assert r.exit_code == 0, r.output
