"""The extender-throughput benchmark (`benchmarks/extender_throughput.py`): a short pass runs end to end on
the factory's extender and renews every due lease."""

from __future__ import annotations

import json

import pytest

from benchmarks.extender_throughput import main


def test_extender_throughput_renews_every_due_lease_through_the_factorys_extender(
    capsys: pytest.CaptureFixture[str],
) -> None:
    main(["--leases", "300", "--repeat", "1", "--latency-ms", "0", "--json"])  # raises unless all were renewed
    report = json.loads(capsys.readouterr().out)
    calls = report["calls"]
    assert (calls["ChangeMessageVisibilityBatch"], calls["TransactWriteItems"]) == (30, 3), calls
    assert calls["Query"] >= 2 and report["within_pass_budget"]
