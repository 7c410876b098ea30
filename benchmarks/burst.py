"""Burst: 10,000 messages sent at once, against StartExecution's token bucket, and the AWS cost per job.

What runs is the simulation's world (`longjobs.sim.world.World`, docs/simulation.md): the real receiver,
extender and watcher code with the clients they are given, the workflow as deployed (the ASL the
construct renders, interpreted), on the simulated AWS (`longjobs.sim.aws`) on virtual time, with no
faults. The simulated Step Functions throttles StartExecution with the documented token bucket of the
simulation's region (us-east-1: 1,300 tokens refilled at 300 a second; "Quotas related to API action
throttling", https://docs.aws.amazon.com/step-functions/latest/dg/service-quotas.html); a throttled
start is retried by the client as botocore's standard mode retries it (3 attempts, backoff), then
left to the engine (the lease stays, a redelivery or reconciliation starts it; starts refused are
counted apart, `max_refused_starts`).

The event source mapping scales as Lambda's does for a standard queue: five batches at once, then up
to 300 more concurrent invocations a minute (five more a second here), up to the mapping's maximum
concurrency ("Configuring scaling behavior for SQS event source mappings",
https://docs.aws.amazon.com/lambda/latest/dg/services-sqs-scaling.html). The stack's default maximum
is 10 (`receiver_max_concurrency`); the mapping allows up to 1,000. One row per maximum.

Measures, per row: `all_started_s` (virtual seconds from the send until every job's first execution
started) against `quota_s`, what the quota alone implies ((messages - bucket) / refill), the starts
throttled (StartExecution requests answered ThrottlingException), the receives that ended not started
(each a refused start the lease counts), the most refused starts of one message, the messages in the
DLQ, the properties broken (lapses included: `no_lapse` fails the run), AWS requests per job by
operation, and an AWS cost per job at list prices (`PRICES`): state transitions, SQS requests,
DynamoDB request units and Lambda requests and duration. DynamoDB units are estimated from the item
sizes the fake holds (1 KB a write unit, 4 KB a read unit, transactions twice, index queries eventually
consistent); Lambda duration is the virtual time of each invocation (the calls' latencies, 5 to 60 ms
each), without CPU time or cold starts; the mapping's empty polls are not counted.

Run from the repository root: `python -m benchmarks.burst [--messages 10000] [--concurrency 10,1000]
[--seed 1] [--json]`.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from typing import Any
from unittest.mock import patch

from rich.console import Console
from rich.table import Table

import longjobs.sim.lambdas as lambdas_module
from longjobs.engine.cost import PRICES  # the one price table: the watcher's cost metric uses it too
from longjobs.functions.extender import extend
from longjobs.sim.aws.base import REGION
from longjobs.sim.aws.stepfunctions import Quota, start_execution_quota
from longjobs.sim.campaign import deployed_workflow
from longjobs.sim.faults import FaultPlan
from longjobs.sim.lambdas import ESM_BATCH, LambdaService
from longjobs.sim.scheduler import Signal
from longjobs.sim.workflow import ExecutionContext, Interpreter, Outcome
from longjobs.sim.workload import CATALOG_JSON, burst
from longjobs.sim.world import START, World

LAMBDA_MEMORY_GB = 256 / 1024  # the stack's default `lambda_memory_mb`, arm64 (longjobs.construct.constants)
ESM_FIRST_BATCHES = 5  # Lambda's SQS mapping: five concurrent batches at first ...
ESM_SCALE_PER_S = 5  # ... then up to 300 more a minute
STACK_DEFAULT_CONCURRENCY = 10  # longjobs.construct.config: receiver_max_concurrency


@dataclass(frozen=True)
class Params:
    messages: int = 10_000
    concurrency: int = 1_000  # the event source mapping's maximum concurrency
    seed: int = 1
    min_s: int = 60  # each job waits between these (uniform)
    max_s: int = 600


@dataclass
class Result:
    concurrency: int
    messages: int
    all_started_s: float
    quota_s: float
    bucket: int
    refill_per_s: float
    starts_throttled: int
    not_started_receives: int
    max_refused_starts: int
    dlq: int
    violation: str | None
    succeeded: int
    executions: int
    settled_s: float
    requests_per_job: dict[str, float] = field(default_factory=dict)
    units_per_job: dict[str, float] = field(default_factory=dict)
    cost_per_job_usd: dict[str, float] = field(default_factory=dict)
    wall_s: float = 0.0

    @property
    def cost_usd(self) -> float:
        return sum(self.cost_per_job_usd.values())


# -- metering ------------------------------------------------------------------------------------------


def attribute_size(value: dict[str, Any]) -> int:
    """An attribute value's size as DynamoDB counts it (its documented item-size rules, approximately:
    a number is about one byte per two digits plus one)."""
    (kind, data), *_ = value.items()
    if kind in ("S", "B"):
        return len(data.encode()) if isinstance(data, str) else len(data)
    if kind == "N":
        return len(str(data).lstrip("-").replace(".", "")) // 2 + 1
    if kind in ("BOOL", "NULL"):
        return 1
    if kind == "M":
        return 3 + sum(len(k.encode()) + attribute_size(v) for k, v in data.items())
    if kind == "L":
        return 3 + sum(1 + attribute_size(v) for v in data)
    return sum(len(str(v).encode()) for v in data)  # SS, NS, BS


def item_size(item: dict[str, Any] | None) -> int:
    return sum(len(name.encode()) + attribute_size(value) for name, value in (item or {}).items())


def write_units(before: dict[str, Any] | None, after: dict[str, Any] | None) -> int:
    """A write's units: the larger of the item before and after, in 1 KB units, at least one."""
    return max(1, math.ceil(max(item_size(before), item_size(after)) / 1024))


