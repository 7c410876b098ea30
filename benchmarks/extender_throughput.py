"""Extender throughput: how many due leases one `renew_due` pass renews per second, and at what CPU cost.

What runs is the extender's real code path, built by `longjobs.engine.factory` as the handler builds it:
`renew_due` on an `Extender` made of a real `LeaseStore`, `VisibilityClient` and
`build_policy(Settings())`, with one `ThreadPoolExecutor(max_workers=settings.max_workers)` shared by
the store and the visibility client, and `SystemClock`. The AWS clients are real boto3 clients
(`longjobs.engine.aws.CLIENT_CONFIG`), so parameter validation, serialization, SigV4 signing, retry
bookkeeping and response parsing all cost what they cost in Lambda.

Only the network is replaced: a botocore `before-send` handler answers every request in-process after
a fixed latency (`time.sleep`, which releases the GIL, so parallel calls overlap like real network
waits), with a body in the service's JSON 1.0 wire format:

- DynamoDB `Query` on the due-index returns real lease items (`lease_to_item`) of the asked shard with
  `renew_at <= :before`, soonest first, paginated with `LastEvaluatedKey` like DynamoDB (at most 1 MB
  a page; pages are also cut at `PAGE_ITEMS` items, so a shard takes several round trips).
- DynamoDB `TransactWriteItems` (100 conditional renewal records a call) and `UpdateItem` answer `{}`.
- SQS `ChangeMessageVisibilityBatch` answers every entry `Id` of the request as `Successful`.

Each pass gets a fresh set of leases, all due (`renew_at <= now`, well inside their hard stop and not
lapsed), spread over the shards by `LeaseStore.shard_of`. One small untimed pass first warms the
container (botocore loads operation models lazily, the pool starts its threads), as a warm Lambda is.
Per pass: wall time, leases renewed per second, CPU microseconds per lease (`time.process_time`, all
threads, the fake's own share shown apart) and calls per operation. The benchmark asserts that every
lease was renewed, so the numbers measure real work. It also holds the slowest pass against the
adaptive policy's pass budget (`pass_budget_s`, 15 s on the 1-minute schedule): the time a pass has,
after the worst gap between runs the policy survives, before any lease it renews would lapse.

Run from the repository root: `python -m benchmarks.extender_throughput [--leases N] [--latency-ms MS]
[--repeat R] [--json]`.
"""

from __future__ import annotations

import argparse
import base64
import bisect
import json
import os
import random
import re
import statistics
import threading
import time
import uuid
import zlib
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from decimal import Decimal
from io import BytesIO
from typing import TYPE_CHECKING, Any, cast

import boto3
from botocore.awsrequest import AWSPreparedRequest, AWSResponse
from botocore.compat import HTTPHeaders

from longjobs.engine.aws import CLIENT_CONFIG
from longjobs.engine.clock import SystemClock
from longjobs.engine.extender.service import renew_due
from longjobs.engine.factory import Clients, Factory
from longjobs.engine.lease import Lease
from longjobs.engine.lease.codec import lease_to_item
from longjobs.engine.lease.schema import PARTITION_KEY, RENEW_AT_ATTR, SHARD_ATTR
from longjobs.engine.policies import RenewalPolicy
from longjobs.engine.policies.adaptive import lead_s as adaptive_lead_s
from longjobs.engine.settings import Settings

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_sqs import SQSClient

GOAL_LEASES_PER_S = 1_000
TABLE = "leases"
QUEUE_URL = "https://sqs.us-east-1.amazonaws.com/123456789012/jobs"
PAGE_BYTES = 1_048_576  # DynamoDB stops a Query page at 1 MB of items
PAGE_ITEMS = 250  # and this fake stops it earlier too: more round trips than DynamoDB needs, never fewer
WARMUP_LEASES = 200
RECEIPT_HANDLE_BYTES = 240  # base64: 320 characters, the size of real SQS receipt handles

JSON_CONTENT_TYPE = "application/x-amz-json-1.0"
EMPTY_BODY = b"{}"


class _RawBody(BytesIO):
    """The `raw` of an `AWSResponse`: botocore reads the body through `stream()`."""

    def stream(self, **_: Any) -> Iterator[bytes]:
        yield self.getvalue()


@dataclass(frozen=True)
class _IndexEntry:
    """One item of the due-index: sorted by (renew_at, pk) like the GSI's range key, item JSON kept."""

    renew_at: Decimal
    pk: str
    item_json: bytes
    key_json: bytes  # the `LastEvaluatedKey` of a page that ends here


