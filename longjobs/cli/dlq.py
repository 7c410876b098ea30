"""`dlq list` and `dlq redrive`: what is in the dead-letter queue, and moving it back to the jobs queue.

Listing receives every message (a receive is what SQS offers to look: it counts as one on each
message's `ApproximateReceiveCount`). Each page is held for `PEEK_HOLD_S` so the next page brings other
messages, and every message is made visible again at the end (an exact SQS endpoint such as moto would
otherwise return the same first ten every time). A listing or a copy slower than its hold (a large DLQ)
meets its first pages again: it holds later pages longer, twice the time it has taken (`growing_hold`), and
goes on, so it ends.

Redrive uses SQS's message move task where the endpoint has it. Where it does not (moto), it copies:
receive, send to the jobs queue, and delete from the DLQ only the messages whose send succeeded. A copy
leaves the receiver's failure attributes behind (`ErrorType`, `ErrorMessage`, `SourceQueue`, `ReceiveCount`,
`Attempts`: they describe a failure that a redrive means to retry, and the receiver adds fresh ones if it
fails again) and keeps every other message attribute. It keeps `OriginalMessageId`, which names the
message it is, as SQS's move task does.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from botocore.exceptions import BotoCoreError, ClientError

from longjobs.cli.errors import UsageError, call_error_text
from longjobs.engine.cancel import CANCELLED
from longjobs.engine.delivery.dlq import (
    CLAIM_UNKNOWN,
    EXHAUSTED,
    JOB_ID_BUSY,
    RETENTION_RUNNING_OUT,
    STARTS_REFUSED,
)
from longjobs.engine.delivery.models import ErrorType
from longjobs.engine.settings import is_fifo_url

if TYPE_CHECKING:
    from mypy_boto3_sqs import SQSClient

PEEK_HOLD_S = 10
"""How long `dlq list` keeps a page of messages hidden before showing them all again (at least)."""
MAX_HOLD_S = 43_200
"""SQS's longest `VisibilityTimeout`, 12 hours."""
REDRIVE_HOLD_S = 30
"""How long a copied page stays hidden in the DLQ: time to send and delete it."""
MAX_MOVE_RATE = 500
"""SQS's limit on `MaxNumberOfMessagesPerSecond` of a message move task."""

RECEIVER_ATTRIBUTES = frozenset(
    {"ErrorType", "ErrorMessage", "SourceQueue", "OriginalMessageId", "ReceiveCount", "Attempts"}
)
"""The attributes `longjobs/engine/delivery/dlq.py` puts on its DLQ copies."""
KEPT_ON_COPY = frozenset({"OriginalMessageId"})
"""The receiver's attribute a redrive's copy keeps: it names the message the copy is, not a failure. SQS's
move task keeps it too. So the copy is followed as that message (the local service's history and checker),
and a poison body that comes back is not taken for a message of its own, with the original lost."""

UNSUPPORTED_CODES = frozenset(
    {
        "UnsupportedOperation",
        "AWS.SimpleQueueService.UnsupportedOperation",
        "InvalidAction",
        "UnknownOperationException",
    }
)


@dataclass(frozen=True)
class DeadLetter:
    message_id: str
    error_type: str | None
    error_message: str | None
    receive_count: int
    original_message_id: str | None
    sent_at: float | None
    body: str


def _attribute(message: Any, name: str) -> str | None:
    value = message.get("MessageAttributes", {}).get(name)
    return None if value is None else value.get("StringValue")


def dead_letter(message: Any) -> DeadLetter:
    """A received DLQ message. Its receive count is the receiver's `ReceiveCount` attribute (the receives
    on the jobs queue) when it has one, else SQS's `ApproximateReceiveCount` (which counts DLQ receives too)."""
    system = message.get("Attributes", {})
    count = _attribute(message, "ReceiveCount") or system.get("ApproximateReceiveCount") or "0"
    sent = system.get("SentTimestamp")
    return DeadLetter(
        message_id=message["MessageId"],
        error_type=_attribute(message, "ErrorType"),
        error_message=_attribute(message, "ErrorMessage"),
        receive_count=int(count),
        original_message_id=_attribute(message, "OriginalMessageId"),
        sent_at=int(sent) / 1000 if sent else None,
        body=message.get("Body", ""),
    )


