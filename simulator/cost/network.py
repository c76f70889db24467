"""Links between GPUs: NVLink-class within a node, the scale-out network between nodes.

A hardware spec gives `link_bandwidth_bytes_per_s` / `link_latency_s` (the scale-up link,
e.g. NVLink, one direction per GPU) and optionally `scaleout_bandwidth_bytes_per_s` /
`scaleout_latency_s` (the InfiniBand / RoCE NIC of one GPU) and `gpus_per_node` (default 8).
When the scale-out fields are omitted the vendor default below applies (per GPU, one
direction; docs/deployments.md):

* NVIDIA: 400 Gb/s = 50 GB/s (one ConnectX-7 NDR NIC per GPU: NVIDIA DGX H100 / H200 /
  B200 datasheets, "8x ConnectX-7 400 Gb/s").
* AMD: 400 Gb/s = 50 GB/s (one 400 GbE NIC per GPU on the MI300X platform: AMD Instinct
  MI300X platform data sheet).
* Intel: 600 Gb/s = 75 GB/s (Gaudi 3: 3 of its 24 integrated 200 GbE ports face scale-out:
  Intel Gaudi 3 AI accelerator white paper).
* Google and others: 200 Gb/s = 25 GB/s (an assumption: no per-chip figure published).

Latency default 10 us for every vendor: an assumption of the order of an RDMA round trip
through one switch plus the software stack (not fitted to a measurement).
"""

from __future__ import annotations

from dataclasses import dataclass

from simulator.specs.hardware import HardwareSpec

#: vendor (lower case) -> scale-out bytes/s per GPU
SCALEOUT_BANDWIDTH_BYTES_PER_S = {"nvidia": 50e9, "amd": 50e9, "intel": 75e9}
DEFAULT_SCALEOUT_BANDWIDTH_BYTES_PER_S = 25e9
DEFAULT_SCALEOUT_LATENCY_S = 10e-6


@dataclass(frozen=True)
class Link:
    """One class of link: per-GPU bandwidth (one direction) and latency."""

    kind: str  # "nvlink" (scale-up, within a node) | "scale-out" (between nodes)
    bandwidth_bytes_per_s: float
    latency_s: float


def scaleup_link(hw: HardwareSpec) -> Link:
    return Link("nvlink", hw.link_bandwidth_bytes_per_s, hw.link_latency_s)


def scaleout_link(hw: HardwareSpec) -> Link:
    bw = hw.scaleout_bandwidth_bytes_per_s
    if bw is None:
        bw = SCALEOUT_BANDWIDTH_BYTES_PER_S.get(hw.vendor.lower(), DEFAULT_SCALEOUT_BANDWIDTH_BYTES_PER_S)
    lat = hw.scaleout_latency_s if hw.scaleout_latency_s is not None else DEFAULT_SCALEOUT_LATENCY_S
    return Link("scale-out", float(bw), float(lat))


def group_link(hw: HardwareSpec, group_gpus: int) -> Link:
    """The link a collective over `group_gpus` GPUs is bound by: NVLink while the group fits
    in one node, else the scale-out network (the slowest hop bounds a ring)."""
    return scaleup_link(hw) if group_gpus <= hw.gpus_per_node else scaleout_link(hw)
