"""The functions' cores built in one place: the receiver, the extender and the watcher, each from
settings, AWS clients and a clock.

The Lambda handlers (`longjobs.functions`), the simulation, the offline runtime (through the handlers)
and the benchmarks build them here, so each runs the same wiring. What differs between them is passed
in: the clients (boto3's, or the simulation's per actor), the clock (the system's or a virtual one),
the random stream (the simulation's is seeded) and the executor of parallel calls.

Admission control is wired when some job type has a concurrency limit and its waiting queue is set:
the extender and the watcher then each run admission's pass as a receiver of their own (`admitter`).

Each builder imports its core when called, not with this module: a handler's cold start then loads only
the function it runs (`python -m benchmarks.cold_start` measures the import)."""

from __future__ import annotations

import random
from concurrent.futures import Executor
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any

from longjobs.engine.clock import Clock
from longjobs.engine.settings import Settings, SettingsError

if TYPE_CHECKING:
    from collections.abc import Callable

    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_sqs import SQSClient
    from mypy_boto3_stepfunctions import SFNClient

    from longjobs.engine.delivery.types import Receiver
    from longjobs.engine.extender.service import Extender
    from longjobs.engine.jobs import JobCatalog
    from longjobs.engine.lease import LeaseStore
    from longjobs.engine.lease.lock import Hold
    from longjobs.engine.observability import MetricsSink
    from longjobs.engine.policies import RenewalPolicy
    from longjobs.engine.watcher.service import Watcher

__all__ = ["Clients", "Factory", "require"]


@dataclass(frozen=True)
class Clients:
    """The AWS clients of one container. The watcher alone needs no Step Functions client."""

    sqs: SQSClient
    dynamodb: DynamoDBClient
    stepfunctions: SFNClient | None = None
    runner: Callable[[str], Any] | None = None
    """Makes a client of a job runner's service (`emr-serverless`, `glue`), when one is first needed."""
    starts: SFNClient | None = None
    """Step Functions with one attempt a call, for the receiver's starts (`longjobs.engine.aws.starts`);
    None: starts go through `stepfunctions`, and a throttled one is asked about like any failed start."""

    @classmethod
    def from_sdk(cls, *, stepfunctions: bool = True) -> Clients:
        """The clients of a Lambda container or a local process, from the SDK's configuration."""
        from longjobs.engine import aws

        if not stepfunctions:
            return cls(aws.sqs(), aws.dynamodb(), None, aws.runner)
        import botocore.session

        session = botocore.session.get_session()  # one session: the second client reuses its service model
        return cls(aws.sqs(), aws.dynamodb(), aws.stepfunctions(session), aws.runner, aws.starts(session))


def require(settings: Settings, function: str, names: tuple[str, ...]) -> None:
    """Fail the cold start when a setting the function needs is unset, naming each one."""
    missing = [name.upper() for name in names if not getattr(settings, name)]
    if missing:
        raise SettingsError(f"the {function} needs {', '.join(missing)}")


