"""Output: rich tables and live views for people, JSON for machines; both from the same data."""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass, fields, is_dataclass
from datetime import UTC, datetime
from enum import Enum
from typing import Any

from rich import box
from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

from longjobs.cli.dlq import DeadLetter, RedriveResult
from longjobs.cli.leases import Execution, LeaseStory
from longjobs.cli.status import Status
from longjobs.cli.submit import Submitted
from longjobs.cli.top import Frame
from longjobs.engine.cancel import RECORD_KEY as CANCEL_RECORD_KEY
from longjobs.engine.cancel import CancelRecord, CancelReport
from longjobs.engine.cancel import Outcome as CancelOutcome
from longjobs.engine.lease import Lease, LeaseStatus
from longjobs.engine.lease.codec import TIME_FIELDS
from longjobs.engine.lease.types import COPIED_STATUSES, DONE_STATUSES

ERROR_WIDTH = 60
NOT_AVAILABLE = "n/a"


def console() -> Console:
    """A console on the current stdout (looked up at each write, so redirection and tests see it)."""
    return Console(highlight=False)


# -- values ------------------------------------------------------------------------------------


def iso(value: float | datetime | None) -> str | None:
    """An ISO 8601 UTC time with milliseconds, from epoch seconds or a datetime."""
    if value is None:
        return None
    moment = value if isinstance(value, datetime) else datetime.fromtimestamp(value, UTC)
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def duration(seconds: float) -> str:
    """A short human duration: 45s, 4m, 2h5m, 3d."""
    seconds = abs(seconds)
    if seconds < 60:
        return f"{seconds:.0f}s"
    if seconds < 3_600:
        return f"{seconds // 60:.0f}m"
    if seconds < 86_400:
        hours, rest = divmod(seconds, 3_600)
        return f"{hours:.0f}h{rest // 60:.0f}m" if rest >= 60 else f"{hours:.0f}h"
    return f"{seconds // 86_400:.0f}d"


def relative(moment: float | None, now: float) -> str:
    """`in 4m`, `3m ago` or `now` (within a second)."""
    if moment is None:
        return "-"
    delta = moment - now
    if abs(delta) < 1:
        return "now"
    return f"in {duration(delta)}" if delta > 0 else f"{duration(delta)} ago"


def shorten(text: str | None, width: int = ERROR_WIDTH) -> str:
    if not text:
        return "-"
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def _count(value: int | float | None) -> str:
    return NOT_AVAILABLE if value is None else f"{value:g}" if isinstance(value, float) else str(value)


# -- JSON --------------------------------------------------------------------------------------