def growing_hold(hold_s: int, started: float, now: float) -> int:
    """A page's hold: `hold_s`, or twice the time the run has taken when longer (at most SQS's 12 h). A run
    that outlasts its first holds meets its pages again; held this long, each stays hidden to its end."""
    return min(MAX_HOLD_S, max(hold_s, math.ceil(2 * (now - started))))


def _receive(sqs: SQSClient, queue_url: str, *, count: int, hold_s: int, wait_s: int) -> list[Any]:
    response = sqs.receive_message(
        QueueUrl=queue_url,
        MaxNumberOfMessages=count,
        VisibilityTimeout=hold_s,
        WaitTimeSeconds=wait_s,
        MessageAttributeNames=["All"],
        MessageSystemAttributeNames=["All"],
    )
    return list(response.get("Messages", []))


def show_again(sqs: SQSClient, queue_url: str, handles: Iterable[str]) -> None:
    """Make held messages visible at once (best effort: a failure only means they show after the hold)."""
    pending = list(handles)
    for start in range(0, len(pending), 10):
        entries = [
            {"Id": str(i), "ReceiptHandle": handle, "VisibilityTimeout": 0}
            for i, handle in enumerate(pending[start : start + 10])
        ]
        try:
            sqs.change_message_visibility_batch(QueueUrl=queue_url, Entries=entries)  # type: ignore[arg-type]
        except (ClientError, BotoCoreError):
            continue


def peek(
    sqs: SQSClient,
    dlq_url: str,
    *,
    limit: int | None = None,
    hold_s: int = PEEK_HOLD_S,
    confirm_wait_s: int = 0,
    clock: Callable[[], float] = time.monotonic,
) -> list[DeadLetter]:
    """The DLQ's messages, page by page until a receive brings none (each one received is hidden); then
    all visible again.

    A message seen before comes back once its hold ran out: the listing outlasted it, so each later page is
    held twice as long as the listing has taken. One back before its hold ran out means the endpoint does
    not hide what it hands out: the listing stops there. `confirm_wait_s` > 0 long-polls once more before
    stopping (SQS's short poll samples some of its servers, so an empty page from AWS does not prove the
    queue is empty)."""
    if limit is not None and limit < 1:
        raise UsageError(f"--limit {limit}: expected a positive number")
    seen: dict[str, DeadLetter] = {}
    hidden_until: dict[str, float] = {}
    handles: list[str] = []
    started = clock()
    try:
        confirmed = confirm_wait_s == 0
        while limit is None or len(seen) < limit:
            before = clock()
            hold = growing_hold(hold_s, started, before)
            messages = _receive(sqs, dlq_url, count=10, hold_s=hold, wait_s=0)
            if not messages and not confirmed:
                messages = _receive(sqs, dlq_url, count=10, hold_s=hold, wait_s=confirm_wait_s)
                confirmed = True
            handles.extend(message["ReceiptHandle"] for message in messages)
            # Hidden from no earlier than before the receive; shown again no earlier than that plus its hold.
            # Judged by the time after this receive: a slow call is no endpoint that does not hide.
            after = clock()
            if not messages or any(after + 1 < hidden_until.get(message["MessageId"], 0) for message in messages):
                break
            for message in messages:
                hidden_until[message["MessageId"]] = before + hold
                if message["MessageId"] not in seen:
                    seen[message["MessageId"]] = dead_letter(message)
    finally:
        if hold_s:
            show_again(sqs, dlq_url, handles)
    letters = list(seen.values())
    return letters if limit is None else letters[:limit]


def queue_arn(sqs: SQSClient, queue_url: str) -> str:
    return sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]


def _unsupported(exc: ClientError) -> bool:
    """The endpoint does not implement the operation: an SQS-style code, or a bare 5xx page that carries
    no AWS error at all (moto's server answers an unimplemented action with one)."""
    code = str(exc.response.get("Error", {}).get("Code", ""))
    status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    return code in UNSUPPORTED_CODES or (status in (500, 501) and code == str(status))


