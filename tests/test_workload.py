"""Tests for simulator.workloads.workload: synthetic arrivals/lengths, trace readers, built-ins."""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simulator.cli.outputs import write_trace
from simulator.specs.checks import SpecError
from simulator.workloads.traces import BUILTIN_WORKLOADS, builtin, load_workload, read_trace
from simulator.workloads.workload import (
    RampUp,
    Workload,
    arrivals,
    lengths,
    scale_to_rate,
    synthetic,
    take,
    vllm_rng,
    with_arrivals,
)


def _write(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def _cv2(gaps: np.ndarray) -> float:
    return float(gaps.var() / gaps.mean() ** 2)


# --------------------------------------------------------------------------- arrivals


def test_poisson_gaps_mean_and_cv() -> None:
    a = arrivals(20_001, 4.0, rng=np.random.default_rng(1))
    gaps = np.diff(a)
    assert 0.0 < a[0] < 5.0  # the first send is one rescaled gap in, not at 0 (vLLM)
    assert a[-1] == pytest.approx(20_001 / 4.0, rel=1e-12)  # the last at n / rate exactly
    assert gaps.mean() == pytest.approx(0.25, rel=0.03)
    assert math.sqrt(_cv2(gaps)) == pytest.approx(1.0, rel=0.05)


def test_gamma_burstiness_half_gives_cv2_two() -> None:
    gaps = np.diff(arrivals(20_001, 2.0, 0.5, np.random.default_rng(2), process="gamma"))
    assert gaps.mean() == pytest.approx(0.5, rel=0.03)
    assert _cv2(gaps) == pytest.approx(2.0, rel=0.1)


def test_gamma_burstiness_four_is_smoother() -> None:
    gaps = np.diff(arrivals(20_001, 2.0, 4.0, np.random.default_rng(3), process="gamma"))
    assert _cv2(gaps) == pytest.approx(0.25, rel=0.1)


def test_constant_and_infinite_rate() -> None:
    a = arrivals(1000, 8.0, process="constant")
    np.testing.assert_array_equal(a, np.arange(1, 1001) / 8.0)  # vLLM's burstiness inf: (k + 1) / rate
    np.testing.assert_allclose(np.diff(a), 0.125, rtol=0, atol=1e-12)
    for proc in ("poisson", "gamma", "constant"):
        z = arrivals(50, math.inf, rng=np.random.default_rng(0), process=proc)
        assert z.dtype == np.float64 and z.shape == (50,) and not z.any()


def test_arrivals_reproducible_and_seed_sensitive() -> None:
    a1 = arrivals(100, 3.0, rng=np.random.default_rng(7))
    a2 = arrivals(100, 3.0, rng=np.random.default_rng(7))
    a3 = arrivals(100, 3.0, rng=np.random.default_rng(8))
    np.testing.assert_array_equal(a1, a2)
    assert not np.array_equal(a1, a3)


# vLLM's send schedule worked by hand (docs/engines.md §6.1, from vllm/benchmarks/serve.py
# get_request): np.random.seed(0); g_i = np.random.gamma(b, 1/(2 b)) for i < 5; C = cumsum(g);
# t = C * (5 / 2) / C[-1]. b = 1: g = 0.397937..., 0.627965..., 0.461611..., 0.393600..., 0.275524...,
# C[-1] = 2.156639..., factor 2.5 / C[-1] = 1.159211...
VLLM_N5_RATE2_B1 = [0.4612933000308972, 1.189237769060302, 1.724343049132401, 2.180609223781806, 2.5]
# b = 0.5: g = 0.304001..., 0.378271..., 0.179483..., 0.191482..., 0.879608..., C[-1] = 1.932848...
VLLM_N5_RATE2_B05 = [0.3932045782868537, 0.8824718400271925, 1.114620693897568, 1.3622896220312681, 2.5]


def test_vllm_schedule_n5_rate2_by_hand() -> None:
    a1 = arrivals(5, 2.0, 1.0, vllm_rng(0))
    a05 = arrivals(5, 2.0, 0.5, vllm_rng(0), process="gamma")
    np.testing.assert_allclose(a1, VLLM_N5_RATE2_B1, rtol=0, atol=1e-12)
    np.testing.assert_allclose(a05, VLLM_N5_RATE2_B05, rtol=0, atol=1e-12)
    # the same hand computation, step by step from the raw draws
    g = [0.397937254081555, 0.6279653814829189, 0.4616115729020344, 0.39360057615863536, 0.2755242455477496]
    c = np.cumsum(g)
    np.testing.assert_allclose(a1, c * (2.5 / c[-1]), rtol=1e-12)
    # the workloads send on it: random and sharegpt at seed 0 (the first request at t_0 > 0)
    w = synthetic(5, 2.0, 100, 10, seed=0)
    np.testing.assert_allclose(w.arrival_s, VLLM_N5_RATE2_B1, rtol=0, atol=1e-12)
    assert w.clock_start_s == 0.0 and w.offered_rate == pytest.approx(2.0)
    wb = synthetic(5, 2.0, 100, 10, burstiness=0.5, seed=0)
    np.testing.assert_allclose(wb.arrival_s, VLLM_N5_RATE2_B05, rtol=0, atol=1e-12)


def test_vllm_ramp_up_by_hand() -> None:
    # rates r_i = 1 + 4 i/4 (linear) and 16^(i/4) (exponential); delays g_i ~ Gamma(1, 1/r_i), plain
    # sums (no rescaling): the standard-exponential draws of seed 0 are 0.795874..., 1.255930..., ...
    lin = arrivals(5, math.inf, 1.0, vllm_rng(0), ramp_up=RampUp("linear", 1, 5))
    np.testing.assert_allclose(lin, [0.79587450816311, 1.423839889646029, 1.7315809382473852,
                                     1.9283812263267028, 2.0385909245458027], rtol=0, atol=1e-12)
    exp = arrivals(5, math.inf, 1.0, vllm_rng(0), ramp_up=RampUp("exponential", 1, 16))
    np.testing.assert_allclose(exp, [0.79587450816311, 1.423839889646029, 1.654645676097046,
                                     1.753045820136705, 1.7874863508301737], rtol=0, atol=1e-12)
    np.testing.assert_allclose(RampUp("linear", 1, 5).rates(5), [1, 2, 3, 4, 5])
    for bad, match in ((("linear", 0, 5), "ramp_up_start_rps"), (("linear", 6, 5), "<= ramp_up_end_rps"),
                       (("cubic", 1, 5), "ramp_up_strategy"), (("linear", 1.5, 5), "ramp_up_start_rps")):
        with pytest.raises(SpecError, match=match):
            RampUp(*bad)
    with pytest.raises(SpecError, match="ramp-up"):
        arrivals(5, 2.0, ramp_up=RampUp("linear", 1, 5))


@pytest.mark.parametrize(
    "kw",
    [
        {"rate": 0.0},
        {"rate": -1.0},
        {"rate": float("nan")},
        {"rate": 1.0, "burstiness": 0.0},
        {"rate": 1.0, "burstiness": 0.5},  # poisson with burstiness != 1
        {"rate": 1.0, "process": "weibull"},
    ],
)
def test_arrivals_bad_options(kw: dict) -> None:
    with pytest.raises(SpecError):
        arrivals(10, **kw)


# --------------------------------------------------------------------------- lengths


def test_uniform_lengths_range_and_mean() -> None:
    x = lengths(20_000, 1000, 0.3, "uniform", rng=np.random.default_rng(4))
    assert x.dtype == np.int64
    assert x.min() >= 700 and x.max() <= 1300
    assert x.min() == 700 and x.max() == 1300  # 20k draws hit both ends
    assert x.mean() == pytest.approx(1000, rel=0.01)


def test_fixed_and_lognormal_lengths() -> None:
    np.testing.assert_array_equal(lengths(5, 128), np.full(5, 128))
    y = lengths(50_000, 500, dist="lognormal", sigma=0.8, rng=np.random.default_rng(5))
    assert y.min() >= 1
    assert y.mean() == pytest.approx(500, rel=0.03)
    small = lengths(1000, 2, 0.9, "uniform", rng=np.random.default_rng(5))
    assert small.min() >= 1


@pytest.mark.parametrize(
    "args",
    [
        (10, 0),
        (10, 100.5),
        (10, 100, 1.0, "uniform"),
        (10, 100, 0.2, "fixed"),
        (10, 100, 0, "zipf"),
    ],
)
def test_lengths_bad_options(args: tuple) -> None:
    with pytest.raises(SpecError):
        lengths(*args)


def test_synthetic_reproducible_and_common_lengths_across_rates() -> None:
    w1 = synthetic(500, 5.0, 1024, 128, range_ratio=0.5, seed=3)
    w2 = synthetic(500, 5.0, 1024, 128, range_ratio=0.5, seed=3)
    w3 = synthetic(500, 5.0, 1024, 128, range_ratio=0.5, seed=4)
    w4 = synthetic(500, 9.0, 1024, 128, range_ratio=0.5, seed=3)
    for f in ("arrival_s", "input_len", "output_len"):
        np.testing.assert_array_equal(getattr(w1, f), getattr(w2, f))
        assert not np.array_equal(getattr(w1, f), getattr(w3, f))
    np.testing.assert_array_equal(w1.input_len, w4.input_len)  # rate sweep keeps lengths
    assert w1.num_requests == 500 and w1.concurrency is None
    c = synthetic(10, math.inf, 100, 10, concurrency=4)
    assert c.concurrency == 4 and not c.arrival_s.any() and c.offered_rate == math.inf
    b = synthetic(2000, 5.0, 100, 10, burstiness=0.5, seed=1)
    assert _cv2(np.diff(b.arrival_s)) > 1.5


# --------------------------------------------------------------------------- Workload


def test_workload_properties_and_immutability() -> None:
    w = Workload(np.array([0.0, 1.0, 4.0]), np.array([10, 20, 30]), np.array([1, 2, 3]), name="x")
    assert w.num_requests == 3
    assert w.offered_rate == pytest.approx(0.5)
    assert w.duration_s == 4.0
    assert w.mean_input_len == 20.0 and w.mean_output_len == 2.0
    with pytest.raises(ValueError):
        w.arrival_s[0] = 5.0
    assert Workload(np.zeros(1), [1], [1]).offered_rate == math.inf
    assert "num_requests=3" in repr(w) and w.describe()["num_requests"] == 3


@pytest.mark.parametrize(
    "args",
    [
        ([0.0, 2.0, 1.0], [1, 1, 1], [1, 1, 1]),  # decreasing
        ([0.0, float("nan")], [1, 1], [1, 1]),
        ([0.0, 1.0], [1, 0], [1, 1]),  # zero prompt
        ([0.0, 1.0], [1, 1], [1, 0]),  # zero output
        ([0.0, 1.0], [1, 1], [1]),  # shapes
        ([], [], []),
        ([0.0], [1.5], [1]),
        ([-1.0], [1], [1]),
        ([0.0], ["a"], [1]),
    ],
)
def test_workload_validation(args: tuple) -> None:
    with pytest.raises(SpecError):
        Workload(np.array(args[0]), np.array(args[1]), np.array(args[2]))


def test_workload_bad_concurrency() -> None:
    with pytest.raises(SpecError):
        Workload(np.zeros(2), [1, 1], [1, 1], concurrency=0)


# --------------------------------------------------------------------------- trace formats


def test_simple_csv_sorted_and_exact(tmp_path: Path) -> None:
    p = _write(
        tmp_path,
        "t.csv",
        "arrived_at,num_prefill_tokens,num_decode_tokens\n0.0,10,5\n0.5,20,6\n\n0.25,30,7\n",
    )
    w = read_trace(p)
    np.testing.assert_array_equal(w.arrival_s, [0.0, 0.25, 0.5])
    np.testing.assert_array_equal(w.input_len, [10, 30, 20])
    np.testing.assert_array_equal(w.output_len, [5, 7, 6])
    assert w.input_len.dtype == np.int64 and w.bad_rows == 0 and w.name == "t"


def test_simple_csv_shifted_to_zero_and_stable(tmp_path: Path) -> None:
    p = _write(
        tmp_path, "t.csv", "arrived_at,num_prefill_tokens,num_decode_tokens\n2,1,1\n3,2,2\n2,3,3\n"
    )
    w = read_trace(p)
    np.testing.assert_array_equal(w.arrival_s, [0.0, 0.0, 1.0])
    np.testing.assert_array_equal(w.input_len, [1, 3, 2])  # ties keep file order


def test_azure_csv_datetimes_to_seconds(tmp_path: Path) -> None:
    p = _write(
        tmp_path,
        "AzureLLMInferenceTrace_conv.csv",
        "TIMESTAMP,ContextTokens,GeneratedTokens\n"
        "2023-11-16 18:15:46.6805900,374,44\n"
        "2023-11-16 18:15:47.1805900,396,109\n"
        "2023-11-16 18:16:46.6805901,879,55\n"
        "2023-11-16 18:16:47,5,1\n",
    )
    w = read_trace(p)
    np.testing.assert_array_equal(w.arrival_s, [0.0, 0.5, 60.0000001, 60.31941])
    np.testing.assert_array_equal(w.input_len, [374, 396, 879, 5])
    np.testing.assert_array_equal(w.output_len, [44, 109, 55, 1])


def test_azure_2024_utc_offsets(tmp_path: Path) -> None:
    p = _write(
        tmp_path,
        "a.csv",
        "TIMESTAMP,ContextTokens,GeneratedTokens\n"
        "2024-05-10 00:00:00.009930+00:00,4808,10\n"
        "2024-05-10 00:00:01.009930+00:00,3180,8\n",
    )
    np.testing.assert_array_equal(read_trace(p, fmt="azure").arrival_s, [0.0, 1.0])


def test_mooncake_jsonl_ms_to_s(tmp_path: Path) -> None:
    text = (
        '{"timestamp": 0, "input_length": 6955, "output_length": 52, "hash_ids": [46, 47]}\n'
        '{"timestamp": 1500, "input_length": 100, "output_length": 3, "hash_ids": []}\n'
    )
    w = read_trace(_write(tmp_path, "mooncake_trace.jsonl", text))
    np.testing.assert_array_equal(w.arrival_s, [0.0, 1.5])
    np.testing.assert_array_equal(w.input_len, [6955, 100])
    np.testing.assert_array_equal(w.output_len, [52, 3])
    # Non-canonical lines (other key order, extra keys, blank lines) take the careful path.
    text2 = text + '\n{"output_length": 1, "extra": "x", "input_length": 5, "timestamp": 2500.5}\n'
    w2 = read_trace(_write(tmp_path, "m2.txt", text2))  # detected by the leading "{"
    np.testing.assert_array_equal(w2.arrival_s, [0.0, 1.5, 2.5005])
    np.testing.assert_array_equal(w2.input_len, [6955, 100, 5])
    assert w.extra["hash_ids"].tolist() == [(46, 47), ()]
    assert w2.extra["hash_ids"].tolist() == [(46, 47), (), ()]  # absent key: no blocks


@pytest.mark.parametrize("careful", [False, True])
def test_mooncake_hash_ids_follow_their_request(tmp_path: Path, careful: bool) -> None:
    # out of order: read_trace sorts by arrival and the hash_ids move with their rows
    lines = [
        '{"timestamp": 3000, "input_length": 30, "output_length": 3, "hash_ids": [7, 8, 9]}',
        '{"timestamp": 5000, "input_length": 50, "output_length": 5, "hash_ids": [5, 6]}',
        '{"timestamp": 1000, "input_length": 10, "output_length": 1, "hash_ids": [1]}',
        '{"timestamp": 2000, "input_length": 20, "output_length": 2, "hash_ids": [1, 2]}',
    ]
    if careful:  # a malformed row (skipped) and a reordered key send it down the careful path
        lines += ['{"timestamp": -1, "input_length": 5, "output_length": 5, "hash_ids": [4]}',
                  '{"input_length": 40, "timestamp": 4000, "output_length": 4, "hash_ids": [3, 4]}']
    w = read_trace(_write(tmp_path, "m.jsonl", "\n".join(lines) + "\n"), skip_bad_rows=careful)
    np.testing.assert_array_equal(w.input_len, [10, 20, 30, 40, 50] if careful else [10, 20, 30, 50])
    want = [(1,), (1, 2), (7, 8, 9), (3, 4), (5, 6)] if careful else [(1,), (1, 2), (7, 8, 9), (5, 6)]
    assert w.extra["hash_ids"].tolist() == want and w.bad_rows == int(careful)


def test_mooncake_hash_ids_of_equal_length(tmp_path: Path) -> None:
    text = "".join(f'{{"timestamp": {t}, "input_length": 5, "output_length": 3, "hash_ids": [{t}, 9]}}\n'
                   for t in (0, 1))
    w = read_trace(_write(tmp_path, "m.jsonl", text))
    assert w.extra["hash_ids"].shape == (2,) and w.extra["hash_ids"].tolist() == [(0, 9), (1, 9)]


def test_mooncake_bad_hash_ids_is_one_line_error(tmp_path: Path) -> None:
    p = _write(tmp_path, "m.jsonl",
               '{"timestamp": 0, "input_length": 5, "output_length": 3, "hash_ids": [1]}\n'
               '{"timestamp": 1, "input_length": 5, "output_length": 3, "hash_ids": ["a"]}\n')
    with pytest.raises(SpecError, match=r"m\.jsonl:2: key 'hash_ids': \['a'\] is invalid"):
        read_trace(p)


def test_mooncake_without_hash_ids_has_no_extra_column(tmp_path: Path) -> None:
    w = read_trace(_write(tmp_path, "m.jsonl", '{"timestamp": 0, "input_length": 5, "output_length": 3}\n'))
    assert dict(w.extra) == {}


def test_burstgpt_drops_failed(tmp_path: Path) -> None:
    p = _write(
        tmp_path,
        "BurstGPT_1.csv",
        "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
        "5,ChatGPT,472,18,490,Conversation log\n"
        "45,ChatGPT,1087,0,1087,Conversation log\n"
        "118,GPT-4,417,276,693,API log\n"
        "120,GPT-4,0,0,0,API log\n",
    )
    w = read_trace(p)
    np.testing.assert_array_equal(w.arrival_s, [0.0, 113.0])
    np.testing.assert_array_equal(w.input_len, [472, 417])
    np.testing.assert_array_equal(w.output_len, [18, 276])
    assert w.failed_in_trace == 2 and w.bad_rows == 0
    assert w.extra["model"].tolist() == ["ChatGPT", "GPT-4"]
    assert w.extra["total_tokens"].tolist() == [490.0, 693.0]
    assert w.extra["log_type"].tolist() == ["Conversation log", "API log"]


def test_write_trace_round_trip(tmp_path: Path) -> None:
    w = synthetic(300, 7.0, 512, 64, range_ratio=0.4, seed=9)
    write_trace(w, tmp_path / "rt.csv")
    r = read_trace(tmp_path / "rt.csv")
    # a trace's times count from its first arrival (vLLM's schedule sends the first at t_0 > 0)
    np.testing.assert_allclose(r.arrival_s, w.arrival_s - w.arrival_s[0], rtol=0, atol=1e-12)
    np.testing.assert_array_equal(r.input_len, w.input_len)
    np.testing.assert_array_equal(r.output_len, w.output_len)


# --------------------------------------------------------------------------- malformed input

_SIMPLE_HEAD = "arrived_at,num_prefill_tokens,num_decode_tokens\n"


@pytest.mark.parametrize(
    ("row", "column"),
    [
        ("1.0,abc,3", "num_prefill_tokens"),
        ("1.0,5", "num_decode_tokens"),  # missing column
        ("-1.0,5,3", "arrived_at"),
        ("nan,5,3", "arrived_at"),
        ("1.0,5,-3", "num_decode_tokens"),
        ("1.0,0,3", "num_prefill_tokens"),
        ("1.0,5,0", "num_decode_tokens"),
        ("1.0,5.5,3", "num_prefill_tokens"),
        ("inf,5,3", "arrived_at"),
    ],
)
def test_malformed_row_names_line_and_column(tmp_path: Path, row: str, column: str) -> None:
    p = _write(tmp_path, "bad.csv", _SIMPLE_HEAD + "0.0,1,1\n0.5,2,2\n" + row + "\n1.5,3,3\n")
    with pytest.raises(SpecError) as e:
        read_trace(p)
    msg = str(e.value)
    assert f"{p}:4:" in msg and repr(column) in msg and "\n" not in msg
    w = read_trace(p, skip_bad_rows=True)
    assert w.bad_rows == 1 and w.num_requests == 3


def test_extra_fields_and_first_bad_line_reported(tmp_path: Path) -> None:
    p = _write(tmp_path, "bad.csv", _SIMPLE_HEAD + "0,1,1\n1,2,2,9\n\n2,x,3\n3,3,3\n")
    with pytest.raises(SpecError, match=r"bad\.csv:3: expected 3 fields"):
        read_trace(p)
    w = read_trace(p, skip_bad_rows=True)
    assert w.bad_rows == 2
    np.testing.assert_array_equal(w.input_len, [1, 3])
    p2 = _write(tmp_path, "bad2.csv", _SIMPLE_HEAD + "0,1,1\n\n2,x,3\n1,2,2,9\n")
    with pytest.raises(SpecError, match=r"bad2\.csv:4: column 'num_prefill_tokens'"):
        read_trace(p2)


def test_first_row_with_extra_fields_is_bad(tmp_path: Path) -> None:
    # pandas alone would silently take the extra leading field as an index column.
    p = _write(tmp_path, "x.csv", _SIMPLE_HEAD + "0,1,1,1\n1,2,2\n")
    with pytest.raises(SpecError, match=r"x\.csv:2: expected 3 fields, saw 4"):
        read_trace(p)
    w = read_trace(p, skip_bad_rows=True)
    assert w.bad_rows == 1
    np.testing.assert_array_equal(w.input_len, [2])


def test_blank_and_na_rows_are_ignored(tmp_path: Path) -> None:
    for extra in ("", "0,4,4,4\n"):  # clean file (pandas) and line-by-line re-read agree
        p = _write(tmp_path, "n.csv", _SIMPLE_HEAD + "0,1,1\n\n,,\nNA,nan,\n1,2,2\n" + extra)
        w = read_trace(p, skip_bad_rows=True)
        assert w.num_requests == 2 and w.bad_rows == len(extra) // 8


def test_trailing_empty_fields_are_accepted(tmp_path: Path) -> None:
    for body in ("0,1,1,\n1,2,2\n", "0,1,1\n1,2,2,,\n"):  # first row (pandas) and later rows
        w = read_trace(_write(tmp_path, "tc.csv", _SIMPLE_HEAD + body))
        assert w.num_requests == 2 and w.bad_rows == 0


def test_azure_bare_year_is_not_a_timestamp(tmp_path: Path) -> None:
    p = _write(
        tmp_path,
        "a.csv",
        "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,3,4\n2023,3,4\n",
    )
    with pytest.raises(SpecError, match=r"a\.csv:3: column 'TIMESTAMP': '2023' is not a date-time"):
        read_trace(p)


def test_line_numbers_after_skipped_field_count_lines(tmp_path: Path) -> None:
    p = _write(tmp_path, "b.csv", _SIMPLE_HEAD + "0,1,1\n1,2,2,9\n1,2,2,9,9\n2,3,3\n3,4,-4\n")
    with pytest.raises(SpecError, match=r"b\.csv:3:"):
        read_trace(p)
    p2 = _write(tmp_path, "b2.csv", _SIMPLE_HEAD + "0,1,1\n2,3,3\n3,4,-4\n4,4,4,4\n")
    with pytest.raises(SpecError, match=r"b2\.csv:4: column 'num_decode_tokens'"):
        read_trace(p2)


def test_azure_bad_timestamp(tmp_path: Path) -> None:
    p = _write(
        tmp_path,
        "a.csv",
        "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.68,3,4\nyesterday,3,4\n",
    )
    with pytest.raises(SpecError, match=r"a\.csv:3: column 'TIMESTAMP'"):
        read_trace(p)
    assert read_trace(p, skip_bad_rows=True).bad_rows == 1


def test_mooncake_bad_lines(tmp_path: Path) -> None:
    good = '{"timestamp": 0, "input_length": 5, "output_length": 3}\n'
    for bad, key in [
        ("not json", "JSON"),
        ('{"timestamp": 1, "input_length": 5}', "output_length"),
        ('{"timestamp": -1, "input_length": 5, "output_length": 3}', "timestamp"),
        ('{"timestamp": 1, "input_length": "5", "output_length": 3}', "input_length"),
        ('{"timestamp": 1, "input_length": true, "output_length": 3}', "input_length"),
        ("[1, 2]", "JSON object"),
    ]:
        p = _write(tmp_path, "m.jsonl", good + good + bad + "\n" + good)
        with pytest.raises(SpecError) as e:
            read_trace(p)
        assert f"{p}:3:" in str(e.value) and key in str(e.value)
        w = read_trace(p, skip_bad_rows=True)
        assert w.bad_rows == 1 and w.num_requests == 3


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("", "empty"),
        ("\n\n", "empty"),
        (_SIMPLE_HEAD, "no requests"),
        ("a,b,c\n1,2,3\n", "unrecognised trace header"),
        (_SIMPLE_HEAD + "x,y,z\n", "num_prefill_tokens|arrived_at"),
    ],
)
def test_empty_and_unknown(tmp_path: Path, text: str, match: str) -> None:
    with pytest.raises(SpecError, match=match):
        read_trace(_write(tmp_path, "e.csv", text))


