"""The project's tests: `unit` (pure), `functional` (moto), `infra` (synth), `pipeline` (local Spark),
`e2e` (the real offline runtime)."""

from pathlib import Path

from longjobs.construct import quiet_node_notices

quiet_node_notices()  # before any test imports aws_cdk (jsii's Node process, and the `cdk` runs, inherit it)

REPO_ROOT = Path(__file__).resolve().parent.parent
"""This repository's folder: `app.py`, `cdk.json`, `jobs.json` and the `longjobs` package."""
