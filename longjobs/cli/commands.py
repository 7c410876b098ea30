"""The subcommands: each builds what it needs from the arguments, calls the logic, renders."""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from functools import cached_property
from pathlib import Path

from botocore.exceptions import BotoCoreError, ClientError
from rich.console import RenderableType
from rich.live import Live

from longjobs.cli import catalog, confirm, dlq, leases, render, resources, status, submit, top
from longjobs.cli.clients import ENDPOINT_VARIABLE, EXAMPLE_ENDPOINT, Clients, Connection, endpoint_problem
from longjobs.cli.errors import EXIT_FAILURE, EXIT_OK, CliError, UsageError, client_error_text
from longjobs.engine import cancel
from longjobs.engine.clock import SystemClock

WATCH_INTERVAL_S = 2.0
sleep: Callable[[float], None] = time.sleep
"""The pause between `status --watch` refreshes (tests replace it)."""
LONG_POLL_S = 1
"""On AWS, an empty short-poll page is confirmed by one long poll (SQS samples its servers)."""


def local_endpoint(args: argparse.Namespace) -> str | None:
    """The local service's endpoint the arguments name: `--endpoint-url`, else, without `--stack`, the AWS
    SDKs' and CLI's own variable (`AWS_ENDPOINT_URL`), as `aws` would reach it."""
    endpoint: str | None = getattr(args, "endpoint_url", None)
    if not getattr(args, "stack", None) and not endpoint:
        endpoint = os.environ.get(ENDPOINT_VARIABLE) or None
    return endpoint


def check_endpoint(args: argparse.Namespace) -> None:
    """Refuse a malformed endpoint before any client is made, where botocore would raise a bare ValueError.

    `--endpoint-url` is checked, else `AWS_ENDPOINT_URL`: botocore reads that variable with `--stack` too."""
    given: str | None = getattr(args, "endpoint_url", None)
    source, url = ("--endpoint-url", given) if given else (ENDPOINT_VARIABLE, os.environ.get(ENDPOINT_VARIABLE))
    problem = endpoint_problem(url) if url else None
    if problem is not None:
        raise UsageError(f"{source} {url!r} is not an endpoint URL: {problem}; give one like {EXAMPLE_ENDPOINT}")


class Context:
    """The arguments, the clients and the resources they point at (resolved on first use)."""

    def __init__(self, args: argparse.Namespace, clients: Clients | None = None) -> None:
        self.args = args
        stack = getattr(args, "stack", None)
        endpoint = local_endpoint(args)
        if stack and endpoint:
            raise UsageError("give --stack NAME or --endpoint-url URL, not both")
        if not stack and not endpoint:
            raise UsageError(
                "give --stack NAME (a deployed stack) or --endpoint-url URL (the local service; or set "
                f"{ENDPOINT_VARIABLE})"
            )
        check_endpoint(args)
        self.stack: str | None = stack
        self.connection = Connection(
            endpoint_url=endpoint, region=getattr(args, "region", None), profile=getattr(args, "profile", None)
        )
        self.clients = clients if clients is not None else Clients(self.connection)
        self.overrides = resources.Overrides(
            queue_url=getattr(args, "queue_url", None),
            dlq_url=getattr(args, "dlq_url", None),
            table_name=getattr(args, "table", None),
            state_machine_arn=getattr(args, "state_machine_arn", None),
        )

    @property
    def local(self) -> bool:
        return self.connection.local

    def job_catalog(self) -> catalog.Catalog | None:
        """The job types to validate with: `--jobs-file`, else what the stack or the local service
        publishes (None when it publishes none)."""
        path = getattr(self.args, "jobs_file", None)
        if path:
            return catalog.from_file(path)
        found = self.resources
        return catalog.published(self.clients.dynamodb, found.table_name, found.origin)

    @cached_property
    def resources(self) -> resources.Resources:
        if self.stack is not None:
            return resources.from_stack(self.clients.cloudformation, self.stack, self.overrides)
        return resources.local(self.clients.sqs, str(self.connection.endpoint_url), self.clients.region, self.overrides)

    @property
    def confirm_wait_s(self) -> int:
        return 0 if self.local else LONG_POLL_S


