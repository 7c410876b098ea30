"""What a batch of deliveries reads at once: each long job's lease and job lock, in one BatchGetItem.

A receive reads its message's lease and its job lock first (`Receiver.store.get_with_lock`): one request
per message. A batch (the event source mapping's, up to 10 records; an unparking's receive, up to 10
copies) reads them all ahead in one request, and each message's first read takes its own from there
(`first_read`).

A read ahead is older, by the time a later message of the batch is handled, than a read made then, so
a receive takes it only when it found nothing held: no lease, and the job lock absent or free (a first
arrival, an unparked copy: the backlog's receives), and not for messages of a job id that another
message of the batch has too (the first takes the lock the others would read free). What the receiver
does on that is a conditional write (the holds' transaction, a WAITING lease, a parked marker, a copy's
claim), which fails when it meets a newer lease, and the receive reads again from DynamoDB; or it rests
on the delivery alone (its carried history). The WAITING lease and the marker are conditional on the
lease, not the lock: a message whose job id another receive took meanwhile joins its type's line rather
than wait for its job id, and admission in place, finding the lock held, leaves it waiting (nothing is
taken or run twice). A lease or a held lock read ahead is read again: what they lead to may send before
it writes (a copy of a marker not known to be sent, a wait for a job id whose holder has since freed it,
a DLQ copy), and a stale one would send what a fresh one would not (a lock freed after the read ahead
would send a needless copy to wait).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from longjobs.engine.delivery.models import BadInput, parse_delivery
from longjobs.engine.delivery.types import Delivery, Receiver
from longjobs.engine.lease import Lease, Lock, job_lock_key
from longjobs.engine.observability import logger


def read_ahead(receiver: Receiver, deliveries: Sequence[Delivery]) -> None:
    """Read the leases and job locks of the long jobs among `deliveries` in one request, for their
    receives to take. A batch of one reads nothing ahead (its receive's own read costs the same); a read
    that fails leaves each receive to read for itself."""
    if len(deliveries) < 2:
        return
    locks: dict[str, str] = {}
    for delivery in deliveries:
        job_id = _long_job_id(receiver, delivery)
        if job_id is not None:
            locks[delivery.message_id] = job_lock_key(job_id)
    # Messages of one job id in one batch: the first takes the lock the others read free ahead; they read it.
    shared = {key for key, count in Counter(locks.values()).items() if count > 1}
    locks = {message_id: key for message_id, key in locks.items() if key not in shared}
    if len(locks) < 2:
        return
    try:
        found = receiver.store.get_many_with_locks(locks)
    except Exception as exc:
        logger.warning("could not read the batch's leases ahead; each is read on its own", extra={"error": str(exc)})
        return
    for message_id, (lease, lock) in found.items():
        if lease is None and (lock is None or not lock.held):  # else read again by the receive (see above)
            receiver.state.read_ahead[message_id] = (locks[message_id], lock)


def first_read(receiver: Receiver, message_id: str, lock_key: str) -> tuple[Lease | None, Lock | None]:
    """A receive's first read of its lease and job lock. It takes what its batch read ahead for it (no
    lease, that lock) once; else both are read now, in one request (`LeaseStore.get_with_lock`)."""
    found = receiver.state.read_ahead.pop(message_id, None)
    if found is not None and found[0] == lock_key:
        return None, found[1]
    return receiver.store.get_with_lock(message_id, lock_key)


def forget_read_ahead(receiver: Receiver, deliveries: Sequence[Delivery]) -> None:
    """Drop what was read ahead for `deliveries` and not taken (a receive that failed before its read): a
    later receive of the same message must not take a read that old."""
    for delivery in deliveries:
        receiver.state.read_ahead.pop(delivery.message_id, None)


def _long_job_id(receiver: Receiver, delivery: Delivery) -> str | None:
    """The job id of a delivery that asks for one long job (not a notification fanned out, an inline job or
    bad input)."""
    try:
        parsed = parse_delivery(delivery, receiver.settings, receiver.catalog)
    except BadInput:
        return None
    return parsed.jobs[0].job_id if len(parsed.jobs) == 1 and not (parsed.inline or parsed.fans_out) else None
