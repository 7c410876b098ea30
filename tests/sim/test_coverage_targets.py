"""The campaign's coverage targets per profile (`longjobs.sim.coverage`): a profile is held to what its seeds
can reach."""

from __future__ import annotations

from collections import Counter

from longjobs.sim.campaign import deployed_workflow
from longjobs.sim.coverage import targets


def test_coverage_fifo_targets_leave_out_same_batch_duplicates_and_slots() -> None:
    """A FIFO queue's mapping hands one record a batch, and a FIFO processor has no admission, so no slot is
    taken or freed; the mixed profile, whose seeds use both kinds of queue, keeps every target."""
    definition = deployed_workflow().definition
    fifo, mixed = targets(Counter(), definition, "fifo"), targets(Counter(), definition, "mixed")
    left_out = set(mixed) - set(fifo)
    assert "duplicate_delivery_same_batch" in left_out
    assert {name for name in mixed if name.startswith("workflow:catch:") and "Slot" in name} <= left_out
    assert not set(fifo) - set(mixed)
    assert "duplicate_delivery_late" in fifo and "workflow:catch:RunSparkJob->JobTimedOut" in fifo