def read_units(size: int, *, consistent: bool) -> float:
    """A read's units: 4 KB units, at least one; half for an eventually consistent read."""
    units = max(1, math.ceil(size / 4096))
    return units if consistent else units / 2


class DynamoDbMeter:
    """Wraps the simulated table's operations to count request units from the items they touch."""

    def __init__(self, fake: Any) -> None:
        self.fake = fake
        self.wru = 0.0
        self.rru = 0.0
        for name in ("get_item", "batch_get_item", "put_item", "update_item", "delete_item", "query"):
            if hasattr(fake, name):
                setattr(fake, name, self._metered(name, getattr(fake, name)))
        fake.transact_write_items = self._transact(fake.transact_write_items)

    def _key(self, request: dict[str, Any]) -> str:
        source = request.get("Key") or request.get("Item") or {}
        return str(source.get(self.fake.pk, {}).get("S", ""))

    def _metered(self, name: str, operation: Callable[..., dict[str, Any]]) -> Callable[..., dict[str, Any]]:
        def call(**request: Any) -> dict[str, Any]:
            if name in ("put_item", "update_item", "delete_item"):
                key = self._key(request)
                before = self.fake.items.get(key)
                try:
                    return operation(**request)
                finally:  # a refused conditional write is charged too
                    self.wru += write_units(before, self.fake.items.get(key))
            answer = operation(**request)
            if name == "get_item":
                consistent = bool(request.get("ConsistentRead"))
                self.rru += read_units(item_size(answer.get("Item")), consistent=consistent)
            elif name == "batch_get_item":
                for table, found in answer.get("Responses", {}).items():
                    consistent = bool(request["RequestItems"][table].get("ConsistentRead"))
                    self.rru += sum(read_units(item_size(item), consistent=consistent) for item in found)
            else:  # query: a page's items together; an index is read eventually consistent
                size = sum(item_size(item) for item in answer.get("Items", []))
                consistent = bool(request.get("ConsistentRead")) and "IndexName" not in request
                self.rru += read_units(size, consistent=consistent)
            return answer

        return call

    def _transact(self, operation: Callable[..., dict[str, Any]]) -> Callable[..., dict[str, Any]]:
        def call(**request: Any) -> dict[str, Any]:
            entries = [next(iter(entry.values())) for entry in request["TransactItems"]]
            keys = [self._key(entry) for entry in entries]
            before = [self.fake.items.get(key) for key in keys]
            try:
                return operation(**request)
            finally:  # a transactional write costs two units per item; a cancelled one is charged too
                self.wru += sum(2 * write_units(b, self.fake.items.get(k)) for b, k in zip(before, keys, strict=True))

        return call