SERVER_ERROR_CODES = frozenset({"InternalError", "InternalFailure", "ServiceUnavailable"})
"""The codes of SQS's answers that say it failed, not that it refused: the request may have taken effect."""


def _may_have_taken_effect(exc: ClientError) -> bool:
    """Whether a failed call's request may still have taken effect: its answer is a server error (a 5xx), not
    a refusal (a 4xx, such as a throttle or "a task is already running"). Without a status, by its code."""
    status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    if isinstance(status, int):
        return status >= 500
    return str(exc.response.get("Error", {}).get("Code", "")) in SERVER_ERROR_CODES


def start_move_task(sqs: SQSClient, source_arn: str, destination_arn: str, max_per_second: int | None) -> str | None:
    """Start SQS's message move task; its handle, or None where the endpoint does not implement it.

    A start that got no answer (a 5xx, a timeout, a dropped connection) may have started the task: the DLQ's
    newest task is read, and its handle returned when it runs to the jobs queue. Else the start's error is
    raised. A refusal (a 4xx) started nothing, so it is raised as it is: a task already running from the DLQ
    (SQS runs one per queue) is someone's earlier task, not one this start made."""
    kwargs: dict[str, Any] = {"SourceArn": source_arn, "DestinationArn": destination_arn}
    if max_per_second is not None:
        kwargs["MaxNumberOfMessagesPerSecond"] = max_per_second
    try:
        return sqs.start_message_move_task(**kwargs)["TaskHandle"]
    except NotImplementedError:  # moto in-process (`mock_aws`)
        return None
    except (ClientError, BotoCoreError) as exc:
        if isinstance(exc, ClientError) and _unsupported(exc):
            return None
        if isinstance(exc, ClientError) and not _may_have_taken_effect(exc):
            raise
        running = _running_task(sqs, source_arn, destination_arn)
        if running is None:
            raise
        return running


def _running_task(sqs: SQSClient, source_arn: str, destination_arn: str) -> str | None:
    """The handle of the source's newest task when it runs to `destination_arn`: a start that failed may
    have taken effect (its answer lost), and SQS runs one task per queue. None when none runs, or when it
    cannot be read."""
    try:
        tasks = sqs.list_message_move_tasks(SourceArn=source_arn, MaxResults=1).get("Results", [])
    except (ClientError, BotoCoreError, NotImplementedError):
        return None
    newest = tasks[0] if tasks else {}
    if newest.get("Status") == "RUNNING" and newest.get("DestinationArn") == destination_arn:
        return newest.get("TaskHandle")
    return None


POISON = frozenset(
    {
        ErrorType.TOO_LARGE,
        ErrorType.NOT_JSON,
        ErrorType.INVALID_SHAPE,
        ErrorType.UNKNOWN_JOB_TYPE,
        ErrorType.INVALID_PARAMETERS,
    }
)
"""DLQ reasons no retry can fix (the receiver's poison): `redrive` leaves them unless asked."""
KEPT_BY_DEFAULT = POISON | {CANCELLED, CLAIM_UNKNOWN}
"""What `redrive` leaves in the DLQ unless asked (`--include-poison`, or `--error-type` naming it): poison,
messages an operator cancelled (`longjobs cancel`: a decision that the job must not run), and copies whose
job may have run already (`ClaimUnknown`: an operator checks first)."""
ERROR_TYPES = KEPT_BY_DEFAULT | {EXHAUSTED, STARTS_REFUSED, JOB_ID_BUSY, RETENTION_RUNNING_OUT}
"""Every `ErrorType` the processor gives a DLQ copy: what `redrive --error-type` may name. A message SQS moved
itself (after the redrive's `maxReceiveCount`) has none: only a redrive without `--error-type` selects it."""


