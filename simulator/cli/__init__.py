"""The command line: commands, options, terminal tables, and every file llmsim writes (outputs, plots, Prometheus, vLLM result JSON). The only layer that writes files or prints."""
