"""`--metrics-out` as a time series of the simulated run (issue 25): samples every interval of
simulated time, counters and histograms cumulative, OpenMetrics with timestamps in seconds and
`# EOF`, one engine label per replica, and the live replay. Checked by hand on a two-request
schedule and against a slow reference (an observation at o is in every sample at t > o)."""

from __future__ import annotations

import json
import math
import re
import signal
import subprocess
import sys
import time
import urllib.request

import numpy as np
import pytest
from click.testing import CliRunner
from prometheus_client.parser import text_string_to_metric_families

from simulator.cli import prometheus as P
from simulator.resolve import make_cost_model
from simulator.scenario import Scenario
from simulator.serving.sched.registry import EngineConfig
from simulator.serving.simulate import simulate
from simulator.workloads.workload import Workload

MODEL = "meta-llama/Llama-3.1-8B"


@pytest.fixture(scope="module")
def cost():
    return make_cost_model("llama-2-7b", "a100-sxm-80gb", ideal=True)


def wl(arrivals, ins, outs):
    return Workload(np.asarray(arrivals, dtype=float), np.asarray(ins, dtype=np.int64),
                    np.asarray(outs, dtype=np.int64))


@pytest.fixture(scope="module")
def two_replicas():
    sc = Scenario(workload="random", model="llama-3.1-8b", hardware="h100-sxm", num_requests=400, rate=8.0, replicas=2,
                  input_len=512, output_len=64, range_ratio=0.5, seed=3)
    return sc.run(itl_times=True)


def values(series: P.RunSeries, name: str, **labels: str) -> np.ndarray:
    """The (K + 1,) values of a counter or gauge, summed over the series matching labels."""
    f = series.family(name)
    return sum(s.values for s in f.series if all(s.labels.get(k) == v for k, v in labels.items()))


def hist(series: P.RunSeries, name: str, **labels: str) -> tuple[np.ndarray, np.ndarray]:
    f = series.family(name)
    chosen = [s for s in f.series if all(s.labels.get(k) == v for k, v in labels.items())]
    return sum(s.buckets for s in chosen), sum(s.sums for s in chosen)


# ------------------------------------------------------------------------ by hand


def test_two_requests_sampled_by_hand(cost):
    """A (t=0, 100 in, 3 out) and B (t=1 ms, 50 in, 2 out): steps end at t1, t2, t3 (see
    test_observability). First tokens at t1 (A) and t2 (B); gaps d2 at t2 (A), d3 at t3 (A, B).
    Samples every W = t3 / 5.5 (t_k = k W, k = 0..6): a sample counts what happened before it."""
    st = cost.step_time
    d1 = st(100, 1, 0.0, 100 * 50.0, 100)
    d2 = st(51, 2, 100.5, 50 * 25.0, 101 + 50)
    d3 = st(2, 2, 101.5 + 50.5, 0.0, 102 + 51)
    t1, t2, t3 = d1, d1 + d2, d1 + d2 + d3
    res = simulate(cost, wl([0.0, 0.001], [100, 50], [3, 2]),
                   EngineConfig(kv_capacity_tokens=100_000), itl_times=True)
    W = t3 / 5.5
    s = P.run_series(res, "m", interval_s=W)
    tk = np.arange(7) * W
    assert s.times_s == pytest.approx(tk)
    before = lambda *obs: np.array([sum(o < t for o in obs) for t in tk], dtype=float)  # noqa: E731
    counts, sums = hist(s, "vllm:time_to_first_token_seconds")
    assert list(counts[:, -1]) == list(before(t1, t2))
    assert sums[-1] == pytest.approx(t1 + t2 - 0.001, rel=1e-12)
    itl_counts, itl_sums = hist(s, "vllm:inter_token_latency_seconds")
    assert list(itl_counts[:, -1]) == list(before(t2, t3, t3))
    assert itl_sums == pytest.approx(np.array([d2 * (t2 < t) + 2 * d3 * (t3 < t) for t in tk]), rel=1e-12)
    assert list(values(s, "vllm:generation_tokens")) == list(before(t1, t2, t2, t3, t3))
    assert list(values(s, "vllm:prompt_tokens")) == list(100 * before(t1) + 50 * before(t2))
    assert list(values(s, "vllm:request_success")) == list(before(t3, t3))
    # running = the batch of the step in progress at t_k (1 in step 1, 2 in steps 2 and 3), 0 after
    running = [1 if t <= t1 else 2 if t <= t3 else 0 for t in tk]
    assert list(values(s, "vllm:num_requests_running")) == running
    busy = values(s, "llmsim_busy_seconds")
    assert busy[-1] == pytest.approx(t3, rel=1e-12) and list(np.diff(busy) >= 0) == [True] * 6