class FakeAws:
    """SQS and DynamoDB answered in-process with a fixed latency and the real JSON 1.0 wire format."""

    def __init__(self, latency_s: float) -> None:
        self._latency_s = latency_s
        self._shards: dict[int, list[_IndexEntry]] = {}
        self._lock = threading.Lock()
        self.calls: Counter[str] = Counter()
        self.cpu_s = 0.0  # thread CPU spent in the fake itself (building and parsing bodies)

    def attach(self, sqs: SQSClient, dynamodb: DynamoDBClient) -> None:
        # A `before-send` handler that returns a response stands in for the HTTP call (the stubs type
        # every handler as returning None).
        handler = cast("Callable[..., None]", self._answer)
        sqs.meta.events.register("before-send.sqs.*", handler)
        dynamodb.meta.events.register("before-send.dynamodb.*", handler)

    def load(self, items: Sequence[tuple[int, dict[str, Any]]]) -> None:
        """Replace the table with these (shard, item) pairs and reset the counters."""
        shards: dict[int, list[_IndexEntry]] = {}
        for shard, item in items:
            renew_at, pk = item[RENEW_AT_ATTR]["N"], item[PARTITION_KEY]["S"]
            key = {PARTITION_KEY: item[PARTITION_KEY], SHARD_ATTR: item[SHARD_ATTR], RENEW_AT_ATTR: item[RENEW_AT_ATTR]}
            entry = _IndexEntry(Decimal(renew_at), pk, json.dumps(item).encode(), json.dumps(key).encode())
            shards.setdefault(shard, []).append(entry)
        for entries in shards.values():
            entries.sort(key=_sort_key)
        self._shards = shards
        self.calls.clear()
        self.cpu_s = 0.0

    def _answer(self, request: AWSPreparedRequest, **_: Any) -> AWSResponse:
        started = time.thread_time()
        target = request.headers["X-Amz-Target"]  # bytes once botocore has prepared the request
        operation = (target.decode() if isinstance(target, bytes) else target).split(".", 1)[1]
        if operation == "Query":
            body = self._query(_json_body(request))
        elif operation in ("UpdateItem", "TransactWriteItems"):
            body = EMPTY_BODY
        elif operation == "ChangeMessageVisibilityBatch":
            body = self._change_visibility_batch(_json_body(request))
        else:
            raise NotImplementedError(f"the fake does not answer {operation}")
        headers = HTTPHeaders()
        headers["x-amzn-RequestId"] = str(uuid.uuid4())
        headers["Content-Type"] = JSON_CONTENT_TYPE
        headers["Content-Length"] = str(len(body))
        headers["x-amz-crc32"] = str(zlib.crc32(body))
        response = AWSResponse(request.url, 200, headers, _RawBody(body))
        with self._lock:
            self.calls[operation] += 1
            self.cpu_s += time.thread_time() - started
        time.sleep(self._latency_s)
        return response

    def _query(self, params: dict[str, Any]) -> bytes:
        """A page of the due-index: the shard is the value the key condition gives the shard attribute,
        whatever its placeholders are named, and `Limit` cuts the page as DynamoDB does."""
        values = params["ExpressionAttributeValues"]
        names = params.get("ExpressionAttributeNames", {})
        equal = re.match(r"\s*(#\w+)\s*=\s*(:\w+)", params["KeyConditionExpression"])
        if equal is None or names.get(equal[1]) != SHARD_ATTR:
            raise NotImplementedError(f"the fake queries by shard only: {params['KeyConditionExpression']!r}")
        entries = self._shards.get(int(values[equal[2]]["N"]), [])
        before = Decimal(values[":before"]["N"]) if ":before" in values else None
        limit = min(PAGE_ITEMS, params.get("Limit", PAGE_ITEMS))
        start = 0
        if "ExclusiveStartKey" in params:
            last = params["ExclusiveStartKey"]
            start = bisect.bisect_right(
                entries, (Decimal(last[RENEW_AT_ATTR]["N"]), last[PARTITION_KEY]["S"]), key=_sort_key
            )
        page: list[bytes] = []
        size, end, full = 0, start, False
        while end < len(entries) and (before is None or entries[end].renew_at <= before):
            item_json = entries[end].item_json
            if len(page) == limit or size + len(item_json) > PAGE_BYTES:
                full = True  # like DynamoDB, a page cut by a limit carries a LastEvaluatedKey
                break
            page.append(item_json)
            size += len(item_json)
            end += 1
        last_key = b',"LastEvaluatedKey":' + entries[end - 1].key_json if full else b""
        count = str(len(page)).encode()
        return b'{"Count":%s,"ScannedCount":%s,"Items":[%s]%s}' % (count, count, b",".join(page), last_key)

    @staticmethod
    def _change_visibility_batch(params: dict[str, Any]) -> bytes:
        successful = [{"Id": entry["Id"]} for entry in params["Entries"]]
        return json.dumps({"Successful": successful, "Failed": []}).encode()


