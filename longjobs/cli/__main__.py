"""`longjobs`: the operator command. `main(argv) -> int` parses, runs one subcommand, maps errors.

Every error is one line on stderr, `longjobs: <cause>`, with exit code 2 for usage and 1 otherwise.
"""

from __future__ import annotations

import argparse
import difflib
import io
import os
import sys
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from importlib import metadata
from typing import NoReturn

from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    ConnectTimeoutError,
    EndpointConnectionError,
    NoCredentialsError,
    NoRegionError,
    PartialCredentialsError,
    ProfileNotFound,
    ReadTimeoutError,
)

from longjobs.cli import commands
from longjobs.cli.dlq import ERROR_TYPES, MAX_MOVE_RATE
from longjobs.cli.errors import EXIT_FAILURE, EXIT_USAGE, CliError, UsageError, client_error_text
from longjobs.cli.leases import STATUSES
from longjobs.cli.resources import START_LOCAL_SERVICE
from longjobs.engine.cancel import DEFAULT_REASON

PROG = "longjobs"
DISTRIBUTION = "sqs-long-jobs"
"""The distribution `--version` reports (pyproject.toml's `name`)."""
DEFAULT_LEASES_LIMIT = 50
JOBS_FILE_HELP = "the job types to use instead of those the stack or service publishes"


class Parser(argparse.ArgumentParser):
    """argparse, with its errors as one line (raised, so `main` prints them like every other error)."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{message} (see {self.prog} --help)")

    def parse_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> argparse.Namespace:
        """As argparse's, but an option no parser knows (a typo: `cancel ID --reasn`) points at the help of the
        subcommand it was given to, which lists that subcommand's options, not at the top-level help."""
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:
            words = [getattr(parsed, "command", None), getattr(parsed, "dlq_command", None)]
            prog = " ".join([self.prog, *(word for word in words if word)])
            raise UsageError(f"unrecognized arguments: {' '.join(extras)} (see {prog} --help)")
        return parsed


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive whole number, not {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive whole number, not {text!r}")
    return value


def _ident(text: str) -> str:
    """A message id or a job id as given: never blank, since DynamoDB refuses an empty key outright."""
    if not text.strip():
        raise argparse.ArgumentTypeError("expected an id, not an empty string")
    return text


def _move_rate(text: str) -> int:
    value = _positive(text)
    if value > MAX_MOVE_RATE:
        raise argparse.ArgumentTypeError(f"expected 1..{MAX_MOVE_RATE} (SQS's limit), not {text!r}")
    return value


def _error_type(text: str) -> str:
    """`--error-type`: one of the processor's DLQ reasons. A mistyped one would select nothing, and the
    redrive would end with exit 0 having moved nothing."""
    if text in ERROR_TYPES:
        return text
    lowered = {name.lower(): name for name in ERROR_TYPES}
    near = difflib.get_close_matches(text.lower(), lowered, n=1)
    hint = f"; did you mean {lowered[near[0]]}?" if near else ""
    raise argparse.ArgumentTypeError(
        f"{text!r} is no ErrorType of the processor's: one of {', '.join(sorted(ERROR_TYPES))}{hint}"
    )


def _since(text: str) -> float:
    """`--since`: an ISO 8601 time (UTC unless it says), or an age such as 30m, 2h or 1d."""
    units = {"m": 60, "h": 3_600, "d": 86_400}
    if text[:-1].isdigit() and text[-1:] in units:
        return time.time() - int(text[:-1]) * units[text[-1]]
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected an ISO 8601 time or an age like 30m, 2h, 1d, not {text!r}"
        ) from None
    return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).timestamp()


def _connection_options() -> Parser:
    """Where to connect and what to work on. Accepted before or after the subcommand (SUPPRESS keeps a
    subcommand's absent option from hiding one given before it)."""
    options = Parser(add_help=False)
    group = options.add_argument_group("where")
    group.add_argument("--stack", metavar="NAME", default=argparse.SUPPRESS, help="a deployed stack (its outputs)")
    group.add_argument(
        "--endpoint-url",
        metavar="URL",
        default=argparse.SUPPRESS,
        help="the local service (longjobs-offline serve), e.g. http://127.0.0.1:4566 (default: $AWS_ENDPOINT_URL)",
    )
    group.add_argument("--region", default=argparse.SUPPRESS, help="AWS region (default: as the AWS CLI finds it)")
    group.add_argument("--profile", default=argparse.SUPPRESS, help="AWS CLI profile for credentials and region")
    group.add_argument("--queue-url", default=argparse.SUPPRESS, help="use this jobs queue")
    group.add_argument("--dlq-url", default=argparse.SUPPRESS, help="use this dead-letter queue")
    group.add_argument("--table", default=argparse.SUPPRESS, help="use this lease table")
    group.add_argument("--state-machine-arn", default=argparse.SUPPRESS, help="use this state machine")
    return options


def _yes_option() -> Parser:
    options = Parser(add_help=False)
    options.add_argument(
        "--yes", "-y", action="store_true", help="do it without asking (needed where stdin is not a terminal)"
    )
    return options