def test_timed_gaps_are_the_engines_gaps_at_the_token_times(cost):
    """One request decoding 49 tokens as a closed-form decode run: each gap's time is the
    moment its token was emitted (first token + the gaps so far), and the timed gaps are
    exactly the pooled ones (sliding-window mistral: the array-logged run, at its end)."""
    res = simulate(cost, wl([0.0], [100], [50]), EngineConfig(kv_capacity_tokens=100_000), itl_times=True)
    t, rep, v, c = res.itl_timed
    o = np.argsort(t)
    assert (c == 1).all() and (rep == 0).all() and len(t) == 49
    assert t[o] == pytest.approx(res.first_token_s[0] + np.cumsum(v[o]), rel=1e-12)
    assert t.max() == pytest.approx(res.finish_s[0], rel=1e-12)
    m = make_cost_model("mistral-7b", "a100-sxm-80gb", ideal=True)
    res = simulate(m, wl([0.0], [5000], [50]), EngineConfig(kv_capacity_tokens=100_000), itl_times=True)
    t, _, v, c = res.itl_timed
    assert c.sum() == 49 and t.max() == pytest.approx(res.finish_s[0]) and (t <= res.finish_s[0] + 1e-12).all()
    plain = simulate(m, wl([0.0], [5000], [50]), EngineConfig(kv_capacity_tokens=100_000))
    assert plain.itl_timed is None and (plain.finish_s == res.finish_s).all()


def test_timed_gaps_equal_the_pooled_ones(two_replicas):
    res, _ = two_replicas
    t, rep, v, c = res.itl_timed
    assert np.sort(np.repeat(v, c)) == pytest.approx(np.sort(np.repeat(res.itl_values_s, res.itl_counts)), abs=0)
    assert set(rep.tolist()) == {0, 1}
    assert t.min() > 0 and t.max() <= np.nanmax(res.finish_s)


# ------------------------------------------------------------------------ against a reference


def test_series_against_a_slow_reference(two_replicas):
    """Every per-request histogram and counter at every sample equals a loop over the
    requests (observed at first token, finish or first scheduling); the last sample is the
    whole run (the summary's totals)."""
    res, summary = two_replicas
    s = P.run_series(res, MODEL, interval_s=2.0)
    assert s.times_s[-1] > np.nanmax(res.finish_s) >= s.times_s[-2]
    done = res.status == 1
    for r in (0, 1):
        sel = done & (res.replica == r)
        fin, first, arr = res.finish_s[sel], res.first_token_s[sel], res.arrival_s[sel]
        counts, sums = hist(s, "vllm:e2e_request_latency_seconds", engine=str(r))
        for k, t in enumerate(s.times_s):
            seen = fin < t
            e2e = (fin - arr)[seen]
            for j, b in enumerate(P.REQUEST_LATENCY_BUCKETS_S):
                assert counts[k, j] == (e2e <= b).sum()
            assert counts[k, -1] == seen.sum() and sums[k] == pytest.approx(e2e.sum(), rel=1e-9, abs=1e-12)
        ttft_counts, _ = hist(s, "vllm:time_to_first_token_seconds", engine=str(r))
        assert list(ttft_counts[:, -1]) == [(first < t).sum() for t in s.times_s]
        gen = values(s, "vllm:generation_tokens", engine=str(r))
        assert gen[-1] == res.output_len[sel].sum()
    assert values(s, "vllm:request_success")[-1] == summary["completed"]
    assert values(s, "vllm:generation_tokens")[-1] == summary["total_output_tokens"]
    assert values(s, "vllm:prompt_tokens")[-1] == summary["total_input_tokens"]
    busy = values(s, "llmsim_busy_seconds")[-1]
    assert busy == pytest.approx(res.meta["busy_s"], rel=1e-9)
    mfu = values(s, "llmsim_mfu_busy_seconds")[-1] / busy
    assert mfu == pytest.approx(summary["mfu_mean"], rel=1e-6)


