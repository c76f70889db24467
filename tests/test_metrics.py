"""Tests for simulator.metrics.summary against hand values and numpy.percentile.

The hand example uses binary fractions of a second (k / 64), so every time and difference
below is exact in floating point and an SLO can sit exactly on a request's value.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.metrics.slo import parse_goodput
from simulator.metrics.summary import good_mask, summarize, weighted_percentile
from simulator.serving.records import COMPLETED, REJECTED, SimResult, tpot

# Five requests, arrivals 0..4 s. Request i: TTFT, output tokens, TPOT (one-token: none).
TTFT_S = [0.125, 0.25, 0.375, 0.5, 0.625]
OUT = [1, 2, 3, 5, 11]
TPOT_S = [math.nan, 0.0625, 0.03125, 0.015625, 0.046875]
# E2EL = TTFT + TPOT * (out - 1)
E2EL_S = [0.125, 0.3125, 0.4375, 0.5625, 1.09375]


def _result(ttft=TTFT_S, e2el=E2EL_S, out=OUT, status=None, itl=None) -> SimResult:
    """A SimResult built by hand: arrivals at 0, 1, 2, ...; ITL gaps = each request's TPOT."""
    n = len(ttft)
    arr = np.arange(n, dtype=np.float64)
    out_a = np.asarray(out, dtype=np.int64)
    st_a = np.full(n, COMPLETED) if status is None else np.asarray(status)
    if itl is None:  # every gap of request i equals its TPOT: (out_i - 1) gaps
        gaps = np.concatenate([np.full(o - 1, (e - t) / max(o - 1, 1)) for t, e, o in zip(ttft, e2el, out, strict=True)])
        itl = np.unique(gaps, return_counts=True)
    first = arr + np.asarray(ttft, dtype=np.float64)
    finish = arr + np.asarray(e2el, dtype=np.float64)
    first[st_a == REJECTED] = np.nan
    finish[st_a == REJECTED] = np.nan
    return SimResult(
        arrival_s=arr, input_len=np.full(n, 100, dtype=np.int64), output_len=out_a,
        first_token_s=first, finish_s=finish, preemptions=np.zeros(n, dtype=np.int64),
        replica=np.zeros(n, dtype=np.int64), status=st_a, reasons={}, itl_values_s=itl[0],
        itl_counts=itl[1], timeline=pd.DataFrame(), meta={},
    )


# --------------------------------------------------------------------------- tpot


def test_tpot_is_vllms_definition_and_nan_for_one_token() -> None:
    got = tpot(np.array(TTFT_S), np.array(E2EL_S), np.array(OUT))
    assert math.isnan(got[0])
    assert got[1:].tolist() == TPOT_S[1:]  # exact: binary fractions


def test_tpot_of_unfinished_request_is_nan() -> None:
    got = tpot(np.array([0.5, math.nan]), np.array([math.nan, math.nan]), np.array([4, 4]))
    assert np.isnan(got).all()


def test_records_table_uses_the_same_tpot() -> None:
    rec = _result().records()
    assert np.array_equal(rec["tpot_s"].to_numpy(), np.array(TPOT_S), equal_nan=True)


# --------------------------------------------------------------------------- hand example


def test_five_request_mean_median_p99() -> None:
    s = summarize(_result())
    # TTFT 125, 250, 375, 500, 625 ms: p99 at rank 4 * 0.99 = 3.96 -> 500 + 0.96 * 125
    assert s["mean_ttft_ms"] == pytest.approx(375.0)
    assert s["median_ttft_ms"] == pytest.approx(375.0)
    assert s["p99_ttft_ms"] == pytest.approx(620.0)
    assert s["std_ttft_ms"] == pytest.approx(math.sqrt(0.03125) * 1e3)
    # TPOT of the four multi-token requests, sorted 15.625, 31.25, 46.875, 62.5 ms;
    # p99 at rank 3 * 0.99 = 2.97 -> 46.875 + 0.97 * 15.625. The one-token request is left out.
    assert s["mean_tpot_ms"] == pytest.approx(39.0625)
    assert s["median_tpot_ms"] == pytest.approx(39.0625)
    assert s["p99_tpot_ms"] == pytest.approx(62.03125)
    # E2EL 125, 312.5, 437.5, 562.5, 1093.75 ms
    assert s["mean_e2el_ms"] == pytest.approx(506.25)
    assert s["median_e2el_ms"] == pytest.approx(437.5)
    assert s["p99_e2el_ms"] == pytest.approx(562.5 + 0.96 * 531.25)
    # ITL pooled: 4 x 15.625, 2 x 31.25, 10 x 46.875, 1 x 62.5 (17 gaps = sum(out - 1))
    assert s["mean_itl_ms"] == pytest.approx((4 * 15.625 + 2 * 31.25 + 10 * 46.875 + 62.5) / 17)
    assert s["median_itl_ms"] == pytest.approx(46.875)
    assert s["p99_itl_ms"] == pytest.approx(46.875 + 0.84 * 15.625)  # rank 16 * 0.99 = 15.84
    # duration = first arrival (0) to last completion (4 + 1.09375 s)
    assert s["duration"] == 5.09375
    assert s["completed"] == 5 and s["failed"] == 0
    assert s["total_output_tokens"] == 22 and s["total_input_tokens"] == 500
    assert s["request_throughput"] == pytest.approx(5 / 5.09375)
    assert s["output_throughput"] == pytest.approx(22 / 5.09375)
    assert s["request_goodput"] is None