def test_all_rows_bad_with_skip(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="no requests"):
        read_trace(_write(tmp_path, "e.csv", _SIMPLE_HEAD + "x,1,1\n"), skip_bad_rows=True)


def test_explicit_format_missing_column(tmp_path: Path) -> None:
    p = _write(tmp_path, "s.csv", _SIMPLE_HEAD + "0,1,1\n")
    with pytest.raises(SpecError, match=r"s\.csv:1: column 'TIMESTAMP' missing"):
        read_trace(p, fmt="azure")
    with pytest.raises(SpecError, match="trace format"):
        read_trace(p, fmt="parquet")
    with pytest.raises(SpecError, match="no such file"):
        read_trace(tmp_path / "nope.csv")


# Garbage in any format: read_trace returns a valid Workload or raises SpecError, nothing else.
_HEADERS = [
    "",
    _SIMPLE_HEAD,
    "TIMESTAMP,ContextTokens,GeneratedTokens\n",
    "Timestamp,Model,Request tokens,Response tokens\n",
    '{"timestamp": 0, "input_length": 5, "output_length": 3}\n',
]
_ALPHABET = st.sampled_from(
    list('0123456789,.-+eE:" \n\r\t{}[]naifxTZ') + ["\x00", "\x1f", "\x0b", "é", "nan", "inf"]
)


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    header=st.sampled_from(_HEADERS),
    body=st.one_of(st.lists(_ALPHABET, max_size=80).map("".join), st.text(max_size=60)),
    raw=st.binary(max_size=60),
    use_raw=st.booleans(),
    skip=st.booleans(),
    ext=st.sampled_from([".csv", ".jsonl", ".txt"]),
)
def test_garbage_never_crashes(
    tmp_path: Path, header: str, body: str, raw: bytes, use_raw: bool, skip: bool, ext: str
) -> None:
    p = tmp_path / f"g{ext}"
    p.write_bytes(header.encode() + (raw if use_raw else body.encode("utf-8", "surrogatepass")))
    try:
        w = read_trace(p, skip_bad_rows=skip)
    except SpecError as e:
        assert "\n" not in str(e)
        return
    assert isinstance(w, Workload) and w.num_requests >= 1
    assert np.all(np.diff(w.arrival_s) >= 0) and w.arrival_s[0] == 0.0
    assert w.input_len.min() >= 1 and w.output_len.min() >= 1


