"""Workloads: request streams (synthetic, ShareGPT, shared prefix, traces) and the registry of named workloads. Imports only `specs`."""
