"""Reproducible measurements of the lease engine, each printing a table (`python -m benchmarks.<name>`)."""