class CountingInterpreter:
    """The world's interpreter, counting state transitions as Step Functions bills them: each state
    entered, and each retry of a Task."""

    def __init__(self, interpreter: Interpreter) -> None:
        self._interpreter = interpreter
        self.transitions = 0

    def run(self, execution_input: Any, context: ExecutionContext, rng: random.Random) -> Outcome:
        try:
            return self._interpreter.run(execution_input, context, rng)
        finally:
            self.transitions += sum(1 for visit in context.visits if not visit.startswith("catch:"))


# -- the world -----------------------------------------------------------------------------------------


class BurstWorld(World):
    """The simulation's world with a burst, no faults, an event source mapping that scales as Lambda's,
    and what costs money counted: Lambda invocations and their virtual duration, state transitions and
    DynamoDB request units."""

    def __init__(self, params: Params, quota: Quota) -> None:
        workflow = deployed_workflow()
        faults = FaultPlan(rate=0.0, kinds=(), world={}, quiet_at=START, rng=random.Random(f"burst:{params.seed}"))
        self.params = params  # before the world builds its Lambda service (`_lambda_service`)
        self.invocations: Counter[str] = Counter()
        self.lambda_s: dict[str, float] = {}  # function -> virtual seconds its invocations took
        super().__init__(
            params.seed,
            burst(params.messages, params.seed, min_s=params.min_s, max_s=params.max_s),
            workflow.definition,
            CATALOG_JSON,
            faults=faults,
            execution_timeout_s=workflow.timeout_s,
            keep_calls=False,
        )
        self.aws.stepfunctions.start_quota = quota
        self.counting = CountingInterpreter(self.executions.interpreter)
        self.executions.interpreter = self.counting  # type: ignore[assignment]
        self.meter = DynamoDbMeter(self.aws.dynamodb)

    def _lambda_service(self) -> LambdaService:
        return BurstLambda(self)

    def _start(self) -> None:
        for job in self.workload.jobs:
            self.scheduler.call_at(START + job.send_at_s, lambda job=job: self._send(job))  # type: ignore[misc]
        self.functions.start()

    def invoked(self, function: str, began: float) -> None:
        self.invocations[function] += 1
        self.lambda_s[function] = self.lambda_s.get(function, 0.0) + self.scheduler.now() - began

    def run_metered(self) -> Any:
        """Run the world, timing each extender invocation too (its runs are spawned by the Lambda service)."""

        def timed(*args: Any, **kwargs: Any) -> Any:
            began = self.scheduler.now()
            try:
                return extend(*args, **kwargs)
            finally:
                self.invoked("extender", began)

        with patch.object(lambdas_module, "extend", timed):
            return self.run()


class BurstLambda(LambdaService):
    """Lambda as a burst meets it: the mapping's pollers scale up as Lambda's do, and each invocation's
    virtual duration is counted (`BurstWorld.invoked`)."""

    def __init__(self, world: BurstWorld) -> None:
        super().__init__(world)
        self.world = world
        self.queue_changed = [Signal() for _ in range(world.params.concurrency)]

    def start(self) -> None:
        for index in range(self.world.params.concurrency):
            at = START + max(0, math.ceil((index + 1 - ESM_FIRST_BATCHES) / ESM_SCALE_PER_S))
            self.scheduler.spawn(lambda index=index: self._poller(index), at=at)  # type: ignore[misc]
        self.schedule_extender(0)

    def on_queue_changed(self) -> None:
        """A long poll answers when messages arrive: wake as many idle pollers as the visible messages
        fill batches (at least one, which looks again when the next message shows), not all of them
        (a thousand pollers woken by every change would cost the simulation, not SQS)."""
        idle = [signal for signal in self.queue_changed if signal.waiters]
        wanted = max(1, math.ceil(self.queue.visible_count / ESM_BATCH))
        for signal in idle[:wanted]:
            self.scheduler.set(signal)

    def invoke_receiver(self, poller: int, messages: list[dict[str, Any]]) -> list[str]:
        began = self.scheduler.now()
        try:
            return super().invoke_receiver(poller, messages)
        finally:
            self.world.invoked("receiver", began)

    def watch(self, change: Any, attempt: int = 1) -> None:
        began = self.scheduler.now()
        try:
            super().watch(change, attempt)
        finally:
            self.world.invoked("watcher", began)