def _json_body(request: AWSPreparedRequest) -> Any:
    body = request.body
    assert isinstance(body, bytes | str), f"expected a serialized JSON body, got {type(body)}"
    return json.loads(body)


def _sort_key(entry: _IndexEntry) -> tuple[Decimal, str]:
    return (entry.renew_at, entry.pk)


def due_leases(count: int, *, now: float, settings: Settings, policy: RenewalPolicy, rng: random.Random) -> list[Lease]:
    """`count` ACTIVE leases, all due at `now`: jobs 10 minutes to 6 hours old, not lapsed, under their hard stop."""
    leases = []
    lead = adaptive_lead_s(settings)
    for _ in range(count):
        received_at = now - rng.uniform(600, 6 * 3600)
        visible_until = now + rng.uniform(lead / 2, lead)
        lease = Lease(
            message_id=str(uuid.UUID(int=rng.getrandbits(128), version=4)),
            queue_url=QUEUE_URL,
            receipt_handle=base64.b64encode(rng.randbytes(RECEIPT_HANDLE_BYTES)).decode(),
            receive_count=1,
            received_at=received_at,
            visible_until=visible_until,
            renew_until=received_at + settings.renewal_s,
            renewed_at=visible_until - settings.adaptive_ceiling_s,
            version=rng.randint(1, 40),
            renewal_count=rng.randint(1, 40),
            execution_arn=f"arn:aws:states:us-east-1:123456789012:execution:jobs:{rng.getrandbits(64):x}",
            job_type="spark",
        )
        lease = replace(lease, renew_at=policy.renew_at(lease))
        assert lease.renew_at is not None and lease.renew_at <= now < lease.renew_until
        leases.append(lease)
    return leases


@dataclass(frozen=True)
class RunResult:
    wall_s: float
    leases_per_s: float
    cpu_us_per_lease: float
    fake_cpu_us_per_lease: float
    calls: dict[str, int]


class Bench:
    """The extender as the handler builds it, on boto3 clients answered by `FakeAws`."""

    def __init__(self, latency_s: float) -> None:
        self.settings = Settings(table_name=TABLE)
        self.clock = SystemClock()
        self.fake = FakeAws(latency_s)
        session = boto3.session.Session()
        client_args: dict[str, Any] = {
            "region_name": "us-east-1",
            "aws_access_key_id": "x",
            "aws_secret_access_key": "x",
            "config": CLIENT_CONFIG,
        }
        sqs: SQSClient = session.client("sqs", **client_args)
        dynamodb: DynamoDBClient = session.client("dynamodb", **client_args)
        self.fake.attach(sqs, dynamodb)
        self.executor = ThreadPoolExecutor(max_workers=self.settings.max_workers)
        factory = Factory(self.settings, self.clock)
        self.extender = factory.extender(Clients(sqs, dynamodb), random.Random(), executor=self.executor)
        self.store = self.extender.store

    def run(self, count: int, seed: int) -> RunResult:
        """One timed `renew_due` pass over `count` fresh due leases."""
        leases = due_leases(
            count, now=self.clock.now(), settings=self.settings, policy=self.extender.policy, rng=random.Random(seed)
        )
        self.fake.load(
            [
                (shard, lease_to_item(lease, shard))
                for lease in leases
                for shard in [self.store.shard_of(lease.message_id)]
            ]
        )
        cpu_start, wall_start = time.process_time(), time.perf_counter()
        report = renew_due(self.extender, deadline=self.clock.now() + self.settings.extender_period_s)
        wall_s, cpu_s = time.perf_counter() - wall_start, time.process_time() - cpu_start
        if report.due != count or report.renewed != count:  # measure real work only (and not under -O either)
            raise AssertionError(f"expected {count} due leases, all renewed; got {report}")
        return RunResult(
            wall_s=wall_s,
            leases_per_s=report.renewed / wall_s,
            cpu_us_per_lease=cpu_s / count * 1e6,
            fake_cpu_us_per_lease=self.fake.cpu_s / count * 1e6,
            calls=dict(self.fake.calls),
        )

    def close(self) -> None:
        self.executor.shutdown()


