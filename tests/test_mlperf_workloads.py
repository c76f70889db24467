"""The MLPerf datasets as named workloads (workloads/mlperf.py): seeded, the published mean hit,
the caps respected, LoadGen's Offline query (all at t = 0, whole passes, each a permutation)."""

from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np
import pytest

from simulator.scenario import Scenario
from simulator.specs.checks import SpecError
from simulator.workloads import mlperf as M
from simulator.workloads.named import named_workload

NAMES = ("mlperf-openorca-llama2", "mlperf-cnndm-llama3.1-8b", "mlperf-llama3.1-405b-mix",
         "mlperf-mixtral-openorca-gsm8k-mbxp", "mlperf-deepseek-r1-mix")


def test_every_dataset_of_the_csv_is_registered_with_sources() -> None:
    assert set(M.DATASETS) == set(NAMES)
    for name in NAMES:
        entry = named_workload(name)
        assert entry is not None and "Published:" in entry.help and "Assumed:" in entry.help
        ds = M.DATASETS[name]
        # every statistic that is a number has a source entry
        for key in ("samples", "input.mean", "input.cap", "output.cap", "output.mean", "min_query_count"):
            assert ds.sources.get(key), (name, key)


@pytest.mark.parametrize("name", NAMES)
def test_lengths_match_the_stated_mean_and_respect_the_caps(name: str) -> None:
    ds = M.DATASETS[name]
    inp, out = M.dataset_lengths(name, seed=0)
    assert len(inp) == len(out) == ds.samples
    # the output mean is the published one to within half a token over N (bisection tolerance)
    assert abs(out.mean() - ds.output.mean) <= 0.5 / ds.samples + 1e-9
    assert out.min() >= ds.output.low and out.max() <= ds.output.cap
    # each input sub-dataset hits its mean; every prompt lies within the caps
    lo = 0
    for share, spec in ds.inputs:
        k = int(round(share * ds.samples))
        part = inp[lo:lo + k]
        assert abs(part.mean() - spec.mean) <= 0.5 / k + 1e-9
        assert part.min() >= spec.low and part.max() <= spec.cap
        lo += k


def test_seeded_same_seed_same_lengths_other_seed_other_lengths() -> None:
    a = M.dataset_lengths("mlperf-deepseek-r1-mix", seed=3)
    b = M.dataset_lengths("mlperf-deepseek-r1-mix", seed=3)
    c = M.dataset_lengths("mlperf-deepseek-r1-mix", seed=4)
    assert np.array_equal(a[1], b[1]) and not np.array_equal(a[1], c[1])
    assert abs(c[1].mean() - 3886.2274) < 0.5 / 4388 + 1e-9  # every seed hits the mean


def test_a_runs_own_mean_output_replaces_the_reference() -> None:
    _, out = M.dataset_lengths("mlperf-openorca-llama2", seed=0, output_mean=273.3)
    assert abs(out.mean() - 273.3) <= 0.5 / 24576 + 1e-9
    # 8B runs that report 129 tokens under the 128 cap: the run's count, every sample
    _, out8 = M.dataset_lengths("mlperf-cnndm-llama3.1-8b", output_mean=129.0)
    assert set(out8.tolist()) == {129}
    _, ref8 = M.dataset_lengths("mlperf-cnndm-llama3.1-8b")
    assert set(ref8.tolist()) == {128}


def test_cnndm_inputs_reproduce_the_official_length_quantiles() -> None:
    # len(tok_input) of all 13,368 samples of the official cnn_eval.json (the per-sample list in
    # openshift-psap/performance-dashboard, mlperf-data/summaries/llama3-1-8b-datacenter.csv):
    # mean 870.73, p10 391, median 784, p90 1479, min 79, max 2540. The synthesised draw keeps the
    # mean exactly and its quantiles within 5 %.
    inp, _ = M.dataset_lengths("mlperf-cnndm-llama3.1-8b", seed=0)
    assert abs(inp.mean() - 870.73) <= 0.5 / 13368 + 1e-9
    for q, ref in ((10, 391), (50, 784), (90, 1479)):
        assert abs(np.percentile(inp, q) / ref - 1) < 0.05, (q, np.percentile(inp, q), ref)
    assert inp.min() >= 79 and inp.max() <= 2540


def test_openorca_blocks_keep_the_official_block_means() -> None:
    # llama2-70b-99.csv (all 24,576 official rows): four origin blocks of 6,144 with input means
    # 119.70 / 188.36 / 274.86 / 306.40, 222.33 overall, every input in [48, 1021]
    inp, _ = M.dataset_lengths("mlperf-openorca-llama2", seed=0)
    blocks = inp.reshape(4, 6144).mean(axis=1)
    assert np.allclose(blocks, [119.70, 188.36, 274.86, 306.40], atol=0.5 / 6144 + 1e-9)
    assert abs(inp.mean() - 222.33) < 0.01 and inp.min() >= 48 and inp.max() <= 1023


