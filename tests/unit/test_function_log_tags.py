"""Each function's log lines carry its own name when the functions share one process.

The offline runtime runs the receiver, the extender and the watcher in one process, on threads of their own,
and all three log through the one Powertools `Logger` of `longjobs.engine.observability`: the keys
`inject_lambda_context` appends (`function_name` and the rest of the invocation's context) are the
logger's, shared by every thread, so a line took the name of whichever function was invoked last. Here two
handlers decorated as the real ones are invoked at once on two threads; each line must name its own."""

from __future__ import annotations

import io
import json
import logging
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from longjobs.engine.observability import logger
from longjobs.offline.lambdas import LambdaContext


@pytest.fixture
def lines() -> Iterator[io.StringIO]:
    handler = logger.registered_handler
    assert isinstance(handler, logging.StreamHandler)
    sink = io.StringIO()
    stream = handler.setStream(sink)
    try:
        yield sink
    finally:
        handler.setStream(stream)


def test_concurrent_functions_tag_each_line_with_their_own_name(lines: io.StringIO) -> None:
    both_in, first_logged = threading.Barrier(2), threading.Event()

    @logger.inject_lambda_context
    def receiver(event: Any, context: Any) -> None:
        both_in.wait(5)  # the extender's invocation has appended its context meanwhile
        logger.info("receiver line")
        first_logged.set()

    @logger.inject_lambda_context
    def extender(event: Any, context: Any) -> None:
        both_in.wait(5)
        first_logged.wait(5)
        logger.info("extender line")

    threads = [
        threading.Thread(target=receiver, args=({}, LambdaContext(function_name="receiver", aws_request_id="r-1"))),
        threading.Thread(target=extender, args=({}, LambdaContext(function_name="extender", aws_request_id="e-1"))),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)

    logged = [json.loads(line) for line in lines.getvalue().splitlines()]
    tags = {entry["message"]: (entry["function_name"], entry["function_request_id"]) for entry in logged}
    assert tags == {"receiver line": ("receiver", "r-1"), "extender line": ("extender", "e-1")}


def test_function_log_a_line_after_the_invocation_keeps_no_thread_local_name(lines: io.StringIO) -> None:
    """One invocation after another on the same thread (the offline runtime's schedule): each its own."""

    @logger.inject_lambda_context
    def handler(event: Any, context: Any) -> None:
        logger.info("in", extra={"n": event["n"]})

    for n, name in enumerate(("watcher", "extender")):
        handler({"n": n}, LambdaContext(function_name=name))

    logged = [json.loads(line) for line in lines.getvalue().splitlines()]
    assert [entry["function_name"] for entry in logged] == ["watcher", "extender"]
    assert logger.thread_safe_get_current_keys() == {}, "the invocation's keys leave with it"