def median_calls(results: Sequence[RunResult]) -> dict[str, int]:
    """Calls per operation of a pass (Query pages vary a little with how the fresh leases fall on shards)."""
    operations = sorted({op for r in results for op in r.calls})
    return {op: statistics.median_low(r.calls.get(op, 0) for r in results) for op in operations}


def _print_table(args: argparse.Namespace, bench: Bench, results: Sequence[RunResult]) -> None:
    settings = bench.settings
    print(
        f"extender renew_due pass: {args.leases} due leases, {args.latency_ms:g} ms per AWS call, "
        f"{settings.max_workers} workers, {settings.shards} shards, {os.cpu_count()} CPUs"
    )
    print(f"{'run':>6} {'wall s':>8} {'leases/s':>9} {'CPU us/lease':>13} {'(fake)':>7}")
    for index, result in enumerate(results, 1):
        print(
            f"{index:>6} {result.wall_s:>8.3f} {result.leases_per_s:>9.0f} "
            f"{result.cpu_us_per_lease:>13.0f} {result.fake_cpu_us_per_lease:>7.0f}"
        )
    walls = [r.wall_s for r in results]
    print(
        f"{'median':>6} {statistics.median(walls):>8.3f} {statistics.median(r.leases_per_s for r in results):>9.0f} "
        f"{statistics.median(r.cpu_us_per_lease for r in results):>13.0f} "
        f"{statistics.median(r.fake_cpu_us_per_lease for r in results):>7.0f}"
    )
    print(f"wall s min/max: {min(walls):.3f} / {max(walls):.3f}")
    print("calls per pass (median): " + ", ".join(f"{op} {n}" for op, n in sorted(median_calls(results).items())))
    verdict = "met" if statistics.median(r.leases_per_s for r in results) >= GOAL_LEASES_PER_S else "MISSED"
    print(f"goal {GOAL_LEASES_PER_S} leases/s: {verdict}")
    budget = bench.extender.policy.horizon_s
    within = "yes" if max(walls) <= budget else "NO"
    print(
        f"pass budget (adaptive horizon, pass_budget_s): {budget:g} s; slowest pass {max(walls):.3f} s; "
        f"a pass of {args.leases} leases after the worst gap lands before any lapses: {within}"
    )


def build_parser() -> argparse.ArgumentParser:
    """The command line (apart from the run: docs/benchmarks.md's commands are parsed by a test)."""
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.extender_throughput", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--leases", type=int, default=10_000, help="due leases per pass (default 10000)")
    parser.add_argument("--latency-ms", type=float, default=15.0, help="latency of every AWS call (default 15)")
    parser.add_argument("--repeat", type=int, default=5, help="timed passes, each with fresh leases (default 5)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    return parser


def main(argv: Sequence[str] | None = None) -> None:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.leases < 1 or args.repeat < 1 or args.latency_ms < 0:
        parser.error("--leases and --repeat must be at least 1, --latency-ms at least 0")

    bench = Bench(args.latency_ms / 1000)
    try:
        bench.run(min(WARMUP_LEASES, args.leases), seed=-1)
        results = [bench.run(args.leases, seed=run) for run in range(args.repeat)]
    finally:
        bench.close()

    if args.json:
        print(
            json.dumps(
                {
                    "leases_per_s": statistics.median(r.leases_per_s for r in results),
                    "cpu_us_per_lease": statistics.median(r.cpu_us_per_lease for r in results),
                    "wall_s_median": statistics.median(r.wall_s for r in results),
                    "wall_s_max": max(r.wall_s for r in results),
                    "pass_budget_s": bench.extender.policy.horizon_s,
                    "within_pass_budget": max(r.wall_s for r in results) <= bench.extender.policy.horizon_s,
                    "runs": [
                        {
                            "wall_s": r.wall_s,
                            "leases_per_s": r.leases_per_s,
                            "cpu_us_per_lease": r.cpu_us_per_lease,
                            "fake_cpu_us_per_lease": r.fake_cpu_us_per_lease,
                            "calls": r.calls,
                        }
                        for r in results
                    ],
                    "calls": median_calls(results),
                },
                indent=2,
            )
        )
    else:
        _print_table(args, bench, results)


if __name__ == "__main__":
    main()
