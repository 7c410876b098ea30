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


def _validate_each_definition_once() -> None:
    """moto validates a state machine's definition on every CreateStateMachine by parsing it with its ANTLR
    grammar (half a second for the rendered workflow), and the tests on moto create the same few
    definitions hundreds of times. A definition moto accepted once it accepts again, so each is validated
    once per process; one it refuses is refused every time, as before. Executions still parse their own."""
    from moto.stepfunctions.parser.models import StepFunctionsParserBackend

    validate = StepFunctionsParserBackend._validate_definition
    accepted: set[str] = set()

    def validate_once(definition: str) -> None:
        if definition not in accepted:
            validate(definition=definition)
            accepted.add(definition)

    StepFunctionsParserBackend._validate_definition = staticmethod(validate_once)  # type: ignore[method-assign]


_validate_each_definition_once()


@pytest.fixture
def process_exits(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The statuses the process would have exited with. The exit guard's delegate and `os._exit` itself are
    both replaced (the guard puts its wrapper over the latter, which calls the former), so an exit the guard
    lets through fails the test rather than ending pytest, with status 0 for `os._exit(0)`."""
    from longjobs.pipeline import glue_entry
    from tests import ProcessExited

    exits: list[int] = []

    def record(status: int) -> None:
        exits.append(status)
        raise ProcessExited(status)

    monkeypatch.setattr(glue_entry, "_os_exit", record)
    monkeypatch.setattr(os, "_exit", record)
    return exits