@dataclass(frozen=True)
class RedriveFilter:
    """Which dead letters a redrive moves: all of the given criteria must hold. Poison (it would come straight
    back) and cancelled messages are left in the DLQ unless `include_poison` or `error_types` names them."""

    error_types: frozenset[str] = frozenset()
    job_type: str | None = None
    job_id: str | None = None
    message_ids: frozenset[str] = frozenset()
    since: float | None = None  # epoch seconds: dead-lettered at or after
    include_poison: bool = False

    @property
    def everything(self) -> bool:
        """Whether it selects every message (then SQS's own move task can do the redrive)."""
        return self == RedriveFilter(include_poison=True)

    def keeps_by_default(self, letter: DeadLetter) -> bool:
        """Whether the letter stays only because it is kept by default: `--include-poison` would move it."""
        return not self.selects(letter) and replace(self, include_poison=True).selects(letter)

    def selects(self, letter: DeadLetter) -> bool:
        kept = letter.error_type in KEPT_BY_DEFAULT and letter.error_type not in self.error_types
        if kept and not self.include_poison:
            return False
        if self.error_types and letter.error_type not in self.error_types:
            return False
        if self.message_ids and not {letter.message_id, letter.original_message_id} & self.message_ids:
            return False
        if self.since is not None and (letter.sent_at is None or letter.sent_at < self.since):
            return False
        if self.job_type is None and self.job_id is None:
            return True
        job = _job_of(letter.body)
        return (self.job_type is None or job.get("type") == self.job_type) and (
            self.job_id is None or job.get("job_id") == self.job_id
        )


def _job_of(body: str) -> dict[str, Any]:
    try:
        data = json.loads(body)
    except (ValueError, RecursionError):  # a poison body: not JSON, or nested deeper than the reader goes
        return {}
    return data if isinstance(data, dict) else {}


@dataclass
class RedriveResult:
    method: str  # "move-task" | "copy" | "dry-run"
    moved: int | None = None  # None: a move task runs on in SQS
    failed: int = 0
    task_handle: str | None = None
    source_arn: str | None = None  # the DLQ's ARN, which the move task's follow-up names
    approximate_messages: int | None = None
    came_back: int = 0  # copied messages that were back in the DLQ before the run ended (left there)
    duplicates: int = 0  # second DLQ copies of a message moved this run: deleted, not sent (its job runs once)
    stopped: bool = False  # an AWS call failed for good before the DLQ was empty: the rest stays there
    skipped: int = 0  # messages the filter's criteria left in the DLQ
    kept: int = 0  # messages it would have selected but for being kept by default (--include-poison)
    errors: list[str] = field(default_factory=list)
    messages: list[DeadLetter] = field(default_factory=list)
    job_types: set[str] = field(default_factory=set)  # the job types of the messages read, when `--type` filters
    notes: list[str] = field(default_factory=list)  # what the operator should know of the filter (a likely typo)

    def read(self, letter: DeadLetter, select: RedriveFilter) -> None:
        """Count the letter's job type, when the filter selects by type."""
        if select.job_type is not None and isinstance(job_type := _job_of(letter.body).get("type"), str):
            self.job_types.add(job_type)


class RedriveStopped(Exception):
    """An AWS call that failed for good ended the copy early. `result` is what the run did: the messages it
    sent are deleted from the DLQ, and the rest are visible there again. `error` is the failure itself."""

    def __init__(self, result: RedriveResult, error: ClientError | BotoCoreError) -> None:
        super().__init__(str(error))
        self.result = result
        self.error = error


class RedriveInterrupted(KeyboardInterrupt):
    """Ctrl-C ended the copy early. `result` is what the run did, as with `RedriveStopped`: the messages it
    sent are deleted from the DLQ (their jobs run again), and the rest are visible there again."""

    def __init__(self, result: RedriveResult) -> None:
        super().__init__()
        self.result = result


