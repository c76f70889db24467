"""Metrics: vLLM's benchmark metrics, SLOs and energy from a run's per-request records. Imports `specs` and `serving`."""