def test_cumulative_and_well_formed(two_replicas):
    res, _ = two_replicas
    s = P.run_series(res, MODEL, interval_s=1.0)
    engines = None
    for f in s.families:
        got = sorted(x.labels["engine"] for x in f.series)
        engines = engines or got
        assert got == engines == ["0", "1"], f.name  # every family split the same way
        for x in f.series:
            if f.kind == "histogram":
                assert (np.diff(x.buckets, axis=0) >= 0).all() and (np.diff(x.buckets, axis=1) >= 0).all()
                assert (x.buckets[0] == 0).all() and (np.diff(x.sums) >= -1e-12).all()
            elif f.kind == "counter":
                assert x.values[0] == 0 and (np.diff(x.values) >= 0).all(), f.name
            else:
                assert (x.values >= 0).all()
    assert {f.name for f in s.families} >= {
        "vllm:request_max_num_generation_tokens", "vllm:inter_token_latency_seconds",
        "vllm:num_requests_running", "vllm:kv_cache_usage_perc", "vllm:prefix_cache_hits"}


def test_decimated_timeline_reads_sample_and_hold(monkeypatch, two_replicas):
    """A long run's timeline keeps one row per k steps: the busy counters are scaled to the
    run's busy time (MFU unchanged) and the gauges hold the last row."""
    from simulator.serving import simulate as S
    from simulator.serving.steplog import TimedStepLog

    class Small(TimedStepLog):
        def __init__(self) -> None:
            super().__init__(timeline_max_points=64)

    monkeypatch.setattr(S, "TimedStepLog", Small)
    sc = Scenario(workload="random", model="llama-3.1-8b", hardware="h100-sxm", num_requests=400, rate=8.0, replicas=2,
                  input_len=512, output_len=64, range_ratio=0.5, seed=3)
    res, summary = sc.run(itl_times=True)
    full, _ = two_replicas
    assert len(res.timeline) < len(full.timeline)
    s = P.run_series(res, MODEL, interval_s=2.0)
    assert values(s, "llmsim_busy_seconds")[-1] == pytest.approx(res.meta["busy_s"], rel=1e-9)
    assert values(s, "vllm:generation_tokens")[-1] == summary["total_output_tokens"]
    running = values(s, "vllm:num_requests_running")
    assert running.max() > 0 and running[-1] == 0


# ------------------------------------------------------------------------ the OpenMetrics file

LINE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (\S+)(?: (\S+))?$')


def om_samples(text: str) -> list[tuple[str, str, float, float | None]]:
    out = []
    for ln in text.splitlines():
        if ln.startswith("#"):
            continue
        m = LINE.match(ln)
        assert m, ln
        out.append((m[1], m[2] or "", float(m[3]), float(m[4]) if m[4] else None))
    return out


