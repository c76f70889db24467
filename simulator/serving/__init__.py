"""Serving: the discrete-event simulation of replicas, their schedulers and paged KV memory; per-request records. Imports `specs`, `cost` and `workloads`."""
