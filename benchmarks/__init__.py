"""Reproducible measurements of the lease engine, each printing a table (`python -m benchmarks.<name>`)."""

from longjobs.construct import quiet_node_notices

quiet_node_notices()  # before a benchmark loads the CDK (a synth, the rendered workflow), as app.py does