def copy_messages(
    sqs: SQSClient,
    dlq_url: str,
    queue_url: str,
    *,
    max_per_second: float | None = None,
    hold_s: int = REDRIVE_HOLD_S,
    confirm_wait_s: int = 0,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    select: RedriveFilter = RedriveFilter(include_poison=True),
) -> RedriveResult:
    """Move the DLQ's messages that `select` selects by hand (the others stay, counted in `skipped`):
    receive, send each to the jobs queue, then delete from the DLQ only those whose send succeeded.
    Stops when a receive brings nothing. A message that fails its send (an AWS error, or no answer)
    stays in the DLQ, hidden until the run ends (so it is not retried within the run), then visible.
    A copy that comes back to the DLQ during the run (poison goes straight back) is not sent again: it
    is left there and counted in `came_back`. A second DLQ copy of a message moved in the run (the same
    `OriginalMessageId` and body: the receiver's send is at least once, as two handlings of one record
    may each send it) is deleted, not sent, and counted in `duplicates`: sent too, its job would run twice.
    So is one the filter left, seen before or after its twin was sent: it is the same message.

    Whatever ends the run, what was sent is deleted and the rest is shown again first. An AWS call
    that fails for good (a receive) raises `RedriveStopped`, and Ctrl-C `RedriveInterrupted`: each carries
    the run's result."""
    result = RedriveResult(method="copy", moved=0)
    page_size = 10 if max_per_second is None else max(1, min(10, int(max_per_second)))
    sent_ids: set[str] = set()
    skipped_ids: set[str] = set()
    sent_from: set[str] = set()  # DLQ message ids sent this run
    failed_from: set[str] = set()  # DLQ message ids whose send failed this run: it may have landed
    tried: dict[tuple[str, str], bool] = {}  # (original message id, body) -> whether its send succeeded
    passed_over: dict[str, tuple[str, str, str, str]] = {}  # message id -> (original, body, latest handle, counted as)
    held: list[str] = []  # handles of messages left in the DLQ: shown again once the run ends
    started = clock()
    attempted = 0
    confirmed = confirm_wait_s == 0
    try:
        while True:
            hold = growing_hold(hold_s, started, clock())
            messages = _receive(sqs, dlq_url, count=page_size, hold_s=hold, wait_s=0)
            if not messages and not confirmed:
                messages = _receive(sqs, dlq_url, count=page_size, hold_s=hold, wait_s=confirm_wait_s)
                confirmed = True
            if not messages:
                break
            deletions: list[tuple[str, str]] = []  # (message id, receipt handle) of sent messages only
            doubles: list[tuple[str, str]] = []  # the same, of duplicates of a message sent this run
            page_held: list[str] = []
            try:
                for message in messages:
                    if message["MessageId"] in sent_ids or _attribute(message, "OriginalMessageId") in sent_ids:
                        result.came_back += 1
                        page_held.append(message["ReceiptHandle"])
                        continue
                    if message["MessageId"] in sent_from | failed_from:  # reported: not sent twice in a run
                        page_held.append(message["ReceiptHandle"])
                        continue
                    original = _attribute(message, "OriginalMessageId")
                    twin = tried.get((original, message["Body"])) if original is not None else None
                    letter = dead_letter(message)
                    result.read(letter, select)
                    if twin is True:  # its twin was sent: selected or not, this one is deleted with the page's
                        doubles.append((message["MessageId"], message["ReceiptHandle"]))
                        if (left := passed_over.pop(message["MessageId"], None)) is not None:
                            setattr(result, left[3], getattr(result, left[3]) - 1)  # counted as left before
                        continue
                    if twin is False and select.selects(letter):  # its twin's send failed and may have landed
                        page_held.append(message["ReceiptHandle"])  # neither is sent again in the run
                        continue
                    if not select.selects(letter):
                        if message["MessageId"] not in skipped_ids:
                            skipped_ids.add(message["MessageId"])
                            counted = "kept" if select.keeps_by_default(letter) else "skipped"
                            setattr(result, counted, getattr(result, counted) + 1)
                            if original is not None:  # deleted at the run's end if a twin of it is sent
                                passed_over[message["MessageId"]] = (original, message["Body"], "", counted)
                        if message["MessageId"] in passed_over:  # SQS deletes only by the latest handle
                            passed_over[message["MessageId"]] = (
                                *passed_over[message["MessageId"]][:2],
                                message["ReceiptHandle"],
                                passed_over[message["MessageId"]][3],
                            )
                        page_held.append(message["ReceiptHandle"])
                        continue
                    if max_per_second is not None:  # the n-th send no earlier than n / rate after the start
                        wait = started + attempted / max_per_second - clock()
                        if wait > 0:
                            sleep(wait)
                    attempted += 1
                    try:
                        sent_id = _send_copy(sqs, queue_url, message)
                    except (ClientError, BotoCoreError) as exc:
                        result.failed += 1
                        result.errors.append(f"{message['MessageId']}: not sent: {call_error_text(exc)}")
                        failed_from.add(message["MessageId"])
                        page_held.append(message["ReceiptHandle"])
                        if original is not None:
                            tried.setdefault((original, message["Body"]), False)
                        continue
                    if original is not None:
                        tried[(original, message["Body"])] = True
                    sent_ids.add(sent_id)
                    deletions.append((message["MessageId"], message["ReceiptHandle"]))
            finally:  # also when the page was cut short: delete what was sent, show the rest again
                kept = _delete(sqs, dlq_url, deletions, result)
                result.moved = (result.moved or 0) + len(deletions) - len(kept)
                kept_doubles = _delete(sqs, dlq_url, doubles, result)
                result.duplicates += len(doubles) - len(kept_doubles)
                sent_from.update(message_id for message_id, _ in [*deletions, *doubles])
                settled = {*page_held, *(handle for _, handle in [*deletions, *doubles])}
                held.extend([*page_held, *kept, *kept_doubles])
                held.extend(m["ReceiptHandle"] for m in messages if m["ReceiptHandle"] not in settled)
    except (ClientError, BotoCoreError) as exc:
        result.stopped = True
        raise RedriveStopped(result, exc) from exc
    except KeyboardInterrupt:
        result.stopped = True
        raise RedriveInterrupted(result) from None
    finally:
        twins = [
            (message_id, handle, counted)
            for message_id, (original, body, handle, counted) in passed_over.items()
            if tried.get((original, body)) is True
        ]
        kept_twins = set(_delete(sqs, dlq_url, [(message_id, handle) for message_id, handle, _ in twins], result))
        for _, handle, counted in twins:
            if handle not in kept_twins:  # left by the filter, deleted as a twin of one sent
                setattr(result, counted, getattr(result, counted) - 1)
                result.duplicates += 1
        show_again(sqs, dlq_url, [h for h in held if h not in {handle for _, handle, _ in twins} - kept_twins])
    return result


