"""The API server's loop against the engine as concurrency grows (docs/serving_model.md, "The
API server's streaming"; run by hand, ~1 min on 2 cores).

Each case runs closed loops at several concurrencies, with the `vllm` profile's streaming
(90 us an output) and without it (c = 0), and prints per concurrency: output tokens/s, median
TPOT, median ITL (one gap a chunk), median TTFT and the fraction of tokens the loop, behind the
engine, merged into chunks already waiting. Where the loop keeps up (batch x 90 us below the
step) the two runs differ only in TTFT; where it falls behind, throughput and TPOT stay the
engine's, the ITL becomes the loop's time between bursts and TTFT grows by about a burst.

    python benchmarks/stream_overload.py [NAME ...]
"""

from __future__ import annotations

import dataclasses
import sys

from simulator.metrics.summary import summarize
from simulator.scenario import Scenario

CASES = {
    "gptoss120b-h200-tp8-1k1k": dict(model="gpt-oss-120b", hardware="h200-sxm", tp=8, workload="random",
                                     input_len=1024, output_len=1024),
    "llama8b-h100-128-1024": dict(model="llama-3.1-8b", hardware="h100-sxm", workload="random",
                                  input_len=128, output_len=1024),
}
CONCURRENCIES = (32, 64, 128, 256)


def row(sc: Scenario, stream_s: float | None) -> dict:
    """The summary of one closed-loop run of `sc` under its profile's client view, the
    streaming time replaced when `stream_s` is given."""
    from simulator.serving.simulate import simulate

    view = sc.client_view()
    if stream_s is not None:
        view = dataclasses.replace(view, stream_output_s=stream_s)
    cost = sc.cost_model()
    return summarize(simulate(cost, sc.make_workload(), sc.engine_config(cost), client=view))


def main() -> None:
    for name in sys.argv[1:] or list(CASES):
        print(f"{name} (closed loop, 4 x concurrency requests): streaming 90 us an output / none")
        print(f"{'conc':>5} {'tok/s':>15} {'TPOT ms':>13} {'ITL ms':>13} {'TTFT ms':>15} {'merged':>7}")
        for conc in CONCURRENCIES:
            sc = Scenario(**CASES[name], concurrency=conc, num_requests=4 * conc)
            on, off = row(sc, None), row(sc, 0.0)
            print(f"{conc:>5} {on['output_throughput']:>7.0f}/{off['output_throughput']:<7.0f} "
                  f"{on['median_tpot_ms']:>6.2f}/{off['median_tpot_ms']:<6.2f} "
                  f"{on['median_itl_ms']:>6.2f}/{off['median_itl_ms']:<6.2f} "
                  f"{on['median_ttft_ms']:>7.1f}/{off['median_ttft_ms']:<7.1f} "
                  f"{100 * (on['stream_merged_fraction'] or 0.0):>6.1f}%")


if __name__ == "__main__":
    main()