# --------------------------------------------------------------------------- built-ins and transforms


def test_builtins_stats() -> None:
    conv, code = builtin("azure-conv"), builtin("azure-code")
    assert conv.num_requests == 19366 and code.num_requests == 8819
    assert conv.offered_rate == pytest.approx(5.53, rel=0.01)
    assert code.offered_rate == pytest.approx(2.566, rel=0.01)
    assert conv.mean_input_len == pytest.approx(1155, rel=0.01)
    assert conv.mean_output_len == pytest.approx(211, rel=0.01)
    assert code.mean_input_len == pytest.approx(2048, rel=0.01)
    assert code.mean_output_len == pytest.approx(28, rel=0.02)
    assert conv.name == "azure-conv" and conv.bad_rows == 0
    assert set(BUILTIN_WORKLOADS) == {"azure-conv", "azure-code"}
    assert all("CC-BY-4.0" in d for _, d in BUILTIN_WORKLOADS.values())


def test_load_workload(tmp_path: Path) -> None:
    assert load_workload("azure-code") is builtin("azure-code")
    assert load_workload("Azure_Conv").num_requests == 19366
    p = _write(tmp_path, "t.csv", _SIMPLE_HEAD + "0,1,1\nx,1,1\n")
    assert load_workload(str(p), skip_bad_rows=True).bad_rows == 1
    with pytest.raises(
        SpecError, match="did you mean 'azure-conv'.*built-ins: azure-conv, azure-code"
    ):
        load_workload("azure-cnv")