def _interval(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds, not {text!r}") from None
    if not 0.5 <= value <= 3_600:
        raise argparse.ArgumentTypeError(f"expected 0.5 to 3600 seconds, not {text!r}")
    return value


def _json_option() -> Parser:
    options = Parser(add_help=False)
    options.add_argument("--json", action="store_true", help="print JSON instead of tables")
    return options


def installed_version() -> str:
    """The version of the installed distribution (pyproject.toml's), or a note when it is not installed."""
    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return "(not installed: run from a checkout without `pip install`)"


def build_parser() -> Parser:
    where = _connection_options()
    json_option = _json_option()
    common = [where, json_option]
    writes = [*common, _yes_option()]
    parser = Parser(
        prog=PROG,
        description="Operate the long-job processor: a deployed stack (--stack) or the local service (--endpoint-url).",
        parents=[where],
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {installed_version()}")
    commands_ = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    submit = commands_.add_parser(
        "submit",
        parents=common,
        help="validate a job as the receiver would, then send it; prints the message id",
        description="Send a job message: TYPE with --param k=v (values parsed as JSON when they parse), "
        "or a whole body with --body FILE ('-' for stdin). Nothing is sent when the receiver would reject it: "
        "it is checked against the job types the stack or the local service publishes.",
    )
    submit.add_argument("type", nargs="?", metavar="TYPE", help="job type, one the stack or service knows")
    submit.add_argument("--param", action="append", metavar="K=V", help="a job parameter (repeatable)")
    submit.add_argument("--body", metavar="FILE", help="send this JSON body as it is ('-': stdin)")
    submit.add_argument("--job-id", metavar="ID", type=_ident, help="the job id (default: <type>-<UTC time>-<hex>)")
    submit.add_argument(
        "--message-group-id", metavar="GROUP", help="FIFO queues: the message group (its jobs run in order)"
    )
    submit.add_argument(
        "--message-deduplication-id", metavar="ID", help="FIFO queues: the deduplication id (default: the body's)"
    )
    submit.add_argument("--jobs-file", metavar="FILE", help=JOBS_FILE_HELP)
    submit.set_defaults(run=commands.run_submit)

    status = commands_.add_parser(
        "status",
        parents=common,
        help="queue depths, leases by status (scans the lease table) and the last hour",
        description="Queue and DLQ depth, leases by status (a Scan of the whole lease table), the oldest "
        "message's age, and the last hour's renewals, lapses and lost leases (CloudWatch on a stack; "
        "derived from the table offline, where CloudWatch has no data).",
    )
    status.add_argument("--watch", action="store_true", help="refresh in place every 2 s until Ctrl-C")
    status.set_defaults(run=commands.run_status)

    leases = commands_.add_parser(
        "leases",
        parents=common,
        help="leases, newest first (scans the lease table)",
        description="Leases newest first. Sorting needs every item: a Scan of the whole lease table.",
    )
    leases.add_argument("--status", choices=STATUSES, metavar="STATUS", help=f"only this one: {', '.join(STATUSES)}")
    leases.add_argument("--limit", type=_positive, default=DEFAULT_LEASES_LIMIT, help="at most this many (default 50)")
    leases.set_defaults(run=commands.run_leases)

    lease = commands_.add_parser(
        "lease",
        parents=common,
        help="one lease's whole story: deliveries, executions, renewals, error, result",
    )
    lease.add_argument("message_id", metavar="ID", type=_ident, help="the message id")
    lease.add_argument("--jobs-file", metavar="FILE", help=JOBS_FILE_HELP)
    lease.set_defaults(run=commands.run_lease)

    dlq = commands_.add_parser("dlq", help="the dead-letter queue: list, redrive")
    dlq_commands = dlq.add_subparsers(dest="dlq_command", required=True, metavar="COMMAND")
    dlq_list = dlq_commands.add_parser(
        "list",
        parents=common,
        help="the DLQ's messages with ErrorType, ErrorMessage and receive count",
        description="Lists by receiving (SQS has no other way to look): each message's receive count goes "
        "up by one, and each page is hidden for a few seconds, then shown again at once.",
    )
    dlq_list.add_argument("--limit", type=_positive, help="at most this many")
    dlq_list.set_defaults(run=commands.run_dlq_list)
    redrive = dlq_commands.add_parser(
        "redrive",
        parents=writes,
        help="move the DLQ's messages back to the jobs queue",
        description="Starts SQS's message move task; where the endpoint has none (moto), copies each "
        "message to the jobs queue and deletes it from the DLQ only after its send succeeded.",
    )
    redrive.add_argument("--max-per-second", type=_move_rate, metavar="N", help="at most N messages a second (1..500)")
    redrive.add_argument("--dry-run", action="store_true", help="list what would move; move nothing")
    chosen = redrive.add_argument_group("which messages (all must hold; poison stays unless asked)")
    chosen.add_argument(
        "--error-type", action="append", default=[], type=_error_type, metavar="TYPE", help="its ErrorType (repeatable)"
    )
    chosen.add_argument("--type", dest="job_type", metavar="JOB_TYPE", help="the job's type")
    chosen.add_argument("--job-id", help="the job's id")
    chosen.add_argument("--message-id", action="append", default=[], metavar="ID", help="its or its original's id")
    chosen.add_argument(
        "--since", type=_since, metavar="WHEN", help="dead-lettered since: ISO 8601 time, or 30m, 2h, 1d ago"
    )
    chosen.add_argument(
        "--include-poison",
        action="store_true",
        help="also NotJson, InvalidShape, UnknownJobType, ... (they come back) and Cancelled",
    )
    redrive.set_defaults(run=commands.run_dlq_redrive)

    cancel = commands_.add_parser(
        "cancel",
        parents=writes,
        help="cancel a message, or every message of a job id: stop it, dead-letter it as Cancelled (asks first)",
        description="Marks the lease CANCELLED (a conditional write: a job that succeeded first is left alone), "
        "stops its execution, frees its job lock and admission slot, sends the message to the DLQ with "
        "ErrorType Cancelled and deletes it from its queue: it is never retried. ID is a message id; an id "
        "with no lease is taken as a job id, and every message of that job is cancelled.",
    )
    cancel.add_argument("ident", metavar="ID", type=_ident, help="a message id, or a job id (all of its messages)")
    cancel.add_argument("--reason", default=DEFAULT_REASON, metavar="TEXT", help="why (the DLQ's ErrorMessage)")
    cancel.set_defaults(run=commands.run_cancel)

    top = commands_.add_parser(
        "top",
        parents=common,
        help="a live, read-only view: queues, running per type against its limit, parked, rates, drain time",
        description="Redraws every --interval seconds until Ctrl-C; --once (or --json) draws one frame. "
        "Read-only: it never receives a message (GetQueueAttributes, one Scan of the lease table per frame, "
        "CloudWatch on a stack).",
    )
    top.add_argument("--once", action="store_true", help="draw one frame and exit")
    top.add_argument(
        "--interval",
        type=_interval,
        default=commands.WATCH_INTERVAL_S,
        metavar="S",
        help=f"seconds between refreshes, 0.5 to 3600 (default {commands.WATCH_INTERVAL_S:g})",
    )
    top.add_argument("--jobs-file", metavar="FILE", help=JOBS_FILE_HELP)
    top.set_defaults(run=commands.run_top)
    return parser


def describe(exc: BaseException, endpoint_url: str | None, table: str | None = None) -> str:
    """The one-line cause of a failure. `table`: the lease table `--table` names, which DynamoDB's
    "Requested resource not found" does not."""
    if isinstance(exc, CliError):
        return exc.message
    if isinstance(exc, NoCredentialsError | PartialCredentialsError):
        return (
            "no AWS credentials found: configure them as for the AWS CLI (aws configure, AWS_PROFILE) or pass --profile"
        )
    if isinstance(exc, NoRegionError):
        return "no AWS region: pass --region, or set AWS_REGION or a region in your AWS profile"
    if isinstance(exc, ProfileNotFound):
        return f"no AWS profile {exc.kwargs.get('profile')!r} in your AWS configuration"
    if isinstance(exc, EndpointConnectionError | ConnectTimeoutError):
        if endpoint_url is not None:
            return (
                f"cannot reach the local service at {endpoint_url}: is it running? "
                f"Start it with `{START_LOCAL_SERVICE}`"
            )
        return f"cannot reach {exc.kwargs.get('endpoint_url')}: check the network and the region"
    if isinstance(exc, ReadTimeoutError):
        return f"no answer in time from {exc.kwargs.get('endpoint_url')}"
    if isinstance(exc, ClientError):
        if table is not None and exc.response.get("Error", {}).get("Code") == "ResourceNotFoundException":
            return f"{client_error_text(exc)}: is there a lease table {table!r} (--table) in this region?"
        return client_error_text(exc)
    return " ".join(str(exc).split()) or type(exc).__name__


def _quiet_stdout() -> None:
    """Point stdout at /dev/null, so that the interpreter's last flush at exit meets no closed pipe. That
    flush would print a traceback of its own."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, io.UnsupportedOperation):  # stdout is no file (a test's capture)
        pass


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command; its exit code. Output to a pipe is buffered, and what is still buffered is flushed
    here: a reader that closed the pipe then ends the command quietly too, where the interpreter's own flush
    at exit would print "Exception ignored ... BrokenPipeError" and exit with code 120."""
    code = _command(argv)
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        _quiet_stdout()
        return EXIT_FAILURE
    return code


def _command(argv: Sequence[str] | None) -> int:
    args = None
    try:
        args = build_parser().parse_args(argv)
        run: Callable[[commands.Context], int] = args.run
        return run(commands.Context(args))
    except SystemExit as exc:  # --help
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader closed the pipe (`| head`): nothing more can reach it
        _quiet_stdout()
        return EXIT_FAILURE
    except (CliError, BotoCoreError, ClientError) as exc:
        endpoint_url = None if args is None else commands.local_endpoint(args)
        print(f"{PROG}: {describe(exc, endpoint_url, getattr(args, 'table', None))}", file=sys.stderr)
        return exc.code if isinstance(exc, CliError) else EXIT_FAILURE


if __name__ == "__main__":
    sys.exit(main())