def test_openmetrics_file(two_replicas):
    res, summary = two_replicas
    s = P.run_series(res, MODEL, interval_s=15.0)
    text = P.openmetrics_text(s, 1_700_000_000.0)
    assert text.endswith("\n# EOF\n") and text.count("# EOF") == 1
    types = re.findall(r"^# TYPE (\S+) (\S+)$", text, re.M)
    assert len(types) == len({n for n, _ in types}) == len(s.families)
    for name, kind in types:  # OpenMetrics: a counter family is named without _total
        assert not (kind == "counter" and name.endswith("_total"))
    samples = om_samples(text)
    stamps = sorted({t for *_, t in samples})
    assert stamps == pytest.approx(1_700_000_000.0 + s.times_s, abs=1e-3)  # seconds, not ms
    last: dict[tuple[str, str], float] = {}
    for name, labels, _, t in samples:
        assert t is not None
        assert t > last.get((name, labels), -1), (name, labels)  # each series in time order
        last[(name, labels)] = t
    final = [v for name, _, v, t in samples if name == "vllm:request_success_total" and t == stamps[-1]]
    assert len(final) == 2 and sum(final) == summary["completed"]  # one series per engine


def test_snapshot_is_prometheus_text(two_replicas):
    res, summary = two_replicas
    fams = {f.name: f for f in text_string_to_metric_families(P.prometheus_text(res, MODEL))}
    assert fams["vllm:request_success"].type == "counter"
    assert sum(x.value for x in fams["vllm:request_success"].samples) == summary["completed"]
    assert all(x.timestamp is None for f in fams.values() for x in f.samples)


def test_points_and_start_options(tmp_path):
    from simulator.cli.commands import main

    path = tmp_path / "run.om"
    base = ["simulate", "-m", "llama-3.1-8b", "-H", "h100-sxm", "-n", "40", "-r", "20", "--input-len", "128",
            "--output-len", "16", "-q", "--json", "--metrics-out", str(path)]
    r = CliRunner().invoke(main, [*base, "--metrics-points", "25", "--metrics-start", "2026-01-01T00:00:00Z"])
    assert r.exit_code == 0, r.output
    stamps = sorted({t for *_, t in om_samples(path.read_text())})
    assert len(stamps) == 25 and stamps[0] == 1767225600.0
    duration = json.loads(r.output)["duration"]
    assert stamps[-1] - stamps[0] == pytest.approx(duration, abs=2e-3)  # the last sample: the run's end
    r = CliRunner().invoke(main, [*base, "--metrics-start", "1000.5", "--metrics-interval", "0.25"])
    assert r.exit_code == 0, r.output
    stamps = sorted({t for *_, t in om_samples(path.read_text())})
    assert stamps[:3] == [1000.5, 1000.75, 1001.0]
    t_before = time.time()
    r = CliRunner().invoke(main, base)  # default: the run ends now
    stamps = sorted({t for *_, t in om_samples(path.read_text())})
    assert abs(stamps[-1] - t_before) < 60


@pytest.mark.parametrize("extra,message", [
    (["--metrics-interval", "0"], "--metrics-interval: 0.0 must be a number of seconds > 0"),
    (["--metrics-points", "1"], "--metrics-points: 1 must be an integer >= 2"),
    (["--metrics-interval", "5", "--metrics-points", "9"], "give one, not both"),
    (["--metrics-start", "yesterday"], "--metrics-start: 'yesterday' is not unix seconds"),
    (["--replay-speed", "0", "--serve-metrics", "0"], "--replay-speed: 0.0 must be a number > 0"),
    (["--metrics-interval", "1e-6"], "more than 100000"),
])
def test_bad_options_are_one_line(tmp_path, extra, message):
    from simulator.cli.commands import main

    r = CliRunner().invoke(main, ["simulate", "-n", "20", "-r", "5", "--input-len", "64", "--output-len", "8", "-q",
                                  "--metrics-out", str(tmp_path / "x.om"), *extra])
    assert r.exit_code == 2 and message in r.output and "Traceback" not in r.output, r.output
    assert len(r.output.strip().splitlines()) == 1


def test_itl_times_needed():
    res, _ = Scenario(workload="random", num_requests=5, rate=1.0, input_len=32, output_len=4).run()
    with pytest.raises(Exception, match="itl_times=True"):
        P.run_series(res, "m")


# ------------------------------------------------------------------------ live replay


