"""`llmsim sweep`: rate parsing, the saturation rate against a hand-computed queue, knee and
SLO capacity, identical results on every executor, and the command's files."""

from __future__ import annotations

import json
import sys

import pandas as pd
import pytest
from click.testing import CliRunner

from simulator.analysis.executors import DaskExecutor, Executor, PoolExecutor
from simulator.analysis.sweep import knee_point, parse_rates, parse_sweep, run_point, sweep
from simulator.cli.commands import main
from simulator.scenario import Scenario
from simulator.specs.checks import SpecError

IN_LEN, OUT_LEN = 512, 64  # fixed prompt / output lengths of the hand-checkable scenario


def _batch1(**kw) -> Scenario:
    """One sequence at a time, fixed lengths, Poisson arrivals: an M/D/1 queue. Engine none:
    the oracle prices the engine core's steps only (no API-server latency or async lag)."""
    base = dict(workload="random", input_len=IN_LEN, output_len=OUT_LEN, range_ratio=0.0, max_num_seqs=1,
                num_requests=300, seed=3, engine=None)
    return Scenario(**{**base, **kw})


def _service_time(sc: Scenario) -> float:
    """Prefill step (T=IN_LEN, S=1, Ap=IN_LEN^2/2, R=IN_LEN) plus OUT_LEN-1 decode steps (context IN_LEN+k-1)."""
    st = sc.cost_model().step_time
    s = st(IN_LEN, 1, 0.0, IN_LEN * IN_LEN / 2.0, IN_LEN)
    for k in range(1, OUT_LEN):
        s += st(1, 1, IN_LEN + k - 1 + 0.5, 0.0, IN_LEN + k)
    return s


def _canon(obj) -> str:
    return json.dumps(obj, sort_keys=True, default=str)  # NaN -> NaN token, comparable


@pytest.fixture(scope="module")
def auto_result():
    sc = _batch1(goodput={"ttft": 2000})
    return sc, sweep(sc, "auto")


# --------------------------------------------------------------------------- parsing


def test_parse_rates_forms():
    assert parse_rates("1,2,4,8") == [1.0, 2.0, 4.0, 8.0]
    assert parse_rates(" 4, 1 ,2,2") == [1.0, 2.0, 4.0]
    r = parse_rates("0.5:20:40")
    assert len(r) == 40 and r[0] == 0.5 and r[-1] == 20.0
    assert all(b > a for a, b in zip(r, r[1:], strict=False))
    assert parse_rates("AUTO") == "auto"
    assert parse_rates("3") == [3.0]


@pytest.mark.parametrize("text", ["abc", "0", "-1,2", "1,inf", "1:2", "2:1:5", "1:2:x", "1:2:0", "", ","])
def test_parse_rates_errors(text):
    with pytest.raises(SpecError) as e:
        parse_rates(text)
    assert "--rates" in str(e.value) and repr(text) in str(e.value)


def test_parse_sweep_types_and_product():
    s = parse_sweep(["tp=1,2,4", "hardware=h100-sxm,h200-sxm", "kv-dtype=bf16,fp8", "max_num_seqs=64,128"])
    assert s == [("tp", [1, 2, 4]), ("hardware", ["h100-sxm", "h200-sxm"]),
                 ("kv_dtype", ["bf16", "fp8"]), ("max_num_seqs", [64, 128])]
    assert parse_sweep(["gpu_memory_utilization=0.8,0.9"]) == [("gpu_memory_utilization", [0.8, 0.9])]
    assert parse_sweep([]) == []


@pytest.mark.parametrize("item, words", [
    ("tpp=1,2", ["unknown setting", "did you mean 'tp'"]),
    ("tp", ["FIELD=V1,V2"]),
    ("tp=", ["no values"]),
    ("tp=1,two", ["'two' is not an integer"]),
    ("burstiness=x", ["not a number"]),
    ("rate=1,2", ["--rates"]),
    ("concurrency=1,2", ["open loop"]),
    ("goodput=1", ["cannot be swept"]),
])
def test_parse_sweep_errors(item, words):
    with pytest.raises(SpecError) as e:
        parse_sweep([item])
    msg = str(e.value)
    assert "--sweep" in msg and item in msg
    for w in words:
        assert w in msg


def test_parse_sweep_twice_is_an_error():
    with pytest.raises(SpecError, match="swept twice"):
        parse_sweep(["tp=1", "tp=2"])


def test_bad_curves_fail_before_simulating():
    sc = _batch1(num_requests=20)
    with pytest.raises(SpecError, match="tp"):
        sweep(sc, [1.0], parse_sweep(["tp=0"]))
    with pytest.raises(SpecError, match="nope"):
        sweep(sc, [1.0], parse_sweep(["hardware=h100-sxm,nope"]))
    with pytest.raises(SpecError, match="open loop"):
        sweep(sc.replace(concurrency=4), [1.0])
    with pytest.raises(SpecError, match="--tol"):
        sweep(sc, [1.0], tol=0)