def test_scale_to_rate() -> None:
    w = builtin("azure-conv")
    for rate in (0.5, 10.0, 123.4):
        s = scale_to_rate(w, rate)
        assert s.offered_rate == pytest.approx(rate, rel=1e-9)
        assert _cv2(np.diff(s.arrival_s)) == pytest.approx(_cv2(np.diff(w.arrival_s)), rel=1e-6)
        np.testing.assert_array_equal(s.input_len, w.input_len)
    assert not scale_to_rate(w, math.inf).arrival_s.any()
    with pytest.raises(SpecError, match="same instant"):
        scale_to_rate(Workload(np.zeros(3), [1, 1, 1], [1, 1, 1]), 2.0)


def test_with_arrivals_keeps_lengths() -> None:
    w = builtin("azure-code")
    s = with_arrivals(w, 20.0, burstiness=0.5, seed=1)
    np.testing.assert_array_equal(s.output_len, w.output_len)
    assert s.offered_rate == pytest.approx(20.0, rel=0.05)
    np.testing.assert_array_equal(s.arrival_s, with_arrivals(w, 20.0, 0.5, seed=1).arrival_s)


def test_take_and_tile() -> None:
    w = Workload(np.array([0.0, 1.0, 2.0]), [1, 2, 3], [4, 5, 6])
    t = take(w, 2)
    np.testing.assert_array_equal(t.arrival_s, [0.0, 1.0])
    t = take(w, 7)
    np.testing.assert_array_equal(t.arrival_s, [0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
    np.testing.assert_array_equal(t.input_len, [1, 2, 3, 1, 2, 3, 1])
    assert t.offered_rate == pytest.approx(w.offered_rate)
    big = take(builtin("azure-code"), 20_000)
    assert big.num_requests == 20_000
    assert big.offered_rate == pytest.approx(builtin("azure-code").offered_rate, rel=0.01)
    one = take(Workload(np.zeros(1), [3], [4]), 3)
    assert not one.arrival_s.any()


# --------------------------------------------------------------------------- extra columns


def _with_extra() -> Workload:
    return Workload(np.array([0.0, 1.0, 2.0]), [1, 2, 3], [4, 5, 6],
                    extra={"hash_ids": [(1,), (1, 2), ()], "model": np.array(["a", "b", "c"])})


def test_extra_columns_are_read_only_and_checked() -> None:
    w = _with_extra()
    assert w.extra["hash_ids"].tolist() == [(1,), (1, 2), ()]
    with pytest.raises(ValueError):
        w.extra["model"][0] = "z"
    with pytest.raises(TypeError):
        w.extra["new"] = np.zeros(3)  # type: ignore[index]
    with pytest.raises(SpecError, match=r"workload.extra\['model'\]: expected one value per request \(2\)"):
        Workload(np.zeros(2), [1, 1], [1, 1], extra={"model": ["a"]})
    with pytest.raises(SpecError, match="workload.extra: list is not a mapping"):
        Workload(np.zeros(2), [1, 1], [1, 1], extra=[1, 2])  # type: ignore[arg-type]
    assert dict(synthetic(3, 1.0, 4, 4).extra) == {}
    same_len = Workload(np.zeros(2), [1, 1], [1, 1], extra={"hash_ids": [(1, 2), (3, 4)]})
    assert same_len.extra["hash_ids"].shape == (2,)  # a tuple per request, not a 2-D table


def test_transforms_keep_extra_columns_aligned() -> None:
    w = _with_extra()
    assert take(w, 2).extra["hash_ids"].tolist() == [(1,), (1, 2)]
    assert take(w, 5).extra["model"].tolist() == ["a", "b", "c", "a", "b"]  # tiled in order
    assert scale_to_rate(w, 4.0).extra["hash_ids"].tolist() == [(1,), (1, 2), ()]
    assert with_arrivals(w, 4.0).extra["model"].tolist() == ["a", "b", "c"]


def test_builtin_trace_files_are_package_resources() -> None:
    """The built-in CSVs are found through importlib.resources (a wheel install has no
    source tree), and the package data in pyproject.toml names them."""
    import importlib.resources

    files = importlib.resources.files("simulator.workloads.traces")
    for fname, _ in BUILTIN_WORKLOADS.values():
        assert (files / fname).is_file(), fname
    cfg = (Path(__file__).parents[1] / "pyproject.toml").read_text()
    assert re.search(r'^packages = \[[^\]]*"simulator\.workloads\.traces"', cfg, re.MULTILINE)
    assert re.search(r'^"simulator\.workloads\.traces" = \[.*"\*\.csv"', cfg, re.MULTILINE)