def test_replay_collector_follows_its_clock(two_replicas):
    from prometheus_client import CollectorRegistry, generate_latest

    res, _ = two_replicas
    s = P.run_series(res, MODEL, interval_s=5.0)
    now = [100.0]
    c = P.ReplayCollector(s, speed=10.0, clock=lambda: now[0])
    reg = CollectorRegistry(auto_describe=False)
    reg.register(c)

    def scraped(name: str) -> float:
        fams = text_string_to_metric_families(generate_latest(reg).decode())
        return sum(x.value for f in fams for x in f.samples if x.name == name)

    success = values(s, "vllm:request_success")
    for wall, k in ((0.0, 0), (0.49, 0), (0.5, 1), (1.26, 2), (1e6, len(s.times_s) - 1)):
        now[0] = 100.0 + wall
        assert c.index() == k
        assert scraped("vllm:request_success_total") == success[k]
    assert c.done()


def test_cli_serves_the_replay_and_stops(tmp_path):
    """`simulate --serve-metrics 0`: the replay on 127.0.0.1 (a free port, printed), scraped
    over HTTP; SIGTERM stops it with exit 0."""
    cmd = [sys.executable, "-m", "simulator.cli.commands", "simulate", "-m", "llama-3.1-8b", "-H", "h100-sxm",
           "-n", "60", "-r", "10", "--input-len", "128", "--output-len", "16", "-q", "--json",
           "--serve-metrics", "0", "--replay-speed", "1000", "--metrics-interval", "0.5"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path)
    try:
        url = None
        deadline = time.monotonic() + 120
        while url is None and time.monotonic() < deadline:
            line = proc.stderr.readline()
            if not line:
                break
            m = re.search(r"serving (http://127\.0\.0\.1:\d+/metrics)", line)
            url = m[1] if m else None
        assert url, proc.stderr.read()
        time.sleep(0.5)  # replay over (a few simulated seconds at 1000x)
        body = urllib.request.urlopen(url, timeout=10).read().decode()
        fams = {f.name: f for f in text_string_to_metric_families(body)}
        assert sum(x.value for x in fams["vllm:request_success"].samples) == 60
        assert math.isclose(sum(x.value for x in fams["vllm:num_requests_running"].samples), 0)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            out, err = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
    assert proc.returncode == 0, err
    assert "stopped serving" in err


def test_speculative_chunks_count_every_token():
    """Speculative decoding: a verify step's chunk of n tokens is one inter-token gap and n
    generated tokens (vLLM streams it as one message); the counter still ends at the run's
    output tokens, and the gaps are fewer than the tokens after the first."""
    sc = Scenario(workload="random", model="llama-3.1-8b", hardware="h100-sxm", num_requests=60, rate=4.0, input_len=256,
                  output_len=64, seed=2, speculative_config={"method": "ngram", "num_speculative_tokens": 3,
                                                              "acceptance_rate": 0.7})
    res, summary = sc.run(itl_times=True)
    assert res.merged_timed is not None and res.merged_timed[2].sum() > 0
    s = P.run_series(res, MODEL, interval_s=1.0)
    gen = values(s, "vllm:generation_tokens")
    assert gen[-1] == summary["total_output_tokens"] and (np.diff(gen) >= 0).all()
    itl_counts, _ = hist(s, "vllm:inter_token_latency_seconds")
    assert itl_counts[-1, -1] + res.merged_timed[2].sum() == summary["total_output_tokens"] - summary["completed"]


def test_served_model_name_is_the_label(tmp_path):
    from simulator.cli.commands import main

    path = tmp_path / "run.prom"
    r = CliRunner().invoke(main, ["simulate", "-m", "llama-3.1-8b", "-H", "h100-sxm", "-n", "20", "-r", "5",
                                  "--input-len", "64", "--output-len", "8", "-q", "--served-model-name", "llama-8b",
                                  "--metrics-out", str(path), "--metrics-format", "text"])
    assert r.exit_code == 0, r.output
    labels = {x.labels["model_name"] for f in text_string_to_metric_families(path.read_text()) for x in f.samples}
    assert labels == {"llama-8b"}
