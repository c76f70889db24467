"""Specs: validated descriptions of accelerators, models and a replica's layout, the one value-check layer, and the catalogs that find them by name. Imports nothing else of the package."""
