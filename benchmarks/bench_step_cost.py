"""How many step-cost evaluations per second one core does (target: 200,000/s).

    python benchmarks/bench_step_cost.py [--model llama-3.1-8b] [--hardware a100-sxm-80gb]

Scalar path: `CostModel.step_time(T, S, Ad, Ap, R)` called once per step, as the
discrete-event engine does. Vectorised path: `CostModel.step_times` over arrays of steps.
Both use realistic mixed batches (decodes plus an occasional prefill chunk). Not a test.

`--compare` also times the two obvious alternatives to the compiled scalar path, evaluating
the same linear forms one step at a time: plain Python (loops over the coefficient lists) and
numpy (one feature vector, two mat-vecs and a max per step); their results are checked equal
to `step_time` first. These are the figures in `CostModel._compile_scalar`'s docstring.
"""

from __future__ import annotations

import os

# one core: keep BLAS/numpy from spreading the vectorised path over threads
for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMEXPR_NUM_THREADS"):
    os.environ.setdefault(_v, "1")

import argparse  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

from simulator.resolve import make_cost_model  # noqa: E402

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


def plain_python_step_time(cost):
    """The step time from the same forms, in plain Python loops (no code generation)."""
    C, M, P = cost._C.tolist(), cost._M.tolist(), cost._P.tolist()
    moe = cost.model.moe
    E, keep = (float(moe.num_experts), 1.0 - moe.experts_per_token / moe.num_experts) if moe else (0.0, 1.0)

    def step_time(T, S, Ad=0.0, Ap=0.0, R=0.0, Aw=None, Rw=None, Pc=0.0):
        x = [1.0, T, S, 1.0 if S > 0 else 0.0, Ad, Ap, R, Ad + Ap if Aw is None else Aw,
             R if Rw is None else Rw, E * (1.0 - keep ** T) if moe else 0.0, Pc]
        t = sum(p * xi for p, xi in zip(P, x, strict=True))
        for c, m in zip(C, M, strict=True):
            a = sum(ci * xi for ci, xi in zip(c, x, strict=True))
            b = sum(mi * xi for mi, xi in zip(m, x, strict=True))
            t += a if a > b else b
        return t

    return step_time


def numpy_step_time(cost):
    """The step time from the same forms with numpy, one step per call."""
    C, M, P = cost._C, cost._M, cost._P
    moe = cost.model.moe
    E, keep = (float(moe.num_experts), 1.0 - moe.experts_per_token / moe.num_experts) if moe else (0.0, 1.0)

    def step_time(T, S, Ad=0.0, Ap=0.0, R=0.0, Aw=None, Rw=None, Pc=0.0):
        # the cheapest numpy form: a feature vector from a list, two mat-vecs, one max
        x = np.array([1.0, T, S, 1.0 if S > 0 else 0.0, Ad, Ap, R, Ad + Ap if Aw is None else Aw,
                      R if Rw is None else Rw, E * (1.0 - keep ** T) if moe else 0.0, Pc])
        return float(np.maximum(C @ x, M @ x).sum() + P @ x)

    return step_time


def bench_callable(f, n: int) -> float:
    b = _batches(n)
    args = list(zip(*(b[k].tolist() for k in ("T", "S", "Ad", "Ap", "R")), strict=True))
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        for T, S, Ad, Ap, R in args:
            f(T, S, Ad, Ap, R)
        best = min(best, time.perf_counter() - t0)
    return n / best


def compare(cost, n: int) -> None:
    """Compiled scalar path vs plain Python and numpy, one step per call (same answers)."""
    b = _batches(200)
    alts = {"plain Python loops": plain_python_step_time(cost), "numpy mat-vec": numpy_step_time(cost)}
    for name, f in alts.items():
        for T, S, Ad, Ap, R in zip(*(b[k].tolist() for k in ("T", "S", "Ad", "Ap", "R")), strict=True):
            ref = cost.step_time(T, S, Ad, Ap, R)
            assert abs(f(T, S, Ad, Ap, R) - ref) <= 1e-9 * ref, name
    compiled = bench_callable(cost.step_time, n)
    print(f"  {'compiled step_time':<22s} {compiled:14,.0f} evaluations/s")
    for name, f in alts.items():
        rate = bench_callable(f, max(n // 10, 1000))
        print(f"  {name:<22s} {rate:14,.0f} evaluations/s  (compiled is {compiled / rate:5.1f}x faster)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="llama-3.1-8b")
    ap.add_argument("--hardware", default="a100-sxm-80gb")
    ap.add_argument("--tp", type=int, default=1)
    ap.add_argument("-n", type=int, default=200_000, help="evaluations per timing run")
    ap.add_argument("--compare", action="store_true", help="also time plain Python and numpy one-step paths")
    a = ap.parse_args()
    cost = make_cost_model(a.model, a.hardware, tp=a.tp)
    print(f"{a.model} on {a.hardware} tp={a.tp}: {len(cost.ops)} ops, one core")
    for name, rate in (("scalar step_time", bench_scalar(cost, a.n)),
                       ("vectorised step_times", bench_vector(cost, a.n))):
        verdict = "meets" if rate >= TARGET else "BELOW"
        print(f"  {name:<22s} {rate:14,.0f} evaluations/s  ({rate / TARGET:6.2f}x target, {verdict} 200,000/s)")
    if a.compare:
        compare(cost, a.n)


if __name__ == "__main__":
    main()
