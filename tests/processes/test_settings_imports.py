"""Validating settings needs no AWS client: the settings module loads no SDK, checked in a fresh interpreter
(this one has loaded boto3 long before)."""

from __future__ import annotations

import subprocess
import sys


def test_settings_module_calls_no_aws() -> None:
    """Validating settings needs no AWS client: importing the settings loads no SDK at all."""
    code = "import sys, longjobs.engine.settings; print(sorted(m for m in ('boto3', 'botocore') if m in sys.modules))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"