def simulate(params: Params, quota: Quota | None = None) -> Result:
    quota = quota or start_execution_quota(REGION)
    wall = time.monotonic()
    world = BurstWorld(params, quota)
    seed_result = world.run_metered()
    return result_of(world, seed_result, quota, time.monotonic() - wall)


def result_of(world: BurstWorld, seed_result: Any, quota: Quota, wall_s: float) -> Result:
    params = world.params
    first_start: dict[str, float] = {}
    for execution in world.aws.stepfunctions.executions.values():
        job_id = str(execution.input["job"]["job_id"])
        first_start[job_id] = min(first_start.get(job_id, math.inf), execution.started)
    refused = [
        int(item.get("refused_starts", {}).get("N", 0))
        for key, item in world.aws.dynamodb.items.items()
        if "refused_starts" in item
    ]
    units = {"dynamodb_wru": world.meter.wru, "dynamodb_rru": world.meter.rru}
    return Result(
        concurrency=params.concurrency,
        messages=params.messages,
        all_started_s=round(max(first_start.values(), default=START) - START, 1),
        quota_s=round(quota.drain_s(params.messages), 1),
        bucket=quota.bucket,
        refill_per_s=quota.refill_per_s,
        starts_throttled=world.aws.stepfunctions.throttled["StartExecution"],
        not_started_receives=seed_result.coverage.get("receiver:not_started", 0),
        max_refused_starts=max(refused, default=0),
        dlq=len(world.dlq.messages),
        violation=seed_result.violation.property if seed_result.violation else None,
        succeeded=sum(1 for count in world.monitor.succeeded.values() if count > 0),
        executions=len(world.aws.stepfunctions.executions),
        settled_s=round(world.scheduler.now() - START, 1),
        requests_per_job=per_job(requests(world), params.messages),
        units_per_job=per_job(units, params.messages),
        cost_per_job_usd=costs(world, units, params.messages),
        wall_s=round(wall_s, 1),
    )


def requests(world: BurstWorld) -> dict[str, float]:
    """Every AWS request by operation, and the Lambda invocations by function."""
    counted: dict[str, float] = dict(world.aws.calls)
    counted["stepfunctions.StateTransitions"] = world.counting.transitions
    for function, count in world.invocations.items():
        counted[f"lambda.{function}"] = count
    return counted


def per_job(counts: dict[str, float], jobs: int) -> dict[str, float]:
    return {name: round(value / jobs, 3) for name, value in sorted(counts.items())}


def costs(world: BurstWorld, units: dict[str, float], jobs: int) -> dict[str, float]:
    """Dollars per job, by service, at `PRICES`."""
    sqs = sum(count for name, count in world.aws.calls.items() if name.startswith("sqs."))
    lambda_requests = sum(world.invocations.values())
    gb_s = sum(world.lambda_s.values()) * LAMBDA_MEMORY_GB
    dollars = {
        "stepfunctions": world.counting.transitions * PRICES["stepfunctions_transition"][0],
        "sqs": sqs * PRICES["sqs_request"][0],
        "dynamodb": units["dynamodb_wru"] * PRICES["dynamodb_wru"][0]
        + units["dynamodb_rru"] * PRICES["dynamodb_rru"][0],
        "lambda": lambda_requests * PRICES["lambda_request"][0] + gb_s * PRICES["lambda_gb_s"][0],
    }
    return {name: value / jobs for name, value in dollars.items()}


# -- output --------------------------------------------------------------------------------------------

COLUMNS = (
    ("concurrency", "mapping max\nconcurrency"),
    ("all_started_s", "all started\n(virtual s)"),
    ("quota_s", "quota alone\n(s)"),
    ("starts_throttled", "starts\nthrottled"),
    ("not_started_receives", "receives not\nstarted"),
    ("max_refused_starts", "max refused\nstarts / msg"),
    ("dlq", "DLQ\n= 0"),
    ("violation", "properties\nbroken"),
    ("settled_s", "settled\n(virtual s)"),
    ("cost_usd", "$ / job"),
    ("wall_s", "wall s"),
)