def test_mixtral_blocks_keep_the_official_block_means() -> None:
    # mixtral-8x7b.csv (all 15,000 official rows): blocks of 5,000 with input means 665.59 / 415.39 /
    # 201.20 (427.39 overall, longest 1948); outputs mean 144.84 with sd 112.7
    inp, out = M.dataset_lengths("mlperf-mixtral-openorca-gsm8k-mbxp", seed=0)
    assert np.allclose(inp.reshape(3, 5000).mean(axis=1), [665.59, 415.39, 201.20], atol=0.02)
    assert abs(inp.mean() - 427.39) < 0.02 and inp.max() <= 1948
    assert abs(out.mean() - 144.84) <= 0.5 / 15000 + 1e-9 and abs(out.std() / 112.7 - 1) < 0.05


def test_405b_lengths_match_the_official_mean_spread_and_range() -> None:
    # all 8,313 samples (llama3-1-405b.csv, the same list): inputs mean 9428.64, sd 4067, in
    # [476, 19988]; outputs mean 684.68, sd 261, in [3, 1830]. The draw keeps both means exactly and
    # each standard deviation within 5 %; almost no output reaches the 2,000 cap.
    inp, out = M.dataset_lengths("mlperf-llama3.1-405b-mix", seed=0)
    assert abs(inp.mean() - 9428.64) <= 0.5 / 8313 + 1e-9
    assert abs(inp.std() / 4067 - 1) < 0.05 and abs(out.std() / 261 - 1) < 0.05
    assert inp.min() >= 476 and inp.max() <= 20000 and out.min() >= 3
    assert (out == 2000).mean() < 0.005


def test_clipped_output_puts_the_lognormal_tail_at_the_cap() -> None:
    # deepseek: sigma 1.0, mean 3886, cap 20000. Hand check of the continuous model: with mu
    # solved for E[min(X, cap)] = exp(mu + 1/2) Phi(ln cap - mu - 1) + cap (1 - Phi(ln cap - mu))
    # = 3886.23 (bisection: mu = 7.8146), P(X > cap) = 1 - Phi(ln 20000 - mu) is 1.84 %; the
    # official reference outputs have 83 of 4,388 (1.9 %) at or above 20000
    _, out = M.dataset_lengths("mlperf-deepseek-r1-mix", seed=0)
    at_cap = float((out == 20000).mean())
    p = 1 - NormalDist().cdf((math.log(20000) - 7.8146) / 1.0)
    assert abs(p - 0.0184) < 0.0005
    assert abs(at_cap - p) < 0.006, (at_cap, p)


def test_norm_ppf_matches_the_standard_library() -> None:
    u = np.array([1e-12, 1e-4, 0.02, 0.02425, 0.3, 0.5, 0.77, 0.97575, 0.999, 1 - 1e-9])
    ref = np.array([NormalDist().inv_cdf(float(x)) for x in u])
    assert np.max(np.abs(M.norm_ppf(u) - ref)) < 1e-7


def test_loadgen_sample_count_worked_examples() -> None:
    # Dell B200 summaries (research note section 1): 8B spq 726000 = 1.1 x 600 x 1100 -> 55
    # passes of 13368 = 735240; 405B max(8313, 1.1 x 600 x 2.18) -> 8313; DeepSeek with
    # NVIDIA's min_query_count 26328 -> 6 passes
    ds8, ds405, dsr1 = (M.DATASETS[n] for n in ("mlperf-cnndm-llama3.1-8b", "mlperf-llama3.1-405b-mix",
                                                 "mlperf-deepseek-r1-mix"))
    assert M.loadgen_sample_count(ds8, 600, 1100) == 735240
    assert M.loadgen_sample_count(ds405, 600, 2.18) == 8313
    assert M.loadgen_sample_count(dsr1, 600, 8.35, min_query_count=26328) == 26328
    assert M.loadgen_sample_count(dsr1, 600, 8.35) == 2 * 4388  # 1.1 x 600 x 8.35 = 5511 -> 2 passes


def test_offline_query_is_whole_passes_each_a_permutation_all_at_t0() -> None:
    ds = M.DATASETS["mlperf-deepseek-r1-mix"]
    w = M.offline_query(ds.name, 2 * ds.samples + 10, seed=1)
    assert w.num_requests == 2 * ds.samples + 10
    assert np.all(w.arrival_s == 0.0)
    inp, out = M.dataset_lengths(ds.name, seed=1)
    for k in range(2):  # each pass holds every sample once
        sl = slice(k * ds.samples, (k + 1) * ds.samples)
        assert sorted(w.output_len[sl].tolist()) == sorted(out.tolist())
        assert sorted(w.input_len[sl].tolist()) == sorted(inp.tolist())
    assert not np.array_equal(w.output_len[:ds.samples], w.output_len[ds.samples:2 * ds.samples])


def test_through_the_scenario_and_its_errors() -> None:
    sc = Scenario(model="llama-3.1-8b", hardware="h100-sxm", workload="mlperf-cnndm-llama3.1-8b", num_requests=50)
    w = sc.make_workload()
    assert w.num_requests == 50 and set(w.output_len.tolist()) == {128}
    sc2 = Scenario(model="llama-3.1-8b", hardware="h100-sxm", workload="mlperf-openorca-llama2",
                   workload_params={"mean_output_tokens": 300})
    assert sc2.make_workload().num_requests == 24576  # one pass when -n is not given
    with pytest.raises(SpecError, match="dataset"):
        M.dataset("mlperf-nope")
    with pytest.raises(SpecError, match="mean"):
        M.draw_lengths(M.LengthSpec(100, 1, 200, 1.0), 10, np.random.default_rng(0), mean=500)
