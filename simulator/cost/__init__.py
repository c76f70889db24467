"""Cost: the price of one engine step from specs alone (roofline, memory, network, parallelism, static-batch prediction, utilization). Imports only `specs` (never the catalog)."""