def _read_body(path: str) -> str:
    if path == "-":
        return sys.stdin.read()
    try:
        return Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read --body {path}: {getattr(exc, 'strerror', None) or exc}") from None


def run_submit(ctx: Context) -> int:
    args = ctx.args
    if args.body is not None:
        if args.type is not None or args.param or args.job_id is not None:
            raise UsageError("--body sends a whole message: give no TYPE, --param or --job-id with it")
        body = _read_body(args.body)
    else:
        if args.type is None:
            raise UsageError("give a job TYPE (with --param k=v ...) or --body FILE")
        params = submit.parse_params(args.param or [])
        body = submit.job_body(args.type, params, args.job_id or submit.new_job_id(args.type))
    job_types = ctx.job_catalog()  # a --jobs-file is read before any AWS call: a wrong one is the arguments'
    found = ctx.resources  # the stack's receiver fills in defaults from its buckets: validate with those
    if job_types is None:
        raise CliError(catalog.not_published(found.origin, found.table_name))
    checks = job_types.checks
    if getattr(args, "jobs_file", None):  # the types from a file; the deployment's settings still hold
        checks = catalog.published_checks(ctx.clients.dynamodb, found.table_name, found.origin)
    settings = submit.validation_settings(found.curated_uri, found.quarantine_uri, checks)
    result = submit.submit(
        ctx.clients.sqs,
        found.queue_url,
        body,
        settings,
        job_types,
        group_id=args.message_group_id,
        deduplication_id=args.message_deduplication_id,
    )
    if args.json:
        render.print_json(render.jsonable(result))
    else:
        print(render.submitted_text(result))
    return EXIT_OK


def _collect_status(ctx: Context) -> status.Status:
    found = ctx.resources
    return status.collect_status(
        sqs=ctx.clients.sqs,
        dynamodb=ctx.clients.dynamodb,
        cloudwatch=None if ctx.local else ctx.clients.cloudwatch,
        queue_url=found.queue_url,
        dlq_url=found.dlq_url,
        table_name=found.table_name,
        service=found.metrics_service,
    )


def watch(
    collect: Callable[[], RenderableType],
    *,
    interval_s: float = WATCH_INTERVAL_S,
    pause: Callable[[float], None] | None = None,
) -> int:
    """Refresh a live view in place every `interval_s` until Ctrl-C, which ends it cleanly (exit 0). Piped
    (`| tee`), where nothing can be redrawn in place, each view is printed in turn as it is taken: a live
    display would print only the last, once Ctrl-C ended it."""
    pause = pause or sleep
    out = render.console()
    try:
        if not out.is_terminal:
            while True:
                out.print(collect())
                out.print()
                pause(interval_s)
        with Live(collect(), console=out, auto_refresh=False) as live:
            while True:
                pause(interval_s)
                live.update(collect(), refresh=True)
    except KeyboardInterrupt:
        return EXIT_OK


def run_status(ctx: Context) -> int:
    args = ctx.args
    if args.watch and args.json:
        raise UsageError("--watch is a live table: it does not combine with --json")
    if args.watch:
        return watch(lambda: render.status_view(_collect_status(ctx), origin=ctx.resources.origin, live=True))
    snapshot = _collect_status(ctx)
    if args.json:
        render.print_json(render.status_json(snapshot))
    else:
        render.console().print(render.status_view(snapshot, origin=ctx.resources.origin))
    return EXIT_OK


def run_leases(ctx: Context) -> int:
    found = leases.list_leases(
        ctx.clients.dynamodb, ctx.resources.table_name, status=ctx.args.status, limit=ctx.args.limit
    )
    if ctx.args.json:
        render.print_json([render.lease_json(lease) for lease in found])
    else:
        render.console().print(render.leases_table(found, limit=ctx.args.limit))
    return EXIT_OK