# --------------------------------------------------------------------------- knee


def test_knee_point():
    x = [1, 2, 3, 4, 5, 6, 7, 8]
    assert knee_point(x, [10, 10.5, 11, 11.5, 12, 14, 30, 100]) in (4, 5)  # hockey stick
    assert knee_point(x, [10] * 8) is None  # flat
    assert knee_point(x, [10.0, 10.1, 10.0, 10.2, 10.1, 10.0, 10.2, 10.1]) is None  # noise on flat
    assert knee_point(x, [10 * v for v in x]) is None  # straight
    assert knee_point([1, 2], [1, 100]) is None  # too few points
    assert knee_point([1, 2, 3, 4], [1, float("nan"), 1.1, 50]) == 2  # NaN skipped, index kept


# --------------------------------------------------------------------------- hand-computed queue


def test_saturation_matches_service_rate(auto_result):
    sc, r = auto_result
    mu = 1.0 / _service_time(sc)
    (c,) = r["curves"]
    # offline: n requests back to back, duration n*S exactly
    assert c["offline_max_throughput"] == pytest.approx(mu, rel=1e-6)
    assert c["saturated"] and c["saturation_rate"] is not None
    assert abs(c["saturation_rate"] - mu) / mu < 0.05
    assert c["max_stable_rate"] < mu * 1.05
    assert c["unstable_rates"], "the grid reaches 1.2x the service rate: some points must be unstable"
    grid = [p for p in r["points"] if p["kind"] == "grid"]
    assert 10 <= len(grid) <= 15
    assert min(p["rate"] for p in grid) < 0.15 * mu and max(p["rate"] for p in grid) > 1.1 * mu


def test_knee_and_slo_capacity_below_saturation(auto_result):
    _, r = auto_result
    (c,) = r["curves"]
    sat = c["saturation_rate"]
    assert c["knee"] is not None and c["knee"]["rate"] < sat
    cap, hi = c["slo_capacity"], c["slo_capacity_upper"]
    assert cap is not None and cap < sat
    assert (hi - cap) / cap <= c["slo_tolerance"] == 0.02
    by_rate = {p["rate"]: p for p in r["points"]}
    assert by_rate[cap]["good_fraction"] >= 0.99 > by_rate[hi]["good_fraction"]
    assert c["bisection_probes"] == sum(p["kind"] == "bisection" for p in r["points"]) > 0


def test_slo_capacity_monotone_in_slo():
    mu = 1.0 / _service_time(_batch1())
    rates = [f * mu for f in (0.2, 0.4, 0.6, 0.8, 1.0, 1.2)]
    caps = []
    for ttft in (800, 2000, 5000):
        r = sweep(_batch1(num_requests=200, goodput={"ttft": ttft}), rates, slo_target=0.95, tol=0.05)
        (c,) = r["curves"]
        assert c["slo_capacity"] is not None, c["slo_note"]
        caps.append(c["slo_capacity"])
        # a loose SLO is met past saturation in a finite run; those points do not count
        assert c["slo_capacity"] < c["saturation_rate"]
    assert caps[0] <= caps[1] <= caps[2]
    assert caps[0] < caps[2] < mu


def test_no_goodput_means_no_slo_capacity():
    r = sweep(_batch1(num_requests=50), [1.0, 2.0])
    (c,) = r["curves"]
    assert c["slo_capacity"] is None and "goodput" in c["slo_note"]
    assert [p["rate"] for p in r["points"]] == [1.0, 2.0]


def test_cartesian_product_of_sweeps():
    r = sweep(_batch1(num_requests=30), [1.0], parse_sweep(["max_num_seqs=1,2", "kv_dtype=bf16,fp8"]))
    labels = [c["curve"] for c in r["curves"]]
    assert labels == ["max_num_seqs=1, kv_dtype=bf16", "max_num_seqs=1, kv_dtype=fp8",
                      "max_num_seqs=2, kv_dtype=bf16", "max_num_seqs=2, kv_dtype=fp8"]
    assert [(p["max_num_seqs"], p["kv_dtype"]) for p in r["points"]] == [(1, "bf16"), (1, "fp8"), (2, "bf16"), (2, "fp8")]


def test_run_point_is_plain_data():
    sc = _batch1(num_requests=20)
    s = run_point(sc.as_dict(), 2.0)
    assert s["rate"] == 2.0 and "p99_ttft_ms" in s and "request_throughput" in s
    assert _canon(s) == _canon(run_point(sc.as_dict(), 2.0))


# --------------------------------------------------------------------------- executors


