"""DistServe's qualitative result in llmsim: per-GPU goodput, colocated vs disaggregated.

DistServe (Zhong et al., OSDI'24) reports that disaggregating prefill and decode raises the
per-GPU goodput (the highest rate at which >= 90 % of requests meet both the TTFT and the TPOT
SLO) when prompts are long and the SLOs tight, because prefills stall the decodes they share
steps with; with short prompts and loose SLOs colocation wins (no interference to remove, and a
disaggregated pair leaves one pool under-used). Here: Llama-3.1-8B on H100, 4 GPUs, TP 1:
4 aggregated replicas vs the best of 1:3, 2:2 and 3:1. Prints JSON; tests/test_disagg.py runs it.

    python benchmarks/distserve_goodput.py [--num-requests 400]
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from simulator.analysis.plan_disagg import goodput_per_gpu
from simulator.scenario import Scenario

CASES = {
    "long_prompts_tight_slos": {"input_len": 4000, "output_len": 200, "goodput": {"ttft": 300, "tpot": 15}},
    "short_prompts_loose_slos": {"input_len": 200, "output_len": 200, "goodput": {"ttft": 5000, "tpot": 200}},
}
SPLITS = ("1:3", "2:2", "3:1")


def run(num_requests: int = 400) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, case in CASES.items():
        base = Scenario(model="llama-3.1-8b", hardware="h100-sxm", workload="random", num_requests=num_requests,
                        **case)
        agg = goodput_per_gpu(base.replace(replicas=4))
        dis = {pd: goodput_per_gpu(base.replace(disagg=pd)) for pd in SPLITS}
        best = max(dis, key=lambda k: dis[k]["goodput_per_gpu"])
        out[name] = {"aggregated_4x_tp1": agg, "disaggregated": dis, "best_split": best,
                     "ratio_disagg_over_agg": dis[best]["goodput_per_gpu"] / agg["goodput_per_gpu"]}
    return out


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--num-requests", type=int, default=400)
    print(json.dumps(run(ap.parse_args().num_requests), indent=1))
