"""The five LLM datasets of MLPerf Inference v5.1 as synthetic workloads, and LoadGen's Offline query.

MLPerf publishes summary statistics of its datasets (sample count, length caps, the reference
model's mean output per sample). The per-sample token lengths of all five official dataset files
are listed by a third party (the openshift-psap performance dashboard's summaries, generated from
the official pickles and JSON); their means, ranges and spreads are used here, not the lists
themselves. Each dataset is synthesised: a seeded draw of N (input, output) pairs whose shape is
a lognormal (inputs truncated to the dataset's range, outputs clipped at max_new_tokens, where
generation stops) with mu solved so that the *sample* mean equals the target mean exactly
(bisection on mu with the standard-normal draws held fixed; the lengths are integers, so
"exactly" means within half a token over N samples) and sigma chosen so the draw's spread
matches the list's. Every statistic carries a `sources` entry with its tag:

* KNOWN: a primary source (MLCommons' reference implementation, LoadGen's config, the
  submission checker's constants, NVIDIA's or AMD's v5.1 submission configs), or computed from
  every sample of a per-sample list of the official dataset (whose output column reproduces the
  published mean output where there is one);
* SECONDARY: a third party quoting a primary source that could not be opened;
* ASSUMED: a modelling choice with no source (the lognormal shape itself; Mixtral's spread
  inside each 1,000-row step; the llama2 output spread).

Source keys used below: INF-* is MLCommons' reference implementation (mlcommons/inference:
INF-TSI loadgen/test_settings_internal.cc, INF-LG LoadGen's Offline and equal-issue logic,
INF-RES its summary of a run, INF-CONF loadgen/mlperf.conf, INF-CONST
tools/submission/submission_checker/constants.py); NV-* is NVIDIA's v5.1 submission
(mlcommons/inference_results_v5.1 closed/NVIDIA: NV-PRE its dataset preprocessing scripts, NV-CFG
its per-system configs); BLOG-V5 is MLCommons' v5 announcement of the benchmark. Commits are in
each `sources` entry.

LoadGen's Offline scenario (INF-TSI, INF-LG): one query holding every sample, issued at t = 0;
samples_per_query = max(min_query_count, 1.1 x min_duration x target_qps), padded up to a whole
number of passes over the dataset ("equal issue" mode), each pass a fresh permutation. The
reported numbers are totals / the time of the last completion (INF-RES):
`Tokens per second` = output tokens / makespan, `Samples per second` = samples / makespan.
`offline_query` builds that query; `loadgen_sample_count` is the padded count.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np

from simulator.specs.checks import SpecError
from simulator.workloads import workload as wl

#: LoadGen's slack on the expected sample count ("generates 10% more queries than it thinks it
#: needs to meet the minimum test duration"): kSlack in loadgen/test_settings_internal.cc (INF-TSI)
LOADGEN_SLACK = 1.1


@dataclass(frozen=True)
class LengthSpec:
    """One length distribution: a lognormal of log-sd `sigma` whose sample mean is `mean`,
    `truncated` to [low, cap] (a dataset filter removed the rest) or `clipped` into it (generation
    stops at max_new_tokens: mass at the cap). `sigma` 0 draws the mean for every sample."""

    mean: float
    low: int
    cap: int
    sigma: float
    shape: str = "clipped"  # "truncated" | "clipped"

    def __post_init__(self) -> None:
        if self.shape not in ("truncated", "clipped"):
            raise SpecError(f"shape: {self.shape!r} must be 'truncated' or 'clipped'")
        if not 1 <= self.low <= self.cap:
            raise SpecError(f"low: {self.low} must be in [1, cap = {self.cap}]")
        if not self.low <= self.mean <= self.cap:
            raise SpecError(f"mean: {self.mean:g} must be in [low = {self.low}, cap = {self.cap}]")
        if not 0 <= self.sigma <= 5:
            raise SpecError(f"sigma: {self.sigma!r} must be in [0, 5]")


@dataclass(frozen=True)
class MlperfDataset:
    """One MLPerf dataset: `samples` (N) pairs; inputs from `inputs` ((share, LengthSpec) per
    sub-dataset, shares summing to 1), outputs from `output`; LoadGen's `min_query_count`;
    `sources` maps each statistic to its citation; `published` / `assumed` say in words which
    statistics are published and which are assumed (shown in the workload's help)."""

    name: str
    benchmark: str
    samples: int
    inputs: tuple[tuple[float, LengthSpec], ...]
    output: LengthSpec
    min_query_count: int
    published: str
    assumed: str
    sources: dict[str, str] = field(default_factory=dict)

    @property
    def mean_input(self) -> float:
        return sum(share * spec.mean for share, spec in self.inputs)

    @property
    def help(self) -> str:
        return (f"MLPerf Inference v5.1 {self.benchmark} dataset, synthesised ({self.samples} samples, "
                f"mean input {self.mean_input:.0f} / output {self.output.mean:g} tokens). "
                f"Published: {self.published}. Assumed: {self.assumed}. All at t=0 unless --rate "
                "(LoadGen Offline); sources: simulator/workloads/mlperf.py")


# ---------------------------------------------------------------------------- the datasets

_OFFLINE = "loadgen/mlperf.conf @001712e9 (INF-CONF): <model>.Offline.min_query_count"
_CHECKER = "tools/submission/submission_checker/constants.py @001d64ca (INF-CONST), section v5.1"

DATASETS: dict[str, MlperfDataset] = {d.name: d for d in (
    MlperfDataset(
        "mlperf-openorca-llama2", "llama2-70b", 24576,
        # the four origin blocks of 6,144 samples each, in the official file's order
        inputs=((0.25, LengthSpec(119.70, 48, 1023, 0.30, "truncated")),
                (0.25, LengthSpec(188.36, 48, 1023, 0.70, "truncated")),
                (0.25, LengthSpec(274.86, 48, 1023, 0.47, "truncated")),
                (0.25, LengthSpec(306.40, 48, 1023, 0.72, "truncated"))),
        output=LengthSpec(294.45, 1, 1024, 1.0, "clipped"),
        min_query_count=24576,
        published="N=24576 = 4 origin blocks of 6144, input means 119.70 / 188.36 / 274.86 / 306.40 "
                  "(222.33 overall) in [48, 1021], max_new_tokens 1024, mean output 294.45",
        assumed="the shapes (a lognormal per block with the block's log-sd; the real blocks are skewed "
                "further, overall median 152 against 173 drawn) and the output spread",
        sources={
            "samples": f"{_CHECKER}; language/llama2-70b/README.md @00bf8346 (24576 = 4 origins x 6144)",
            "input.cap": "language/llama2-70b/processorca.py @01b4e7eb filter_seqlen_oob: tok_input_length < 1024 (KNOWN)",
            "input.mean": "KNOWN: the block means of tok_input_length over all 24,576 rows of "
                          "openshift-psap/performance-dashboard@7cd1065d:mlperf-data/summaries/llama2-70b-99.csv "
                          "(the official pkl's lengths; overall 222.33). Was 230, sampled from 429 rows. 2026-12-05",
            "input.sigma": "KNOWN spread: the blocks' log-sds 0.29 / 0.68 / 0.46 / 0.70 in the same file; the "
                           "sigmas give the truncated draws 0.30 / 0.61 / 0.46 / 0.64",
            "input.low": "KNOWN: the shortest of the 24,576 inputs has 48 tokens (the longest 1,021)",
            "output.cap": "language/llama2-70b/SUT.py @0257f68b max_new_tokens 1024 (KNOWN)",
            "output.mean": "language/llama2-70b/README.md @00bf8346 'Tokens per sample: 294.45' (KNOWN)",
            "output.sigma": "ASSUMED 1.0 (the GPT-4 reference outputs of the same file: log-sd 1.11)",
            "min_query_count": _OFFLINE,
        }),
    MlperfDataset(
        "mlperf-cnndm-llama3.1-8b", "llama3.1-8b", 13368,
        inputs=((1.0, LengthSpec(870.73, 79, 2540, 0.52, "truncated")),),
        output=LengthSpec(128, 1, 128, 0.0, "clipped"),
        min_query_count=13368,
        published="N=13368, input mean 870.73 in [79, 2540] (log-sd 0.50), max_new_tokens 128 (every v5.1 run: "
                  "128-129 tokens/sample)",
        assumed="the input shape (a lognormal matching the published mean and log-sd)",
        sources={
            "samples": f"{_CHECKER}; language/llama3.1-8b/README.md @0ff06ce9 --total-sample-count 13368",
            "input.cap": "NVIDIA v5.1 closed/NVIDIA/code/llama3_1-8b/tensorrt/preprocess_data.py "
                         "G_LLAMA3_1_8B_MAX_INPUT_SEQLEN = 2540 (NV-PRE, KNOWN)",
            "input.mean": "KNOWN: 870.73 = the mean of len(tok_input) over all 13,368 samples of the official "
                          "cnn_eval.json, as openshift-psap/performance-dashboard@b04ea53f:mlperf-data/summaries/"
                          "llama3-1-8b-datacenter.csv lists them (generate_dataset_summaries.py process_llama31_8b; "
                          "median 784, p10 391, p90 1479). Replaces 778 (SECONDARY, a third-party quote), 2026-12-05",
            "input.sigma": "KNOWN: the same 13,368 lengths have log-sd 0.504; sigma 0.52 gives the truncated "
                           "draw log-sd 0.50 and p10/p50/p90 402/777/1491 against the file's 391/784/1479",
            "input.low": "KNOWN: the shortest of the same 13,368 inputs is 79 tokens (the longest 2540 = input.cap)",
            "output.cap": "language/llama3.1-8b/SUT_VLLM.py @64eb7813 max_tokens 128 (KNOWN)",
            "output.mean": "every v5.1 Offline run reports 128.0-129.0 tokens/sample (dev_mlperf51_offline.csv "
                           "notes, DERIVED tokens/s / samples/s): summaries run to the cap",
            "min_query_count": _OFFLINE,
        }),
    MlperfDataset(
        "mlperf-llama3.1-405b-mix", "llama3.1-405b", 8313,
        inputs=((1.0, LengthSpec(9428.64, 476, 20000, 0.5, "truncated")),),
        output=LengthSpec(684.68, 3, 2000, 0.37, "clipped"),
        min_query_count=8313,
        published="N=8313, mean input 9428.64 in [476, 19988], max_new_tokens 2000, mean output 684.68 in [3, 1830]",
        assumed="both shapes: lognormals matching the per-sample list's mean and standard deviation (the real "
                "inputs are left-skewed, median 10112 above the mean, which a lognormal cannot follow)",
        sources={
            "samples": f"{_CHECKER}; language/llama3.1-405b/README.md @0fa0692b",
            "input.mean": "KNOWN: 9428.64 = the mean over all 8,313 samples of "
                          "openshift-psap/performance-dashboard@739352b6:mlperf-data/summaries/llama3-1-405b.csv "
                          "(per-sample token lengths of the official dataset; its output column averages "
                          "684.68, the published figure); https://mlcommons.org/2025/04/llm-inference-v5 rounds it "
                          "to 9,400 (BLOG-V5). 2026-12-05",
            "input.cap": "NVIDIA v5.1 closed/NVIDIA/code/llama3_1-405b/tensorrt/preprocess_data.py "
                         "G_MAX_TOK_LEN = 20_000 (NV-PRE, KNOWN; the longest sample has 19,988)",
            "input.sigma": "KNOWN spread: sigma 0.5 gives the truncated draw the list's standard deviation "
                           "(3,967 against 4,067); was ASSUMED 0.6",
            "input.low": "KNOWN: the shortest of the 8,313 inputs has 476 tokens (was ASSUMED 64)",
            "output.cap": "language/llama3.1-405b/SUT_VLLM.py @41199ffd max_tokens 2000 (KNOWN)",
            "output.mean": "language/llama3.1-405b/README.md @0fa0692b and INF-CONST: 684.68 tokens/sample (KNOWN)",
            "output.sigma": "KNOWN spread: sigma 0.37 gives the draw the list's standard deviation (261; p99 1,512 "
                            "against 1,174, longest 1,830); was ASSUMED 1.0, which put 8 % of the samples at the "
                            "2,000 cap",
            "output.low": "KNOWN: the shortest reference output has 3 tokens",
            "min_query_count": _OFFLINE,
        }),
    MlperfDataset(
        "mlperf-mixtral-openorca-gsm8k-mbxp", "mixtral-8x7b", 15000,
        # the file's three blocks of 5,000 in its order; the middle one steps every 1,000 rows
        inputs=((1 / 3, LengthSpec(665.59, 614, 834, 0.035, "truncated")),  # GSM8K (few-shot CoT prompt)
                *((1 / 15, LengthSpec(m, 35, 1948, 0.5, "truncated"))       # MBXP, 5 x 1,000
                  for m in (105.3, 181.1, 261.2, 306.3, 1223.1)),
                (1 / 3, LengthSpec(201.20, 104, 997, 0.35, "truncated"))),  # OpenOrca
        output=LengthSpec(144.84, 2, 1024, 0.7, "clipped"),
        min_query_count=15000,
        published="N=15000 in three blocks of 5000, input means 665.59 / 415.39 / 201.20 (427.39 overall, "
                  "at most 1948), max_new_tokens 1024 (min 2), mean output 144.84",
        assumed="which block is which sub-dataset (inferred from the lengths), the shape inside each block "
                "or 1,000-row step, and outputs independent of inputs",
        sources={
            "samples": f"{_CHECKER}; language/mixtral-8x7b/README.md @003d4d3a (5000 + 5000 + 5000)",
            "input.cap": "NVIDIA v5.1 closed/NVIDIA/code/mixtral-8x7b/tensorrt/preprocess_data.py "
                         "G_MAX_INPUT_TOK_LEN = 2048 (NV-PRE, KNOWN; the longest sample has 1,948)",
            "input.mean": "KNOWN: all 15,000 rows of openshift-psap/performance-dashboard@67033bae:mlperf-data/"
                          "summaries/mixtral-8x7b.csv (its output column averages 144.84, the published figure): "
                          "rows 1-5000 mean 665.59 in [614, 834] (GSM8K: one row of NV-PRE-mixtral-8x7b has 657), "
                          "rows 5001-10000 mean 415.39 in [35, 1948] stepping every 1,000 rows (means 105.3, "
                          "181.1, 261.2, 306.3, 1223.1; taken as MBXP's languages), rows 10001-15000 mean 201.20 "
                          "in [104, 997] (OpenOrca). Was 290 / 660 / 1100, sampled from ~100 rows a block "
                          "(683 overall against 427.39). 2026-12-05",
            "input.sigma": "KNOWN spread: the blocks' log-sds 0.035 / 1.036 / 0.324 and the overall sd 328.6 "
                           "(drawn: 328.4); each 1,000-row step's own sigma 0.5 is ASSUMED",
            "input.low": "KNOWN: each block's shortest input in the same file (614, 35, 104)",
            "output.cap": "language/mixtral-8x7b/SUT.py @0ac8bdc5 max_new_tokens 1024, min_new_tokens 2 (KNOWN)",
            "output.mean": "language/mixtral-8x7b/README.md @003d4d3a 144.84 tokens/sample (KNOWN)",
            "output.sigma": "KNOWN spread: sigma 0.7 gives the draw the file's sd (113 against 112.7) and its "
                            "p10/p50/p90 47/113/279 (the file's 47/113/279); was ASSUMED 0.8",
            "min_query_count": _OFFLINE,
        }),
    MlperfDataset(
        "mlperf-deepseek-r1-mix", "deepseek-r1", 4388,
        inputs=((1.0, LengthSpec(803.79, 52, 3140, 0.87, "truncated")),),
        output=LengthSpec(3886.2274, 209, 20000, 1.0, "clipped"),
        min_query_count=4388,
        published="N=4388, input mean 803.79 in [52, 3140], max_new_tokens 20000, mean output 3886.2274 "
                  "(reference outputs capped at 20000; 1.9 % of them reach it)",
        assumed="both shapes: lognormals matched to the per-sample list's spreads (its inputs are "
                "left-skewed, median 901 above the mean, which a lognormal cannot follow)",
        sources={
            "samples": f"{_CHECKER}; language/deepseek-r1/README.md @00bb55f0",
            "input.cap": "language/deepseek-r1/utils/backend_registry.py @495962a1 MAX_ISL = 3136 (KNOWN); the "
                         "per-sample list below has a longest input of 3140, used as the cap",
            "input.mean": "KNOWN: 803.79 = the mean tok_input_len over all 4,388 samples of "
                          "openshift-psap/performance-dashboard@c402a312:datasets/summaries/deepseek-r1.csv "
                          "(tok_input_len / tok_ref_output_len of mlperf_deepseek_r1_dataset_4388_fp8_eval.pkl, "
                          "datasets/generate_summaries.py). Was 800, a third-party quote. 2026-12-05",
            "input.sigma": "KNOWN spread: the list's log-sd 0.87 (the truncated draw: 0.80)",
            "input.low": "KNOWN: the shortest of the 4,388 inputs has 52 tokens",
            "output.cap": "language/deepseek-r1/utils/backend_registry.py @495962a1 MAX_OSL = 20 * 1000 (KNOWN)",
            "output.mean": f"{_CHECKER}: TOKENS_PER_SAMPLE 3886.2274 (KNOWN; the same list's reference outputs "
                           "capped at 20000 average exactly that; uncapped 4043.45, 48 samples at 32768)",
            "output.sigma": "KNOWN spread: sigma 1.0 draws p10/p50/p90/p95 679/2454/8817/12655 and 2.2 % at the "
                            "cap against the list's 627/2194/9477/13854 and 1.9 % (83 samples); was ASSUMED 0.9",
            "output.low": "KNOWN: the shortest reference output has 209 tokens",
            "min_query_count": _OFFLINE,
        }),
)}


def dataset(name: str) -> MlperfDataset:
    """The dataset called `name` (one-line error listing the names otherwise)."""
    key = str(name).strip().lower()
    if key not in DATASETS:
        raise SpecError(f"dataset: {name!r} is not an MLPerf dataset; known: {', '.join(DATASETS)}")
    return DATASETS[key]


# ---------------------------------------------------------------------------- drawing lengths


def _norm_cdf(x: float) -> float:
    return 0.5 * math.erfc(-x / math.sqrt(2.0))


# Acklam's rational approximation of the standard normal quantile (relative error < 1.2e-9):
# numpy has no vectorised inverse error function and scipy is not a dependency.
_A = (-3.969683028665376e01, 2.209460984245205e02, -2.759285104469687e02, 1.383577518672690e02,
      -3.066479806614716e01, 2.506628277459239e00)
_B = (-5.447609879822406e01, 1.615858368580409e02, -1.556989798598866e02, 6.680131188771972e01,
      -1.328068155288572e01)
_C = (-7.784894002430293e-03, -3.223964580411365e-01, -2.400758277161838e00, -2.549732539343734e00,
      4.374664141464968e00, 2.938163982698783e00)
_D = (7.784695709041462e-03, 3.224671290700398e-01, 2.445134137142996e00, 3.754408661907416e00)


def norm_ppf(u: np.ndarray) -> np.ndarray:
    """The standard normal quantile of each u in (0, 1) (Acklam's approximation)."""
    u = np.clip(np.asarray(u, dtype=float), 1e-300, 1 - 1e-16)
    out = np.empty_like(u)
    lo, hi = u < 0.02425, u > 1 - 0.02425
    mid = ~(lo | hi)
    q = u[mid] - 0.5
    r = q * q
    out[mid] = (((((_A[0] * r + _A[1]) * r + _A[2]) * r + _A[3]) * r + _A[4]) * r + _A[5]) * q / (
        ((((_B[0] * r + _B[1]) * r + _B[2]) * r + _B[3]) * r + _B[4]) * r + 1)
    for mask, sign in ((lo, 1.0), (hi, -1.0)):
        p = u[mask] if sign > 0 else 1 - u[mask]
        q = np.sqrt(-2 * np.log(p))
        out[mask] = sign * (((((_C[0] * q + _C[1]) * q + _C[2]) * q + _C[3]) * q + _C[4]) * q + _C[5]) / (
            (((_D[0] * q + _D[1]) * q + _D[2]) * q + _D[3]) * q + 1)
    return out


def _values_at(spec: LengthSpec, mu: float, u: np.ndarray, z: np.ndarray) -> np.ndarray:
    """Real-valued lengths in [low, cap] for location `mu`: truncated by the inverse CDF of the
    truncated normal at the fixed uniforms `u`, clipped from the fixed normals `z`."""
    s = spec.sigma
    if spec.shape == "truncated":
        za, zb = (math.log(spec.low) - mu) / s, (math.log(spec.cap) - mu) / s
        if za > 0:  # mostly above the median: work with upper tails, where they keep precision
            sa, sb = _norm_cdf(-za), _norm_cdf(-zb)
            q = -norm_ppf(sa - u * (sa - sb)) if sa - sb > 1e-300 else np.full(u.shape, za)
        else:
            a, b = _norm_cdf(za), _norm_cdf(zb)
            q = norm_ppf(a + u * (b - a)) if b - a > 1e-300 else np.full(u.shape, zb)
        x = np.exp(mu + s * q)
    else:
        x = np.exp(mu + s * z)
    return np.clip(x, spec.low, spec.cap)


def _round_to_sum(x: np.ndarray, total: int, cap: int) -> np.ndarray:
    """Integers from `x` (floors, plus one for the largest fractional parts: "largest remainder")
    summing to `total` when the floors and the room below `cap` allow it."""
    base = np.floor(x).astype(np.int64)
    need = total - int(base.sum())
    frac = np.where(base < cap, x - base, -1.0)
    if 0 < need <= int((frac >= 0).sum()):
        base[np.argsort(-frac, kind="stable")[:need]] += 1
    return base


def draw_lengths(spec: LengthSpec, n: int, rng: np.random.Generator, mean: float | None = None) -> np.ndarray:
    """n integer lengths from `spec` whose sample mean is `mean` (default `spec.mean`) to within
    half a token over n: bisection on mu with the draws held fixed (the lengths grow with mu, so
    their mean is monotone in it), then largest-remainder rounding to the integer total
    round(mean x n). sigma 0, or a mean at a cap, gives a constant."""
    target = spec.mean if mean is None else float(mean)
    if not spec.low <= target <= spec.cap:
        raise SpecError(f"mean: {target:g} tokens must lie in [{spec.low}, {spec.cap}]")
    u = rng.random(n)
    z = rng.standard_normal(n)
    if spec.sigma == 0 or target >= spec.cap or target <= spec.low:
        return np.full(n, int(round(min(max(target, spec.low), spec.cap))), dtype=np.int64)
    lo, hi = math.log(spec.low) - 8 * spec.sigma - 1, math.log(spec.cap) + 8 * spec.sigma + 1
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if float(_values_at(spec, mid, u, z).mean()) < target:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-13:
            break
    return _round_to_sum(_values_at(spec, 0.5 * (lo + hi), u, z), int(round(target * n)), spec.cap)


@lru_cache(maxsize=32)
def _dataset_arrays(name: str, seed: int, output_mean: float | None) -> tuple[np.ndarray, np.ndarray]:
    ds = dataset(name)
    g_in, g_out = (np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(2))
    sizes = [int(round(share * ds.samples)) for share, _ in ds.inputs]
    sizes[-1] = ds.samples - sum(sizes[:-1])
    inp = np.concatenate([draw_lengths(spec, k, g_in) for (_, spec), k in zip(ds.inputs, sizes, strict=True)])
    out = draw_lengths(ds.output, ds.samples, g_out, output_mean)
    inp.setflags(write=False)
    out.setflags(write=False)
    return inp, out


def dataset_lengths(name: str, seed: int = 0, output_mean: float | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The synthetic dataset: N input and N output lengths (read-only arrays, cached), every
    draw from generators seeded by `seed`. `output_mean` replaces the reference mean output (a
    run's own mean, Tokens/s / Samples/s of the same run); a mean above max_new_tokens (runs
    that count 129 tokens under a 128 cap) raises the cap to it."""
    ds = dataset(name)
    if output_mean is not None:
        if not (math.isfinite(output_mean) and output_mean >= ds.output.low):
            raise SpecError(f"output_mean: {output_mean!r} must be a number >= {ds.output.low}")
        output_mean = round(float(output_mean), 3)
    return _dataset_arrays(ds.name, int(seed), output_mean) if output_mean is None or output_mean <= ds.output.cap \
        else _capped_above(ds, int(seed), output_mean)


def _capped_above(ds: MlperfDataset, seed: int, output_mean: float) -> tuple[np.ndarray, np.ndarray]:
    inp, _ = _dataset_arrays(ds.name, seed, None)
    out = np.full(ds.samples, int(round(output_mean)), dtype=np.int64)
    out.setflags(write=False)
    return inp, out


# ---------------------------------------------------------------------------- LoadGen Offline


def loadgen_sample_count(ds: MlperfDataset, min_duration_s: float, target_qps: float,
                         min_query_count: int | None = None) -> int:
    """Samples in LoadGen's one Offline query: max(min_query_count, 1.1 x min_duration x
    target_qps) padded up to whole passes over the dataset (equal-issue mode, INF-LG)."""
    if not (min_duration_s >= 0 and target_qps >= 0 and math.isfinite(min_duration_s * target_qps)):
        raise SpecError(f"min_duration_s, target_qps: {min_duration_s!r}, {target_qps!r} must be finite numbers >= 0")
    spq = max(min_query_count or ds.min_query_count, math.ceil(LOADGEN_SLACK * min_duration_s * target_qps))
    return -(-spq // ds.samples) * ds.samples


def offline_query(name: str, num_samples: int | None = None, *, seed: int = 0,
                  output_mean: float | None = None, rate: float | None = None,
                  burstiness: float = 1.0) -> wl.Workload:
    """LoadGen's Offline query over dataset `name`: `num_samples` (default: one pass) taken from
    back-to-back passes over the N samples, each pass a fresh seeded permutation; all at t = 0
    (or at `rate` req/s, Poisson/gamma, for serving what-ifs)."""
    ds = dataset(name)
    n = ds.samples if num_samples is None else int(num_samples)
    if n < 1:
        raise SpecError(f"num_requests: {num_samples!r} must be >= 1")
    inp, out = dataset_lengths(ds.name, seed, output_mean)
    g_perm, g_arr = (np.random.default_rng(s) for s in np.random.SeedSequence([seed, 1]).spawn(2))
    passes = -(-n // ds.samples)
    order = np.concatenate([g_perm.permutation(ds.samples) for _ in range(passes)])[:n]
    r = math.inf if rate is None else rate
    t = wl.arrivals(n, r, burstiness, g_arr, "poisson" if burstiness == 1 else "gamma")
    label = f"{ds.name}(n={n}, seed={seed}" + (f", mean output {output_mean:g}" if output_mean else "") + ")"
    return wl.Workload(t, inp[order], out[order], name=label)


__all__ = ["DATASETS", "LOADGEN_SLACK", "LengthSpec", "MlperfDataset", "dataset", "dataset_lengths",
           "draw_lengths", "loadgen_sample_count", "norm_ppf", "offline_query"]
