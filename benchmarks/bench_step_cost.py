"""How many step-cost evaluations per second one core does (target: 200,000/s).

    python benchmarks/bench_step_cost.py [--model llama-3.1-8b] [--hardware a100-sxm-80gb]

Scalar path: `CostModel.step_time(T, S, Ad, Ap, R)` called once per step, as the
discrete-event engine does. Vectorised path: `CostModel.step_times` over arrays of steps.
Both use realistic mixed batches (decodes plus an occasional prefill chunk). Not a test.
"""

from __future__ import annotations

import os

# one core: keep BLAS/numpy from spreading the vectorised path over threads
for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMEXPR_NUM_THREADS"):
    os.environ.setdefault(_v, "1")

import argparse  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

from simulator.roofline import make_cost_model  # noqa: E402

TARGET = 200_000.0


def _batches(n: int, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    n_dec = rng.integers(1, 257, n).astype(float)
    ctx = rng.integers(128, 4096, n).astype(float)
    chunk = np.where(rng.random(n) < 0.2, rng.integers(64, 2048, n), 0).astype(float)
    T = n_dec + chunk
    S = n_dec + (chunk > 0)
    Ad = n_dec * (ctx + 0.5)
    Ap = chunk * (chunk / 2.0)
    R = n_dec * (ctx + 1) + chunk
    return {"T": T, "S": S, "Ad": Ad, "Ap": Ap, "R": R}


def bench_scalar(cost, n: int) -> float:
    b = _batches(n)
    args = list(zip(*(b[k].tolist() for k in ("T", "S", "Ad", "Ap", "R")), strict=True))
    f = cost.step_time
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        for T, S, Ad, Ap, R in args:
            f(T, S, Ad, Ap, R)
        best = min(best, time.perf_counter() - t0)
    return n / best


def bench_vector(cost, n: int) -> float:
    b = _batches(n)
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        cost.step_times(b["T"], b["S"], b["Ad"], b["Ap"], b["R"])
        best = min(best, time.perf_counter() - t0)
    return n / best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="llama-3.1-8b")
    ap.add_argument("--hardware", default="a100-sxm-80gb")
    ap.add_argument("--tp", type=int, default=1)
    ap.add_argument("-n", type=int, default=200_000, help="evaluations per timing run")
    a = ap.parse_args()
    cost = make_cost_model(a.model, a.hardware, tp=a.tp)
    print(f"{a.model} on {a.hardware} tp={a.tp}: {len(cost.ops)} ops, one core")
    for name, rate in (("scalar step_time", bench_scalar(cost, a.n)),
                       ("vectorised step_times", bench_vector(cost, a.n))):
        verdict = "meets" if rate >= TARGET else "BELOW"
        print(f"  {name:<22s} {rate:14,.0f} evaluations/s  ({rate / TARGET:6.2f}x target, {verdict} 200,000/s)")


if __name__ == "__main__":
    main()