def _send_copy(sqs: SQSClient, queue_url: str, message: Any) -> str:
    """Send a DLQ message's copy to the jobs queue, without the receiver's failure attributes; the copy's id."""
    attributes = {
        name: value
        for name, value in message.get("MessageAttributes", {}).items()
        if name not in RECEIVER_ATTRIBUTES - KEPT_ON_COPY
    }
    if is_fifo_url(queue_url):  # back into its group; a copy sent twice is deduplicated
        sent = sqs.send_message(
            QueueUrl=queue_url,
            MessageBody=message["Body"],
            MessageAttributes=attributes,
            MessageGroupId=message.get("Attributes", {}).get("MessageGroupId") or message["MessageId"],
            MessageDeduplicationId=message["MessageId"],
        )
    else:
        sent = sqs.send_message(QueueUrl=queue_url, MessageBody=message["Body"], MessageAttributes=attributes)
    return sent["MessageId"]


def _delete(sqs: SQSClient, dlq_url: str, sent: list[tuple[str, str]], result: RedriveResult) -> list[str]:
    """Delete sent messages from the DLQ; the handles of those not deleted. A failed delete (an entry's, or
    the whole request's) leaves a message in both queues, to be redriven again: reported, not hidden."""
    if not sent:
        return []
    entries = [{"Id": str(i), "ReceiptHandle": handle} for i, (_, handle) in enumerate(sent)]
    failures: list[tuple[str, str]] = []  # (entry id, why)
    try:
        response = sqs.delete_message_batch(QueueUrl=dlq_url, Entries=entries)  # type: ignore[arg-type]
    except (ClientError, BotoCoreError) as exc:
        failures = [(entry["Id"], call_error_text(exc)) for entry in entries]
    else:
        failures = [(f["Id"], f"{f.get('Code', '')}: {f.get('Message', '')}") for f in response.get("Failed", [])]
    kept = []
    for entry_id, why in failures:
        message_id, handle = sent[int(entry_id)]
        kept.append(handle)
        result.errors.append(f"{message_id}: sent, but not deleted from the DLQ: {why}")
    return kept