def cell(result: Result, key: str) -> str:
    value = getattr(result, key)
    if key == "cost_usd":
        return f"{value:.7f}"
    if key == "violation":
        return value or "none"
    return f"{value:,}" if isinstance(value, int) else str(value)


def table(results: list[Result], params: Params) -> Table:
    quota = results[0] if results else None
    title = f"Burst: {params.messages:,} messages at once (seed {params.seed}), {REGION}" + (
        f", StartExecution bucket {quota.bucket:,} refilled at {quota.refill_per_s:g}/s" if quota else ""
    )
    out = Table(title=title, title_justify="left")
    for _, label in COLUMNS:
        out.add_column(label, justify="right")
    for result in results:
        out.add_row(*(cell(result, key) for key, _ in COLUMNS))
    return out


def requests_table(results: list[Result]) -> Table:
    """Requests per job by operation (and Lambda invocations, state transitions), one column a row."""
    out = Table(title="AWS requests per job", title_justify="left")
    out.add_column("operation")
    for result in results:
        out.add_column(f"concurrency {result.concurrency:,}", justify="right")
    names = sorted({name for result in results for name in result.requests_per_job})
    for name in names:
        out.add_row(name, *(str(result.requests_per_job.get(name, 0)) for result in results))
    for name in ("dynamodb_wru", "dynamodb_rru"):
        out.add_row(f"{name} (units)", *(str(result.units_per_job.get(name, 0)) for result in results))
    for name in ("stepfunctions", "sqs", "dynamodb", "lambda"):
        out.add_row(f"$ {name}", *(f"{result.cost_per_job_usd.get(name, 0):.8f}" for result in results))
    return out


def prices_note() -> str:
    return "; ".join(f"{name} ${price:.10g} ({source})" for name, (price, source) in PRICES.items())


def as_json(results: list[Result], params: Params) -> dict[str, Any]:
    return {
        "params": asdict(params) | {"concurrency": [result.concurrency for result in results]},
        "region": REGION,
        "prices_usd": {name: {"price": price, "source": source} for name, (price, source) in PRICES.items()},
        "results": [asdict(result) | {"cost_usd": round(result.cost_usd, 9)} for result in results],
    }


def concurrencies(text: str) -> list[int]:
    values = [int(part) for part in text.split(",") if part.strip()]
    if not values or any(not 2 <= value <= 1_000 for value in values):
        raise argparse.ArgumentTypeError("maximum concurrency is 2 to 1,000 (Lambda's SQS mapping)")
    return values


def build_parser() -> argparse.ArgumentParser:
    """The command line (apart from the run: docs/benchmarks.md's commands are parsed by a test)."""
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.burst", description="A burst of messages against StartExecution's quota, simulated."
    )
    parser.add_argument(
        "--messages", type=int, default=Params.messages, help=f"messages sent at once (default {Params.messages})"
    )
    parser.add_argument(
        "--concurrency",
        type=concurrencies,
        default=[STACK_DEFAULT_CONCURRENCY, 1_000],
        help="the mapping's maximum concurrency, comma-separated rows (default: 10,1000)",
    )
    parser.add_argument("--seed", type=int, default=Params.seed, help=f"the random seed (default {Params.seed})")
    parser.add_argument("--json", action="store_true", help="print JSON instead of the tables")
    return parser


def main(argv: Iterable[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(list(argv) if argv is not None else None)
    if args.messages < 1:
        parser.error("--messages must be at least 1")
    base = Params(messages=args.messages, seed=args.seed)
    results = [simulate(Params(**(asdict(base) | {"concurrency": c}))) for c in args.concurrency]
    if args.json:
        print(json.dumps(as_json(results, base), indent=1))
        return 0
    console = Console()
    if not console.is_terminal:  # piped: rich's 80 columns would cut the figures short
        console = Console(width=200)
    console.print(table(results, base))
    console.print(requests_table(results))
    console.print(f"Prices ({REGION}, list, no free tier): {prices_note()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
