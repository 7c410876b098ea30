"""A batch of receives: the records one invocation of the receiver handles together (the event source
mapping's, up to 10). What they read first, they read ahead in one request
(`longjobs.engine.delivery.read_ahead`); the copies their parkings send, they send together at the
batch's end, ten to a request, and note on their markers in one transaction
(`longjobs.engine.delivery.copies.send_pending_copies`).

A parked record's copy is sent after the batch's other records were handled, and its record is
acknowledged only when it was sent: until then the record is as one whose receive died after its marker
was written, which its redelivery completes (it finds the marker without a copy, and sends it). An
invocation that dies before the end sends none of them; its records are all redelivered.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from longjobs.engine.delivery.copies import send_pending_copies
from longjobs.engine.delivery.models import BadInput, parse_delivery
from longjobs.engine.delivery.read_ahead import read_ahead
from longjobs.engine.delivery.types import Delivery, Receiver
from longjobs.engine.lease import Lease

ADMISSION_LANE = "admission"


def lane(receiver: Receiver, delivery: Delivery | None) -> str | None:
    """The lane of a batch's record when the batch's records are handled at once: every record with a
    job of a limited type shares `ADMISSION_LANE`, handled one after another in the batch's order, so
    each reads the line of waiting messages after the one before it joined (its place, the wait it
    estimates, whether it parks). Any other record is handled on its own (None)."""
    if delivery is None or receiver.settings.fifo:
        return None
    try:
        jobs = parse_delivery(delivery, receiver.settings, receiver.catalog).jobs
    except BadInput:
        return None
    return ADMISSION_LANE if any(receiver.catalog.limit(job.type) is not None for job in jobs) else None


@contextmanager
def receive_batch(receiver: Receiver, deliveries: Sequence[Delivery]) -> Iterator[set[str]]:
    """Handle `deliveries` (each with `longjobs.engine.receiver.service.receive`) inside this block. On
    leaving it the batch's parked copies are sent; the set it yields is then filled with the ids of the
    messages whose copy was not sent, whose records must be reported failed (not deleted). Nothing is
    sent when the block raises."""
    # What a batch reads once (a full type's slots, the leases read ahead) is read afresh by the next one,
    # so a slot freed since the last batch is seen.
    receiver.state.full_slots.clear()
    receiver.state.read_ahead.clear()
    read_ahead(receiver, deliveries)
    pending: list[tuple[str, Lease]] = []
    # A message already in another batch going on (a duplicate delivery) stays that batch's: its copy goes
    # with that batch's, whose death leaves its own record to come back and send it.
    records = [d.message_id for d in deliveries if d.message_id not in receiver.state.pending_copies]
    receiver.state.pending_copies.update(dict.fromkeys(records, pending))
    unsent: set[str] = set()
    try:
        yield unsent
    finally:
        for message_id in records:
            receiver.state.pending_copies.pop(message_id, None)
    unsent.update(send_pending_copies(receiver, pending))
