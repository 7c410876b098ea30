"""Shared fixtures: no test reaches a real AWS endpoint."""

from __future__ import annotations

import os

import pytest
from hypothesis import settings

# Property tests check what is parsed, never how fast: no per-example deadline, which a busy machine
# (CI runs beside other work) would otherwise turn into a failure.
settings.register_profile("untimed", deadline=None)
settings.load_profile("untimed")

FAKE_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SESSION_TOKEN": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
    "POWERTOOLS_TRACE_DISABLED": "true",
    "POWERTOOLS_METRICS_NAMESPACE": "LongJobsTest",
}


@pytest.fixture(autouse=True)
def _no_real_aws(monkeypatch: pytest.MonkeyPatch) -> None:
    for key, value in FAKE_ENV.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)


os.environ.update(FAKE_ENV)  # for modules that read settings at import time