def preview(letters: list[DeadLetter], select: RedriveFilter) -> RedriveResult:
    """What a redrive would do with `letters`, its sends all landing. A copy run (`copy_messages`) moves the
    first of twins (the same `OriginalMessageId` and body) it selects and deletes every other twin of it
    (`duplicates`), selected or not. A redrive of everything may go by SQS's move task, which moves every
    copy: its preview lists them all."""
    result = RedriveResult(method="dry-run")
    moving: set[tuple[str, str]] = set()  # (original message id, body) of each message that moves
    listed: set[str] = set()  # the message ids of those

    def twins(letter: DeadLetter) -> tuple[str, str] | None:
        if letter.original_message_id is None or select.everything:  # SQS's move task moves every copy
            return None
        return (letter.original_message_id, letter.body)

    for letter in letters:
        result.read(letter, select)
        if select.selects(letter) and (twins(letter) is None or twins(letter) not in moving):
            result.messages.append(letter)
            listed.add(letter.message_id)
            if (key := twins(letter)) is not None:
                moving.add(key)
    for letter in letters:
        if letter.message_id in listed:
            continue
        if twins(letter) in moving:
            result.duplicates += 1
        elif select.keeps_by_default(letter):
            result.kept += 1
        else:
            result.skipped += 1
    return result


def redrive(
    sqs: SQSClient,
    dlq_url: str,
    queue_url: str,
    *,
    max_per_second: int | None = None,
    dry_run: bool = False,
    move_sqs: SQSClient | None = None,
    confirm_wait_s: int = 0,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    select: RedriveFilter = RedriveFilter(),
) -> RedriveResult:
    """Move the DLQ's messages that `select` selects back to the jobs queue: SQS's message move task when
    it selects everything (it cannot filter), else, or where the endpoint has no move task, a copy loop.

    `move_sqs` makes the `StartMessageMoveTask` call (a client that does not retry, so an endpoint
    without the operation is found out at once)."""
    if max_per_second is not None and not 1 <= max_per_second <= MAX_MOVE_RATE:
        raise UsageError(f"--max-per-second {max_per_second}: expected 1..{MAX_MOVE_RATE}")
    if dry_run:
        return _noted(preview(peek(sqs, dlq_url, confirm_wait_s=confirm_wait_s), select), select)
    source, destination = queue_arn(sqs, dlq_url), queue_arn(sqs, queue_url)
    if select.everything:
        # Read before the start: the task moves what is visible then, and a fast one (the offline
        # runtime's) has already emptied the DLQ by the time a later read arrives.
        depth = sqs.get_queue_attributes(QueueUrl=dlq_url, AttributeNames=["ApproximateNumberOfMessages"])
        handle = start_move_task(move_sqs or sqs, source, destination, max_per_second)
        if handle is not None:
            return RedriveResult(
                method="move-task",
                task_handle=handle,
                source_arn=source,
                approximate_messages=int(depth["Attributes"].get("ApproximateNumberOfMessages", 0)),
            )
    copied = copy_messages(
        sqs,
        dlq_url,
        queue_url,
        max_per_second=max_per_second,
        confirm_wait_s=confirm_wait_s,
        clock=clock,
        sleep=sleep,
        select=select,
    )
    return _noted(copied, select)


def _noted(result: RedriveResult, select: RedriveFilter) -> RedriveResult:
    """A `--type` that no message read has is most likely mistyped: the result says so, naming the types
    the DLQ's messages have. It selected nothing, which is no error (the exit status stays 0)."""
    if select.job_type is not None and select.job_type not in result.job_types:
        there = ", ".join(sorted(result.job_types)) or "none (no message read is a job with a type)"
        result.notes.append(f"no message in the DLQ has type {select.job_type!r}; the types there: {there}")
    return result