def test_summary_matches_numpy_on_the_samples() -> None:
    s = summarize(_result(), percentiles=(50, 90, 95, 99, 99.9))
    samples = {"ttft": np.array(TTFT_S), "tpot": np.array(TPOT_S[1:]), "e2el": np.array(E2EL_S)}
    for key, x in samples.items():
        assert s[f"mean_{key}_ms"] == pytest.approx(np.mean(x) * 1e3)
        assert s[f"std_{key}_ms"] == pytest.approx(np.std(x) * 1e3)
        for p in (50, 90, 95, 99, 99.9):
            assert s[f"p{p:g}_{key}_ms"] == pytest.approx(np.percentile(x, p) * 1e3), (key, p)


# --------------------------------------------------------------------------- goodput


@pytest.mark.parametrize("slo, good", [
    ("ttft:375", [1, 1, 1, 0, 0]),  # request 3 sits exactly on the SLO: good (<=)
    ("ttft:374.999", [1, 1, 0, 0, 0]),
    ("tpot:31.25", [1, 0, 1, 1, 0]),  # one-token request: TPOT counts as 0
    ("tpot:31.249", [1, 0, 0, 1, 0]),
    ("e2el:437.5", [1, 1, 1, 0, 0]),
    ("ttft:375 tpot:31.25", [1, 0, 1, 0, 0]),  # every SLO must hold
    ("ttft:375 tpot:31.25 e2el:125", [1, 0, 0, 0, 0]),
])
def test_goodput_at_the_slo_boundary(slo: str, good: list[int]) -> None:
    res = _result()
    slos = parse_goodput(slo)
    assert good_mask(res, slos).astype(int).tolist() == good
    s = summarize(res, slos)
    assert s["good_requests"] == sum(good)
    assert s["request_goodput"] == pytest.approx(sum(good) / 5.09375)
    assert s["good_fraction"] == pytest.approx(sum(good) / 5)


def test_rejected_request_is_never_good() -> None:
    res = _result(status=[COMPLETED, REJECTED, COMPLETED, COMPLETED, COMPLETED])
    assert good_mask(res, parse_goodput("ttft:10000 tpot:10000 e2el:10000")).tolist() == [
        True, False, True, True, True]
    s = summarize(res, parse_goodput("e2el:10000"))
    assert s["completed"] == 4 and s["failed"] == 1 and s["good_requests"] == 4
    assert s["good_fraction"] == pytest.approx(4 / 5)


# --------------------------------------------------------------------------- one-token outputs


def test_all_one_token_outputs() -> None:
    ttft = [0.125, 0.25, 0.5]
    res = _result(ttft=ttft, e2el=ttft, out=[1, 1, 1])
    s = summarize(res, parse_goodput("tpot:0.001"))
    assert math.isnan(s["mean_tpot_ms"]) and math.isnan(s["p99_tpot_ms"])
    assert math.isnan(s["mean_itl_ms"])  # no gaps between tokens at all
    assert s["mean_ttft_ms"] == pytest.approx(875 / 3)
    assert s["total_output_tokens"] == 3
    assert s["good_requests"] == 3  # any TPOT SLO holds for a one-token output


def test_one_token_outputs_do_not_move_tpot_stats() -> None:
    base = summarize(_result(ttft=TTFT_S[1:], e2el=E2EL_S[1:], out=OUT[1:]))
    with_one = summarize(_result())
    for k in ("mean", "median", "std", "p90", "p99"):
        assert with_one[f"{k}_tpot_ms"] == base[f"{k}_tpot_ms"]


# --------------------------------------------------------------------------- percentiles


@settings(max_examples=200, deadline=None)
@given(
    data=st.lists(st.tuples(st.floats(0.0, 10.0, allow_nan=False), st.integers(0, 6)),
                  min_size=1, max_size=12),
    q=st.floats(0.0, 100.0),
)
def test_weighted_percentile_equals_numpy_on_expanded_samples(data, q) -> None:
    values = np.array(sorted({v for v, _ in data}))
    counts = np.array([sum(c for v, c in data if v == x) for x in values])
    if counts.sum() == 0:
        assert math.isnan(weighted_percentile(values, counts, q))
        return
    expanded = np.repeat(values, counts)
    assert weighted_percentile(values, counts, q) == pytest.approx(np.percentile(expanded, q), abs=1e-12)


def test_itl_statistics_equal_numpy_on_expanded_gaps() -> None:
    values = np.array([0.001, 0.002, 0.0035, 0.01])
    counts = np.array([7, 1, 3, 2])
    s = summarize(_result(itl=(values, counts)), percentiles=(50, 90, 99))
    x = np.repeat(values, counts)
    assert s["mean_itl_ms"] == pytest.approx(x.mean() * 1e3)
    assert s["std_itl_ms"] == pytest.approx(x.std() * 1e3)
    assert s["median_itl_ms"] == pytest.approx(np.median(x) * 1e3)
    for p in (50, 90, 99):
        assert s[f"p{p}_itl_ms"] == pytest.approx(np.percentile(x, p) * 1e3)