@dataclass(frozen=True)
class Factory:
    """Builds the functions of one deployment: its settings, clock, job catalog and metrics sink."""

    settings: Settings
    clock: Clock
    catalog: JobCatalog | None = None
    """The job types; None: the built-in ones (the watcher reads none)."""
    metrics: MetricsSink | None = None
    """Where the receivers count what they did; None: nowhere."""

    @cached_property
    def policy(self) -> RenewalPolicy:
        from longjobs.engine.policies import build_policy

        return build_policy(self.settings)

    @property
    def admits(self) -> bool:
        """Whether admission control runs: a type has a concurrency limit, and there are waiting queues and
        a workflow to start its jobs in."""
        catalog = self.catalog
        return bool(
            catalog is not None
            and catalog.limited()
            and self.settings.waiting_queues
            and self.settings.state_machine_arn
        )

    @property
    def tends_parked(self) -> bool:
        """Whether the extender runs admission's pass: on a standard queue with waiting queues and a workflow,
        even with no type limited, since a deploy that removed a limit may have left messages in that type's
        waiting queue, which the pass starts (`longjobs.engine.admission.admit.unpark_unlimited`)."""
        settings = self.settings
        return bool(not settings.fifo and settings.waiting_queues and settings.state_machine_arn and settings.queue_url)

    def store(self, clients: Clients, *, executor: Executor | None = None, legacy: bool = False) -> LeaseStore:
        """The lease store on `clients`' DynamoDB; `legacy`: watching the shards of a previous, larger
        `shards` too, as the extender does."""
        from longjobs.engine.extender.service import legacy_shards
        from longjobs.engine.lease import LeaseStore

        settings = self.settings
        return LeaseStore(
            clients.dynamodb,
            settings.table_name or "",
            shards=settings.shards,
            closed_ttl_s=settings.closed_ttl_s,
            executor=executor,
            legacy=legacy_shards(settings, self.clock) if legacy else None,
        )

    def receiver(self, clients: Clients, rng: random.Random) -> Receiver:
        """A receiver: the jobs queue's, or the one admission runs as in the extender and the watcher."""
        from longjobs.engine.delivery.types import Receiver
        from longjobs.engine.runs import JobRuns, parse_places
        from longjobs.engine.visibility import VisibilityClient

        if clients.stepfunctions is None:
            raise ValueError("a receiver starts executions: its clients need a Step Functions client")
        extra: dict[str, Any] = {} if self.catalog is None else {"catalog": self.catalog}
        return Receiver(
            settings=self.settings,
            policy=self.policy,
            store=self.store(clients),
            sqs=clients.sqs,
            visibility=VisibilityClient(clients.sqs, clock=self.clock),
            stepfunctions=clients.stepfunctions,
            starts=clients.starts,
            clock=self.clock,
            rng=rng,
            metrics=self.metrics,
            runs=JobRuns(parse_places(self.settings.job_runs), clients.runner, clients.stepfunctions),
            **extra,
        )

    def extender(
        self,
        clients: Clients,
        rng: random.Random,
        *,
        executor: Executor | None = None,
        admitter: Receiver | None = None,
    ) -> Extender:
        """The extender; `admitter`: the receiver its admission pass runs as (None: no pass)."""
        from longjobs.engine.extender.service import Extender
        from longjobs.engine.visibility import VisibilityClient

        admit = None
        if admitter is not None:
            from longjobs.engine.admission.admit import extender_pass
            from longjobs.engine.receiver.service import receive

            admit = extender_pass(admitter, handle=receive)
        return Extender(
            settings=self.settings,
            policy=self.policy,
            store=self.store(clients, executor=executor, legacy=True),
            visibility=VisibilityClient(clients.sqs, clock=self.clock, executor=executor),
            sqs=clients.sqs,
            clock=self.clock,
            executor=executor,
            stepfunctions=clients.stepfunctions,
            rng=rng,
            admit=admit,
        )

    def watcher(self, clients: Clients, *, admit: Callable[[str, Hold | None], object] | None = None) -> Watcher:
        """The watcher; `admit`: admission's pass over an ended execution's type (`watcher_admission`)."""
        from longjobs.engine.visibility import VisibilityClient
        from longjobs.engine.watcher.service import Watcher

        return Watcher(
            store=self.store(clients),
            visibility=VisibilityClient(clients.sqs, clock=self.clock),
            clock=self.clock,
            state_machine_arn=self.settings.state_machine_arn or "",
            admit=admit,
        )

    @staticmethod
    def watcher_admission(admitter: Receiver) -> Callable[[str, Hold | None], object]:
        """Admission's pass over one job type's free slots, run as `admitter`, for the watcher."""
        from longjobs.engine.admission.admit import watcher_pass
        from longjobs.engine.receiver.service import receive

        return watcher_pass(admitter, handle=receive)
