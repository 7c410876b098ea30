"""`needless_redeliveries` (longjobs/sim/properties.py): a message whose job succeeded is handed out again
only with a cause the trace shows, so their number is bounded by the faults. SQS keeps a message until it is
deleted with the handle of its newest receive ("Amazon SQS visibility timeout", Developer Guide:
https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/sqs-visibility-timeout.html), so
each needless receive follows a delete that did not take, a handling that never reached its delete, or SQS's
own second delivery. The campaign's side: the plant `keeps_done_message` (`tests/sim/test_planted.py`)."""

from __future__ import annotations

import pytest

from longjobs.sim.campaign import run_seed
from longjobs.sim.properties import Monitor, PropertyViolation

MESSAGE = "m-1"


def test_needless_redeliveries_refuses_a_receive_after_success_with_no_cause() -> None:
    watched = Monitor(limits={})
    with pytest.raises(PropertyViolation, match="needless_redeliveries") as raised:
        watched.needless.redelivered_after_success(MESSAGE, close_under_way=False, duplicate=False)
    assert "no delete of it tried" in raised.value.detail


def test_needless_redeliveries_allows_one_receive_per_delete_tried() -> None:
    watched = Monitor(limits={})
    watched.needless.may_show_again(MESSAGE)
    watched.needless.redelivered_after_success(MESSAGE, close_under_way=False, duplicate=False)
    watched.handled(MESSAGE)  # its handling decided: acknowledged, the mapping deletes it
    with pytest.raises(PropertyViolation, match="needless_redeliveries"):
        watched.needless.redelivered_after_success(MESSAGE, close_under_way=False, duplicate=False)


@pytest.mark.parametrize("how", ["died", "no-outcome"])
def test_needless_redeliveries_allows_the_receive_after_a_failed_handling(how: str) -> None:
    """A needless receive whose invocation died (the mapping deleted nothing), or whose handling raised
    before an outcome (a read failed), leaves the message to show again."""
    watched = Monitor(limits={})
    watched.needless.may_show_again(MESSAGE)
    watched.needless.redelivered_after_success(MESSAGE, close_under_way=False, duplicate=False)
    if how == "died":
        watched.handled(MESSAGE)
        watched.needless.handling_died([MESSAGE])
    watched.needless.redelivered_after_success(MESSAGE, close_under_way=False, duplicate=False)
    assert watched.coverage[f"needless_redelivery:{'handling_died' if how == 'died' else 'unhandled'}"] == 1


def test_needless_redeliveries_allows_the_receive_after_another_record_of_the_message_failed() -> None:
    """Two records of one message in one batch (SQS handed it out twice): one decides its job already
    succeeded, the other fails. A partial batch response names a failed record by its message id
    (`itemIdentifier`, "Using Lambda with Amazon SQS", Lambda Developer Guide:
    https://docs.aws.amazon.com/lambda/latest/dg/services-sqs-errorhandling.html), so the event source
    mapping deletes neither, and the message shows again."""
    watched = Monitor(limits={})
    watched.needless.may_show_again(MESSAGE)  # its workflow's delete did not take
    watched.needless.redelivered_after_success(MESSAGE, close_under_way=False, duplicate=False)
    watched.needless.redelivered_after_success(MESSAGE, close_under_way=False, duplicate=True)
    watched.handled(MESSAGE)  # one record: already succeeded, acknowledged
    watched.needless.records_failed({MESSAGE, "m-other"})  # the other record failed
    watched.needless.redelivered_after_success(MESSAGE, close_under_way=False, duplicate=False)
    assert watched.coverage["needless_redelivery:record_failed"] == 1
    watched.handled(MESSAGE)  # this one acknowledged, alone in its batch: the excuse is spent
    with pytest.raises(PropertyViolation, match="needless_redeliveries"):
        watched.needless.redelivered_after_success(MESSAGE, close_under_way=False, duplicate=False)


def test_needless_redeliveries_a_failed_record_left_unhandled_is_excused_once() -> None:
    """A single record that failed before an outcome is explained by its handling reaching none; its failure
    in the batch response excuses nothing more."""
    watched = Monitor(limits={})
    watched.needless.may_show_again(MESSAGE)
    watched.needless.redelivered_after_success(MESSAGE, close_under_way=False, duplicate=False)
    watched.needless.records_failed({MESSAGE})
    watched.needless.redelivered_after_success(MESSAGE, close_under_way=False, duplicate=False)  # unhandled
    watched.handled(MESSAGE)
    with pytest.raises(PropertyViolation, match="needless_redeliveries"):
        watched.needless.redelivered_after_success(MESSAGE, close_under_way=False, duplicate=False)


@pytest.mark.parametrize("cause", ["close_under_way", "duplicate"])
def test_needless_redeliveries_allows_a_close_under_way_and_a_duplicate(cause: str) -> None:
    watched = Monitor(limits={})
    watched.needless.redelivered_after_success(
        MESSAGE, close_under_way=cause == "close_under_way", duplicate=cause == "duplicate"
    )
    assert watched.coverage[f"needless_redelivery:{cause}"] == 1


def test_needless_redeliveries_a_close_that_could_not_read_its_lease_leaves_its_message() -> None:
    """Seed 113: the success close's mark landed unanswered, its retry was refused, and every read of the
    lease failed; the workflow frees the job lock and leaves the message to the receiver, which deletes it
    as already succeeded. The campaign judges that receive explained."""
    result = run_seed(113)
    assert result.violation is None
    assert result.coverage["needless_redelivery:delete_tried"] >= 1
    assert result.coverage["workflow:catch:ReadLease->ReleaseJobLock"] >= 1