def jsonable(value: Any) -> Any:
    """Plain JSON values of the command's data: dataclasses as objects, times as ISO 8601 strings."""
    if isinstance(value, Lease):
        return lease_json(value)
    if is_dataclass(value) and not isinstance(value, type):
        return {key: jsonable(getattr(value, key)) for key in asdict(value)}
    if isinstance(value, datetime):
        return iso(value)
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, dict):
        return {str(key): jsonable(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(item) for item in value]
    if isinstance(value, set | frozenset):
        return [jsonable(item) for item in sorted(value, key=str)]
    return value


def lease_json(lease: Lease) -> dict[str, Any]:
    data = {key: jsonable(getattr(lease, key)) for key in asdict(lease)}
    for key in TIME_FIELDS:
        data[key] = iso(getattr(lease, key))
    # the ended attempts' times too (epoch seconds in the record), as every other time the command prints
    data["history"] = [{**jsonable(attempt), "ended_at": iso(attempt.ended_at)} for attempt in lease.history]
    data["result"] = result_data(lease.result)
    return data


def result_data(result: dict[str, Any] | None) -> dict[str, Any] | None:
    """A lease's result as shown: a cancel's record (`longjobs.engine.cancel.RECORD_KEY`) keeps its times
    (`at`, and `sending_at` of its DLQ send's claim) as epoch seconds, shown as ISO 8601 UTC times like every
    other time the command prints."""
    if result is None:
        return None
    data: dict[str, Any] = jsonable(result)
    record = data.get(CANCEL_RECORD_KEY)
    if isinstance(record, dict):
        times = {
            name: iso(value)
            for name in CANCEL_TIMES
            if isinstance(value := record.get(name), int | float) and not isinstance(value, bool)
        }
        data[CANCEL_RECORD_KEY] = {**record, **times}
    return data


CANCEL_TIMES = ("at", "sending_at")


def status_text(lease: Lease) -> str:
    """A lease's status; a REJECTED (or DEAD_LETTERING) one with the reason it went to the DLQ (its last
    error's name: `AttemptsExhausted`, `NotJson`, ...), since the status alone does not tell poison from a
    job whose attempts ran out."""
    if lease.status in (LeaseStatus.REJECTED, LeaseStatus.DEAD_LETTERING) and lease.last_error is not None:
        reason = lease.last_error.error.partition(":")[0].strip()  # a poison record keeps `<type>: <why>` whole
        if reason:
            return f"{lease.status.value} ({reason})"
    return lease.status.value


def status_json(status: Status) -> dict[str, Any]:
    data: dict[str, Any] = jsonable(status)
    data["at"] = iso(status.at)
    for name in ("queue", "dlq"):
        data[name]["total"] = getattr(status, name).total
    return data


def dead_letter_json(letter: DeadLetter) -> dict[str, Any]:
    data: dict[str, Any] = jsonable(letter)
    data["sent_at"] = iso(letter.sent_at)
    return data


def print_json(data: Any) -> None:
    print(json.dumps(data, indent=2, sort_keys=False, ensure_ascii=False))


# -- tables ------------------------------------------------------------------------------------


def submitted_text(result: Submitted) -> str:
    return result.message_id


def status_view(status: Status, *, origin: str, live: bool = False) -> RenderableType:
    """The status as tables: queues, leases by status, the last hour. `live` (`status --watch`): the leases
    on one line, the statuses some lease has, so the view fits a 24-line terminal, whose live display cuts
    what does not fit."""
    header = Text(f"{origin}, {iso(status.at)}", style="bold")
    queues = Table(title="queues", title_justify="left")
    for column in ("queue", "visible", "in flight", "delayed", "total"):
        queues.add_column(column, justify="left" if column == "queue" else "right")
    for name, depth in (("jobs", status.queue), ("dead-letter", status.dlq)):
        queues.add_row(name, str(depth.visible), str(depth.in_flight), str(depth.delayed), str(depth.total))

    # One row a status: ten statuses side by side do not fit 80 columns, and a cut name reads as none.
    leases: RenderableType
    if live:  # one line: a table of ten statuses is 14 lines, and the last hour's would fall off the screen
        held = ", ".join(f"{name} {count}" for name, count in status.leases.items() if count)
        leases = Text(f"leases (table scan): {held or 'none'} (the statuses no lease has are left out)")
    else:
        leases = Table(title="leases (table scan)", title_justify="left")
        leases.add_column("status")
        leases.add_column("leases", justify="right")
        for name, count in status.leases.items():
            leases.add_row(name, str(count))

    hour = Table(title=f"last hour (from the {status.source})", title_justify="left")
    for column in ("oldest message", "renewals", "lapses", "leases lost"):
        hour.add_column(column, justify="right")
    oldest = NOT_AVAILABLE if status.oldest_message_age_s is None else duration(status.oldest_message_age_s)
    hour.add_row(
        oldest,
        _count(status.last_hour.renewals),
        _count(status.last_hour.lapses),
        _count(status.last_hour.leases_lost),
    )
    parts: list[RenderableType] = [header, queues, leases, hour]
    if status.waiting:
        waiting = Table(title="waiting for a slot, by job type (admission)", title_justify="left")
        for name in status.waiting:
            waiting.add_column(name, justify="right")
        waiting.add_row(*(str(count) for count in status.waiting.values()))
        parts.append(waiting)
    if status.drain_s:
        drain = Table(
            title="backlog drain time, by job type (until its waiting and parked messages start; queues keep 14 d)",
            title_justify="left",
        )
        for name in status.drain_s:
            drain.add_column(name, justify="right")
        drain.add_row(*(duration(seconds) for seconds in status.drain_s.values()))
        parts.append(drain)
    parts.extend(Text(note, style="dim") for note in status.notes)
    return Group(*parts)


def _widest(ids: Iterable[str]) -> int:
    """An id column's width: its longest id whole (an id is copied into the next command, never cut)."""
    return max((len(value) for value in ids), default=0)


WRAPPING_MIN = 8
"""The width a column that may wrap needs at least (its text folds onto more lines below that)."""


def _plain(cell: object) -> str:
    return cell.plain if isinstance(cell, Text) else str(cell)


def needed_width(table: Table) -> int:
    """The width a table needs to draw every cell of its columns that must not wrap whole (ids, statuses,
    counts), with the wrapping ones at `WRAPPING_MIN`: borders and padding included."""
    total = 1  # the left edge
    for column in table.columns:
        widths = [len(_plain(column.header)), *(len(_plain(cell)) for cell in column._cells)]
        need = max(widths) if column.no_wrap else WRAPPING_MIN
        total += max(need, column.min_width or 0) + 3  # padding either side and a border
    return total


class Fitted:
    """A table that never cuts an id: drawn as it is where the terminal is wide enough for every column's
    narrowest form, else as one block of `column  value` lines per row (a narrow terminal: 80 columns), where
    an id stays whole on its line and can be copied into `longjobs lease`."""

    def __init__(self, table: Table) -> None:
        self.table = table

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        if needed_width(self.table) <= options.max_width:
            yield self.table
            return
        if self.table.title:
            yield Text(str(self.table.title))
        columns = self.table.columns
        rows = len(columns[0]._cells) if columns else 0
        for index in range(rows):
            block = Table(show_header=False, box=box.ROUNDED, padding=(0, 1))
            block.add_column("field", style="bold", no_wrap=True)
            block.add_column("value", overflow="fold")
            for column in columns:
                block.add_row(str(column.header), column._cells[index])
            yield block

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        return Measurement.get(console, options, self.table)


def leases_table(leases: list[Lease], *, now: float | None = None, limit: int | None = None) -> RenderableType:
    """The leases, newest first. A listing `limit` cut short says so in its title, as `dlq list` does."""
    now = time.time() if now is None else now
    title = f"{len(leases)} lease(s), newest first"
    if limit is not None and len(leases) >= limit:
        title = f"the newest {len(leases)} lease(s) (--limit {limit}; the table may hold more)"
    table = Table(title=title, title_justify="left")
    table.add_column("message id", no_wrap=True, min_width=_widest(lease.message_id for lease in leases))
    for column in ("status", "type", "recv", "renew", "visible"):
        table.add_column(column, no_wrap=True, justify="right" if column in ("recv", "renew") else "left")
    table.add_column("last error", ratio=1)  # the one column that wraps: the others keep their width
    for lease in leases:
        table.add_row(
            lease.message_id,
            lease.status.value,
            lease.job_type or "-",
            str(lease.receive_count),
            str(lease.renewal_count),
            "-" if (visible := _visible(lease)[0]) is None else relative(visible, now),
            shorten(str(lease.last_error) if lease.last_error else None),
        )
    return Fitted(table)


GONE_STATUSES = frozenset({*DONE_STATUSES, *COPIED_STATUSES})
"""Leases whose message left its queue: deleted, in the DLQ, or copied (the copy runs under its own id)."""


def _visible(lease: Lease) -> tuple[float | None, str]:
    """When the lease's message shows on its queue again (None: not known), and what that time is. A message
    gone from its queue never shows again under this lease; one whose cancel is not finished is kept hidden
    meanwhile. The workflow's release sets no `visible_until`: the message shows its release delay after
    the release (`workflow_closed_at`; a lease an older workflow released knows only its execution's end)."""
    if lease.status is LeaseStatus.CANCELLED and lease.renew_at is not None:
        return lease.visible_until, ""  # its cancel unfinished: the extender keeps it hidden until it is done
    if lease.status is LeaseStatus.DEAD_LETTERING:
        # Its DLQ send is claimed, not noted: the message stays on its queue until its receive has sent it
        # (a claim given up, its send failed, is sent by the next receive), so it may show again.
        return None, "on its way to the DLQ: deleted once sent"
    if lease.status in GONE_STATUSES:
        return None, "not on its queue"
    if lease.status is LeaseStatus.RELEASED and lease.closed_at is None:
        if lease.workflow_closed_at is not None:
            return lease.workflow_closed_at + lease.release_delay_s, "the release delay after the workflow's release"
        return None, f"{lease.release_delay_s}s after its execution's end: the workflow's release"
    return lease.visible_until, ""


def _visible_until(lease: Lease, now: float) -> str:
    moment, note = _visible(lease)
    if moment is None:
        return f"- ({note})"
    return f"{_when(moment, now)}, {note}" if note else _when(moment, now)


def _when(moment: float | None, now: float) -> str:
    return "-" if moment is None else f"{iso(moment)} ({relative(moment, now)})"


def _renew_until(lease: Lease, now: float) -> str:
    """The hard stop of renewal, while the extender renews the lease (it has a `renew at`). A closed
    record's `renew_until` only dates its TTL: a DLQ record's follows its message's retention, up to
    14 days ahead, and would read as a hold."""
    return _when(lease.renew_until, now) if lease.renew_at is not None else "- (not renewed)"


def _closed_at(story: LeaseStory, now: float) -> str:
    """When the lease was closed: by the processor's code (`closed_at`) or by its workflow
    (`workflow_closed_at`). A lease an older workflow closed has neither: it shows the end of the execution
    it names."""
    lease = story.lease
    if lease.closed_at is not None or lease.active or lease.waiting:
        return _when(lease.closed_at, now)
    if lease.workflow_closed_at is not None:
        return f"{_when(lease.workflow_closed_at, now)}, by its workflow"
    ended = next((e.stopped_at for e in story.executions if e.arn == lease.execution_arn and e.stopped_at), None)
    return "-" if ended is None else f"{_when(ended.timestamp(), now)}, its execution's end"


def _receive_named(claimant: str) -> str:
    """A DLQ send's claimant as a person reads it: the receive's draw and the end of its receipt handle
    (`Delivery.claimant`: the whole handle is hundreds of characters, and tells an operator nothing more)."""
    handle, _, draw = claimant.rpartition("#")
    if not handle or len(handle) <= 24:
        return claimant
    return f"a receive (handle ...{handle[-12:]}, #{draw})"


def lease_view(story: LeaseStory, *, now: float | None = None) -> RenderableType:
    now = time.time() if now is None else now
    lease = story.lease
    fields = Table(title=f"lease {lease.message_id}", title_justify="left", show_header=False)
    fields.add_column("field", style="bold")
    fields.add_column("value", overflow="fold")
    rows: list[tuple[str, str]] = [
        ("status", status_text(lease)),
        ("job type", lease.job_type or "-"),
        ("job id", lease.job_id or "-"),
        ("deliveries (receive count)", str(lease.receive_count)),
        ("received at", _when(lease.received_at, now)),
        ("visible until", _visible_until(lease, now)),
        ("renew at", _when(lease.renew_at, now)),
        ("renew until", _renew_until(lease, now)),
        ("renewals", str(lease.renewal_count)),
        ("last renewed", _when(lease.renewed_at, now)),
        ("closed at", _closed_at(story, now)),
        ("release delay", f"{lease.release_delay_s}s"),
        ("execution", lease.execution_arn or "-"),
        ("queue", lease.queue_url),
        ("version", str(lease.version)),
        ("last error", str(lease.last_error or "-")),
        ("result", "-" if lease.result is None else json.dumps(result_data(lease.result), sort_keys=True)),
    ]
    if lease.status in (LeaseStatus.REJECTED, LeaseStatus.DEAD_LETTERING) and lease.claimed_by:
        # The receiver claims its DLQ send on the record first and notes the copy after
        # (`longjobs.engine.delivery.dlq_claim`).
        sender = _receive_named(lease.claimed_by)
        if lease.status is LeaseStatus.DEAD_LETTERING and lease.claimed_at is None:
            sender = f"- ({sender} gave it up, its send failed: {NEXT_SENDER})"
        rows += [
            ("DLQ copy", lease.copy_id or "- (not noted yet: its send is claimed, or failed and given up)"),
            ("sent by", sender),
        ]
    elif lease.status in COPIED_STATUSES or lease.copy_id or lease.claimed_by:
        # A parked message runs from a copy in its type's waiting queue, a requeued one from a delayed copy
        # on its queue, under the copy's own message id (`longjobs lease <copy>` shows that attempt): the
        # marker names it.
        # A cancelled marker keeps its copy: its kind is the status the cancel found. No copy claims the run
        # of a cancelled marker: a receive of its copy is refused and dead-letters it.
        cancelled = CancelRecord.of(lease)
        was = cancelled.previous_status if cancelled is not None else lease.status.value
        kind = "requeued" if was == LeaseStatus.REQUEUED.value else "parked"
        unclaimed = "- (none: cancelled first)" if cancelled is not None else "- (no copy received yet)"
        rows += [
            (f"{kind} copy", lease.copy_id or "- (not noted yet)"),
            ("run by copy", lease.claimed_by or unclaimed),
        ]
    for name, value in rows:
        fields.add_row(name, value)
    return Group(fields, executions_table(story.executions, lease.receive_count, now=now))


def executions_table(executions: list[Execution], receives: int, *, now: float | None = None) -> RenderableType:
    """Each attempt's execution: name (`<message id>-<attempt>`), status, start, how long, error."""
    now = time.time() if now is None else now
    table = Table(title=f"executions ({len(executions)} of {receives} receive(s) started one)", title_justify="left")
    table.add_column("name", no_wrap=True, min_width=_widest(execution.name for execution in executions))
    for column in ("status", "started", "took", "cost"):
        table.add_column(column, no_wrap=True)
    table.add_column("error", ratio=1)
    for execution in executions:
        error = ": ".join(part for part in (execution.error, execution.cause) if part)
        took = "-"
        if execution.started_at is not None:
            end = execution.stopped_at.timestamp() if execution.stopped_at is not None else now
            took = duration(end - execution.started_at.timestamp())
            took = took if execution.stopped_at is not None else f"{took} so far"
        cost = NOT_AVAILABLE if execution.usage is None else usd(execution.usage.total_usd)
        if execution.usage is not None and not execution.usage.reported:
            cost = f"~{cost}"  # estimated from its time and capacity
        table.add_row(execution.name, execution.status, iso(execution.started_at) or "-", took, cost, shorten(error))
    return Fitted(table)


def dlq_table(letters: list[DeadLetter], *, title: str | None = None, limit: int | None = None) -> RenderableType:
    """The DLQ's messages. A listing that `limit` cut short does not know the queue's depth: its title
    says so."""
    if title is None and limit is not None and len(letters) >= limit:
        title = f"the first {len(letters)} message(s) of the dead-letter queue (--limit {limit}; it may hold more)"
    table = Table(title=title or f"{len(letters)} message(s) in the dead-letter queue", title_justify="left")
    table.add_column("message id", no_wrap=True, min_width=_widest(letter.message_id for letter in letters))
    table.add_column("error type", no_wrap=True)
    table.add_column("error message", ratio=1)
    table.add_column("recv", no_wrap=True, justify="right")
    originals = (letter.original_message_id or "-" for letter in letters)
    table.add_column("original message id", no_wrap=True, min_width=_widest(originals))
    for letter in letters:
        table.add_row(
            letter.message_id,
            letter.error_type or "-",
            shorten(letter.error_message),
            str(letter.receive_count),
            letter.original_message_id or "-",
        )
    return Fitted(table)


def print_redrive(result: RedriveResult, *, endpoint_url: str | None = None) -> None:
    """A redrive's outcome on stdout. A move task's line is not wrapped: its task handle (some 170
    characters) stays whole, and its follow-up command runs as printed, when copied."""
    console().print(redrive_view(result, endpoint_url=endpoint_url), soft_wrap=result.method == "move-task")


def redrive_view(result: RedriveResult, *, endpoint_url: str | None = None) -> RenderableType:
    """A redrive's outcome. `endpoint_url` is the local service's, named in a move task's follow-up command."""
    if result.method == "dry-run":
        stays = [f"{result.skipped} the filter does not select"] if result.skipped else []
        stays += (
            [f"{result.kept} poison, cancelled or ClaimUnknown (--include-poison moves them)"] if result.kept else []
        )
        left = f"; would stay: {', '.join(stays)}" if stays else ""
        twins = f"; {result.duplicates} twin(s) of a moving message would be deleted" if result.duplicates else ""
        table = dlq_table(result.messages, title=f"dry run: {len(result.messages)} message(s) would move{left}{twins}")
        return Group(table, *(Text(note) for note in result.notes)) if result.notes else table
    if result.method == "move-task":
        return Text(
            f"started SQS message move task {result.task_handle} "
            f"(about {result.approximate_messages} message(s)); follow it with "
            f"`aws{f' --endpoint-url {endpoint_url}' if endpoint_url else ''} sqs list-message-move-tasks "
            f"--source-arn {result.source_arn or '<DLQ ARN>'}`"
        )
    lines = [f"moved {result.moved} message(s) to the jobs queue"]
    if result.skipped:
        lines.append(f"{result.skipped} message(s) the filter did not select: left in the DLQ")
    if result.kept:
        lines.append(
            f"{result.kept} poison, cancelled or ClaimUnknown message(s) left in the DLQ: --include-poison moves them"
        )
    if result.failed:
        lines.append(
            f"{result.failed} message(s) whose send failed: left in the dead-letter queue (a send whose answer "
            "was lost may have landed: look for the job before a second redrive)"
        )
    if result.came_back:
        lines.append(f"{result.came_back} moved message(s) came back to the dead-letter queue: left there")
    if result.duplicates:
        lines.append(
            f"{result.duplicates} second DLQ copy(ies) of a moved message deleted: sent too, its job would run twice"
        )
    lines.extend([*result.notes, *result.errors])
    if result.stopped:
        lines.append("stopped early by the error below: the messages not moved stay in the dead-letter queue")
    return Text("\n".join(lines))


# -- top ---------------------------------------------------------------------------------------


def usd(value: float | None) -> str:
    """Dollars as the views show them: four decimals under a dollar (a job's orchestration is a fraction
    of a cent), two above."""
    if value is None:
        return NOT_AVAILABLE
    return f"${value:.4f}" if value < 1 else f"${value:,.2f}"


def top_view(frame: Frame, *, origin: str) -> RenderableType:
    """One frame of `top`: the queues, the rates and ages, and a line per job type."""
    status = frame.status
    header = Text(f"{origin}, {iso(status.at)}  (read-only; Ctrl-C to quit)", style="bold")
    queues = Table(title="queues", title_justify="left")
    for column in ("jobs visible", "jobs in flight", "jobs delayed", "DLQ depth"):
        queues.add_column(column, justify="right")
    queues.add_row(
        str(status.queue.visible), str(status.queue.in_flight), str(status.queue.delayed), str(status.dlq.total)
    )
    pace = Table(title="ages and rates", title_justify="left")
    for column in ("oldest message", "oldest open lease", "renewals/min", "leases lost (1 h)"):
        pace.add_column(column, justify="right")
    rate = NOT_AVAILABLE if frame.renewals_per_min is None else f"{frame.renewals_per_min:.1f}"
    pace.add_row(
        NOT_AVAILABLE if status.oldest_message_age_s is None else duration(status.oldest_message_age_s),
        NOT_AVAILABLE if frame.oldest_open_lease_s is None else duration(frame.oldest_open_lease_s),
        f"{rate} ({frame.renewal_rate_source})",
        _count(status.last_hour.leases_lost),
    )
    types = Table(title="job types", title_justify="left")
    types.add_column("type", no_wrap=True)
    for column in ("running", "cost so far", "slots held / limit", "waiting", "parked", "drain time"):
        types.add_column(column, justify="right", no_wrap=True)
    for line in frame.types:
        limit = str(line.limit) if line.limit is not None else (f"≥{line.slots_seen}?" if line.slots_seen else "-")
        types.add_row(
            line.job_type,
            str(line.running),
            usd(line.running_usd),
            f"{line.slots_held} / {limit}",
            str(line.waiting),
            str(line.parked),
            NOT_AVAILABLE if line.drain_s is None else duration(line.drain_s),
        )
    parts: list[RenderableType] = [header, queues, pace, Fitted(types)]
    idle = [] if frame.types else ["job types: none has a job running, waiting or parked, or a limit"]
    parts.extend(Text(note, style="dim") for note in [*idle, *status.notes, *frame.notes])
    return Group(*parts)


def top_json(frame: Frame) -> dict[str, Any]:
    data: dict[str, Any] = jsonable(frame)
    data["status"] = status_json(frame.status)
    return data


# -- cancel ------------------------------------------------------------------------------------


def cancel_plan(leases: list[Lease], *, ident: str, by_job: bool) -> RenderableType:
    """What a cancel is about to act on (shown before the confirmation)."""
    title = f"job {ident}: {len(leases)} message(s) to cancel" if by_job else f"message {ident}"
    table = Table(title=title, title_justify="left")
    table.add_column("message id", no_wrap=True, min_width=_widest(lease.message_id for lease in leases))
    for column in ("status", "type", "job id"):
        table.add_column(column, no_wrap=column != "job id", overflow="fold")
    table.add_column("execution", overflow="fold")
    for lease in leases:
        name = (lease.execution_arn or "-").rpartition(":")[2] or "-"
        table.add_row(lease.message_id, lease.status.value, lease.job_type or "-", lease.job_id or "-", name)
    return Fitted(table)


CANCEL_WORDS = {
    CancelOutcome.CANCELLED: "cancelled",
    CancelOutcome.COMPLETED: "cancel completed",
    CancelOutcome.ALREADY_CANCELLED: "already cancelled: nothing to do",
    CancelOutcome.ALREADY_SUCCEEDED: "already succeeded: nothing was cancelled",
    CancelOutcome.ALREADY_DEAD_LETTERED: "already sent to the dead-letter queue: nothing to do",
}
NEXT_SENDER = "the next receive of the message sends it, or the admission pass for a parked copy"
"""Who sends a message whose DLQ claim is given up or old: a receive of it, or, for a parked claimant whose
copy waits in a full type's waiting queue that no receive reads, the parked line's upkeep."""
SENDING_WORDS = "on its way to the dead-letter queue: nothing to do"
"""A DEAD_LETTERING message's cancel: its send is claimed, maybe failed, and the message is still on its
queue until it is sent (`longjobs lease` says by whom: `NEXT_SENDER`)."""


def _cancel_words(report: CancelReport) -> str:
    sending = report.previous_status == LeaseStatus.DEAD_LETTERING.value
    return (
        SENDING_WORDS
        if sending and report.outcome is CancelOutcome.ALREADY_DEAD_LETTERED
        else CANCEL_WORDS[report.outcome]
    )


@dataclass(frozen=True)
class CancelFailure:
    """A message of a job id whose cancel failed (the others are still tried): its lease as read, and why.
    Shaped as a `CancelReport`, with `outcome` `failed`, so `--json` prints one kind of object."""

    message_id: str
    previous_status: str
    job_type: str | None
    job_id: str | None
    error: str
    outcome: str = "failed"
    execution_stopped: str | None = None
    holds_released: bool = False
    dead_letter_id: str | None = None
    deleted: bool = False
    notes: tuple[str, ...] = ()


def cancel_json(reports: list[CancelReport | CancelFailure]) -> list[dict[str, Any]]:
    """Every message's report, each with the same keys in the same order; `error` is null but for a failed one."""
    keys = [*(field.name for field in fields(CancelReport)), "error"]
    return [{key: jsonable(getattr(report, key, None)) for key in keys} for report in reports]


def cancel_view(reports: list[CancelReport | CancelFailure]) -> RenderableType:
    """What each cancel did: the message, the outcome, the stopped execution, the DLQ copy, notes."""
    table = Table(title=f"{len(reports)} message(s)", title_justify="left")
    table.add_column("message id", no_wrap=True, min_width=_widest(report.message_id for report in reports))
    table.add_column("outcome", overflow="fold")
    table.add_column("was", no_wrap=True)
    table.add_column("execution stopped", overflow="fold")
    table.add_column("DLQ copy", no_wrap=True, min_width=_widest(report.dead_letter_id or "-" for report in reports))
    table.add_column("notes", ratio=1)
    for report in reports:
        outcome = f"failed: {report.error}" if isinstance(report, CancelFailure) else _cancel_words(report)
        table.add_row(
            report.message_id,
            outcome,
            report.previous_status,
            (report.execution_stopped or "-").rpartition(":")[2] or "-",
            report.dead_letter_id or "-",
            "; ".join(report.notes) or "-",
        )
    return Fitted(table)