def _small(executor: Executor) -> dict:
    sc = _batch1(num_requests=120, goodput={"ttft": 2500})  # an SLO the grid brackets: bisection runs
    mu = 1.0 / _service_time(sc)
    return sweep(sc, [0.3 * mu, 0.7 * mu, 1.1 * mu], parse_sweep(["max_num_seqs=1,2"]), executor)


@pytest.fixture(scope="module")
def serial_small():
    return _small(Executor())


def test_process_pool_gives_identical_sweep(serial_small):
    with PoolExecutor(2) as ex:
        pooled = _small(ex)
    assert any(p["kind"] == "bisection" for p in serial_small["points"])
    assert _canon(pooled) == _canon(serial_small)


def test_dask_gives_identical_sweep(serial_small):
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=False,
                                  dashboard_address=None) as cluster:
        with DaskExecutor(cluster.scheduler_address) as ex:
            remote = _small(ex)
    assert _canon(remote) == _canon(serial_small)


def test_dask_missing_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "distributed", None)  # import fails
    with pytest.raises(SpecError, match=r"pip install \"\.\[dask\]\" in an llmsim checkout"):
        DaskExecutor("tcp://127.0.0.1:8786")


# --------------------------------------------------------------------------- CLI


def _runner() -> CliRunner:
    try:  # click < 8.2 mixes stderr into output unless told not to
        return CliRunner(mix_stderr=False)  # type: ignore[call-arg]
    except TypeError:
        return CliRunner()


def test_cli_writes_all_files(tmp_path):
    out = tmp_path / "sw"
    res = _runner().invoke(main, ["sweep", "--rates", "1,2", "-n", "50", "--out", str(out), "--json", "-q"])
    assert res.exit_code == 0, res.output + (res.stderr if hasattr(res, "stderr") else "")
    data = json.loads(res.stdout)
    assert [p["rate"] for p in data["points"]] == [1.0, 2.0]
    assert data["curves"][0]["offline_max_throughput"] > 0
    for name in ("sweep.csv", "sweep.json", "latency.png", "throughput.png"):
        assert (out / name).stat().st_size > 0
    for name in ("latency.png", "throughput.png"):
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    df = pd.read_csv(out / "sweep.csv")
    assert len(df) == 2
    for col in ("curve", "rate", "request_throughput", "p99_ttft_ms", "p99_tpot_ms", "p99_e2el_ms",
                "request_goodput", "unstable", "offered_rate", "achieved_rate"):
        assert col in df.columns
    assert json.loads((out / "sweep.json").read_text())["points"][1]["rate"] == 2.0
    assert not list(out.glob(".*tmp*"))


def test_cli_table_and_errors():
    r = _runner().invoke(main, ["sweep", "-w", "random", "--input-len", "256", "--output-len", "16",
                                "-n", "40", "--rates", "5,50", "--serial", "--goodput", "ttft:500"])
    assert r.exit_code == 0, r.output
    for word in ("rate/s", "p99 TTFT ms", "offline max throughput", "saturation rate", "knee", "SLO capacity"):
        assert word in r.stdout
    bad = _runner().invoke(main, ["sweep", "--rates", "fast"])
    assert bad.exit_code == 2 and "error: --rates 'fast'" in bad.stderr
    bad = _runner().invoke(main, ["sweep", "--rate", "5"])
    assert bad.exit_code == 2 and "--rates" in bad.stderr
    bad = _runner().invoke(main, ["sweep", "--sweep", "tpp=1,2", "--rates", "1"])
    assert bad.exit_code == 2 and "did you mean 'tp'" in bad.stderr


def test_sweep_and_plan_reports_say_an_engines_numbers_are_copied() -> None:
    """A report that prices gpt-oss's MXFP4 experts on MI300X under vLLM says, once, that the
    engine's weight-only numbers for CDNA3 are copied from its Hopper fit (no measurement)."""
    note = "note: mi300x: vllm/cdna3 weight-only GEMM numbers copied from hopper, unvalidated"
    common = ["-m", "gpt-oss-120b", "--weight-dtype", "fp4", "--workload", "random", "--input-len", "256",
              "--output-len", "32", "-n", "40"]
    res = _runner().invoke(main, ["sweep", "-H", "mi300x", "--rates", "1,2", "-q", *common])
    assert res.exit_code == 0, res.output
    assert res.output.splitlines().count(note) == 1
    res = _runner().invoke(main, ["plan", "--hardware", "mi300x", "--rate", "1", "--goodput", "tpot:200", *common])
    assert res.exit_code == 0, res.output
    assert res.output.splitlines().count(note) == 1
    dense = _runner().invoke(main, ["sweep", "-H", "mi300x", "--rates", "1", "-q", "-m", "llama-3.1-8b",
                                    "--workload", "random", "--input-len", "256", "--output-len", "32", "-n", "20"])
    assert dense.exit_code == 0 and "weight-only" not in dense.output