def run_lease(ctx: Context) -> int:
    job_types = ctx.job_catalog()
    found = ctx.resources
    story = leases.lease_story(
        ctx.clients.dynamodb,
        ctx.clients.stepfunctions,
        found.table_name,
        found.state_machine_arn,
        ctx.args.message_id,
        job_types=job_types.types if job_types is not None else None,
    )
    if ctx.args.json:
        render.print_json(render.jsonable(story))
    else:
        render.console().print(render.lease_view(story))
    return EXIT_OK


def run_dlq_list(ctx: Context) -> int:
    letters = dlq.peek(ctx.clients.sqs, ctx.resources.dlq_url, limit=ctx.args.limit, confirm_wait_s=ctx.confirm_wait_s)
    if ctx.args.json:
        render.print_json([render.dead_letter_json(letter) for letter in letters])
    else:
        render.console().print(render.dlq_table(letters, limit=ctx.args.limit))
    return EXIT_OK


def run_dlq_redrive(ctx: Context) -> int:
    if not ctx.args.dry_run:
        confirm.require_terminal_or_yes("dlq redrive", assume_yes=ctx.args.yes)
    found = ctx.resources
    if not ctx.args.dry_run:
        confirm.confirm(
            f"move the selected messages of {found.dlq_url} back to {found.queue_url}?",
            action="dlq redrive",
            assume_yes=ctx.args.yes,
        )
    try:
        result = dlq.redrive(
            ctx.clients.sqs,
            found.dlq_url,
            found.queue_url,
            max_per_second=ctx.args.max_per_second,
            dry_run=ctx.args.dry_run,
            move_sqs=ctx.clients.sqs_single_attempt,
            confirm_wait_s=ctx.confirm_wait_s,
            select=dlq.RedriveFilter(
                error_types=frozenset(ctx.args.error_type),
                job_type=ctx.args.job_type,
                job_id=ctx.args.job_id,
                message_ids=frozenset(ctx.args.message_id),
                since=ctx.args.since,
                include_poison=ctx.args.include_poison,
            ),
        )
    except dlq.RedriveStopped as stopped:  # what the run did first, then the error that ended it (`main`)
        _print_redrive(ctx, stopped.result)
        raise stopped.error from None
    except dlq.RedriveInterrupted as interrupted:  # what the run did first, then `main`'s "interrupted" (130)
        _print_redrive(ctx, interrupted.result)
        raise
    _print_redrive(ctx, result)
    return EXIT_FAILURE if result.failed or result.errors else EXIT_OK


def _print_redrive(ctx: Context, result: dlq.RedriveResult) -> None:
    if ctx.args.json:
        data = render.jsonable(result)
        data["messages"] = [render.dead_letter_json(letter) for letter in result.messages]
        render.print_json(data)
    else:
        render.print_redrive(result, endpoint_url=ctx.connection.endpoint_url)


def _limits(job_types: catalog.Catalog | None) -> dict[str, int] | None:
    """Each limited type's max_concurrency, from the job types (`Context.job_catalog`); None when unknown."""
    if job_types is None:
        return None
    limited = job_types.types.limited()
    return {job_type.name: job_type.concurrency_limit for job_type in limited if job_type.concurrency_limit}


def run_top(ctx: Context) -> int:
    """`top`: one frame (`--once`, `--json`) or a live view until Ctrl-C. Read-only: it never receives."""
    args = ctx.args
    job_types = ctx.job_catalog()
    limits = _limits(job_types)
    found = ctx.resources
    last: list[top.Frame] = []

    def frame() -> top.Frame:
        made = top.collect_frame(
            sqs=ctx.clients.sqs,
            dynamodb=ctx.clients.dynamodb,
            cloudwatch=None if ctx.local else ctx.clients.cloudwatch,
            queue_url=found.queue_url,
            dlq_url=found.dlq_url,
            table_name=found.table_name,
            limits=limits,
            job_types=job_types.types if job_types is not None else None,
            previous=last[-1] if last else None,
            service=found.metrics_service,
        )
        last[:] = [made]
        return made

    if args.json:
        render.print_json(render.top_json(frame()))
        return EXIT_OK
    if args.once:
        render.console().print(render.top_view(frame(), origin=found.origin))
        return EXIT_OK
    return watch(lambda: render.top_view(frame(), origin=found.origin), interval_s=args.interval)


CANCEL_ERRORS = (cancel.UnknownId, cancel.CancelRaced, cancel.HoldsNotFreed)
"""What a cancel raises about the message itself (the engine's own errors: each names what to do)."""


def _failure_text(exc: Exception) -> str:
    if isinstance(exc, ClientError):
        return client_error_text(exc)
    return " ".join(str(exc).split()) or type(exc).__name__


def run_cancel(ctx: Context) -> int:
    """`cancel ID`: find the message (or every message of the job id), confirm, cancel each
    (`longjobs.engine.cancel`), report. By job id, a message whose cancel fails does not stop the others:
    every message's report is printed, each failure's error too. Exit 1 when any failed, or when one had
    already succeeded and none was cancelled."""
    args = ctx.args
    confirm.require_terminal_or_yes("cancel", assume_yes=args.yes)
    found = ctx.resources
    store = cancel.operator_store(ctx.clients.dynamodb, found.table_name)
    try:
        targets = cancel.find_targets(store, ctx.clients.dynamodb, found.table_name, args.ident)
    except cancel.UnknownId as exc:
        raise CliError(str(exc)) from None
    acting = targets.to_cancel
    reports: list[cancel.CancelReport | render.CancelFailure] = [
        cancel.report_finished(lease) for lease in targets.finished
    ]
    failures: list[render.CancelFailure] = []
    if acting:
        if not args.json:
            render.console().print(render.cancel_plan(acting, ident=args.ident, by_job=targets.by_job))
        what = f"{len(acting)} message(s) of job {args.ident}" if targets.by_job else f"message {args.ident}"
        confirm.confirm(f"cancel {what}: stop, dead-letter as Cancelled?", action="cancel", assume_yes=args.yes)
        canceller = cancel.Canceller(
            store=store,
            sqs=ctx.clients.sqs,
            stepfunctions=ctx.clients.stepfunctions,
            dlq_url=found.dlq_url,
            clock=SystemClock(),
        )
        for lease in acting:
            try:
                reports.append(cancel.cancel(canceller, lease.message_id, args.reason))
            except (*CANCEL_ERRORS, ClientError, BotoCoreError) as exc:
                if not targets.by_job:  # one message: its error is the command's
                    if isinstance(exc, CANCEL_ERRORS):
                        raise CliError(str(exc)) from None
                    raise
                failure = render.CancelFailure(
                    message_id=lease.message_id,
                    previous_status=lease.status.value,
                    job_type=lease.job_type,
                    job_id=lease.job_id,
                    error=_failure_text(exc),
                )
                failures.append(failure)
                reports.append(failure)
    if args.json:
        render.print_json(render.cancel_json(reports))
    else:
        render.console().print(render.cancel_view(reports))
    for failure in failures:
        print(f"longjobs: cancel of {failure.message_id} failed: {failure.error}", file=sys.stderr)
    stopped = {cancel.Outcome.CANCELLED, cancel.Outcome.COMPLETED, cancel.Outcome.ALREADY_CANCELLED}
    outcomes = [report.outcome for report in reports]
    nothing_cancelled = not any(outcome in stopped for outcome in outcomes)
    succeeded = cancel.Outcome.ALREADY_SUCCEEDED in outcomes
    if nothing_cancelled and succeeded and not failures:  # the exit code's reason, as every error has one
        what = f"job {args.ident}" if targets.by_job else f"message {args.ident}"
        print(f"longjobs: {what} already succeeded: nothing was cancelled", file=sys.stderr)
    return EXIT_FAILURE if failures or (nothing_cancelled and succeeded) else EXIT_OK
