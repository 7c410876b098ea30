"""The Step Functions service of one seed's world: executions of the rendered workflow and the jobs they run.

- **Executions** (`longjobs.sim.workflow`), started by StartExecution, killed by StopExecution and at the
  state machine's timeout; each end reaches the watcher through the status-event rule, late, lost,
  duplicated or out of order, by the seed.
- The workflow's **Task resources** (`Integrations`), called through the workflow's own clients.
- **Spark runs** behind the task-token step: they heartbeat, then succeed, fail, hang or vanish.
- **EMR Serverless runs** behind an emr_serverless type's `.sync` step (`longjobs.sim.emr`), cancelled
  (best effort) when their execution ends.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, Protocol

from botocore.exceptions import BotoCoreError, ClientError

from longjobs.engine.runs import EMR_TASK
from longjobs.engine.watcher.models import ExecutionStatusChange, status_change_envelope
from longjobs.history.faults import WorldFault
from longjobs.sim.aws import ACCOUNT, REGION, Execution, FakeAws
from longjobs.sim.clients import SimClient
from longjobs.sim.emr import EMR_RESOURCE, EmrServerless, JobRun
from longjobs.sim.emr import TERMINAL as EMR_TERMINAL
from longjobs.sim.properties import Running
from longjobs.sim.scheduler import Group, Scheduler, Signal
from longjobs.sim.stage import Stage
from longjobs.sim.workflow import ExecutionContext, Interpreter, StatesError
from longjobs.sim.workload import SparkBehaviour

__all__ = ["JOB_STATE", "STATE_MACHINE_ARN", "Executions", "Integrations", "TaskHost", "status_change", "status_event"]

STATE_MACHINE_ARN = f"arn:aws:states:{REGION}:{ACCOUNT}:stateMachine:long-jobs"
JOB_STATE = "RunJob"  # the workflow's job step (longjobs.construct.workflow)
CLOSE_READ = "ReadLease"  # the success close's read of its lease, when its mark was refused
SPARK_PICKUP_S = (0.5, 5.0)
SPARK_ERROR = "AnalysisException"
EVENT_DELAY_S = (0.2, 3.0)
EVENT_LATE_S = (30.0, 600.0)
RESOURCES = {
    "arn:aws:states:::dynamodb:getItem": ("dynamodb", "get_item"),
    "arn:aws:states:::dynamodb:updateItem": ("dynamodb", "update_item"),
    "arn:aws:states:::aws-sdk:dynamodb:transactWriteItems": ("dynamodb", "transact_write_items"),
    "arn:aws:states:::aws-sdk:sqs:deleteMessage": ("sqs", "delete_message"),
    "arn:aws:states:::aws-sdk:sqs:changeMessageVisibility": ("sqs", "change_message_visibility"),
    "arn:aws:states:::sqs:sendMessage.waitForTaskToken": ("sqs", "send_message"),
}
SDK_SQS_ERRORS = {  # SQS codes as the AWS SDK integration names them (`Sqs.<Exception>`)
    "ReceiptHandleIsInvalid": "Sqs.ReceiptHandleIsInvalidException",
    "MessageNotInflight": "Sqs.MessageNotInflightException",
    "NonExistentQueue": "Sqs.QueueDoesNotExistException",
    "QueueDoesNotExist": "Sqs.QueueDoesNotExistException",
    "RequestThrottled": "Sqs.RequestThrottledException",
}


class TaskHost(Protocol):
    """What `Integrations` uses of its host: the workflow's clients, the simulated AWS (for task tokens),
    the scheduler, and where a Spark task's message goes."""

    workflow_clients: dict[str, SimClient]
    aws: FakeAws
    scheduler: Scheduler

    def spark_task_sent(self, token: str, body: dict[str, Any]) -> None: ...

    def emr_task(self, parameters: Any, context: ExecutionContext) -> Any: ...


class Integrations:
    """The workflow's Task resources, through the workflow's own clients (Step Functions' calls)."""

    def __init__(self, world: TaskHost) -> None:
        self._world = world

    def resources(self) -> set[str]:
        return {*RESOURCES, EMR_RESOURCE}

    def invoke(self, resource: str, parameters: Any, context: ExecutionContext) -> Any:
        if resource == EMR_RESOURCE:
            return self._world.emr_task(parameters, context)
        service, operation = RESOURCES[resource]
        client = self._world.workflow_clients[service]
        if resource.endswith(".waitForTaskToken"):
            return self._task_token(client, parameters, context)
        try:
            return client.call(operation, dict(parameters))
        except ClientError as exc:
            raise _states_error(service, exc, sdk=":aws-sdk:" in resource) from None
        except BotoCoreError as exc:
            raise StatesError("States.TaskFailed", str(exc)) from None

    def _task_token(self, client: SimClient, parameters: Any, context: ExecutionContext) -> Any:
        world = self._world
        token = context.task_token or ""
        task = TokenTask(world.scheduler)
        world.aws.stepfunctions.tasks[token] = task
        try:
            try:
                client.call(
                    "send_message",
                    {"QueueUrl": parameters["QueueUrl"], "MessageBody": json.dumps(parameters["MessageBody"])},
                )
            except ClientError as exc:
                raise _states_error("sqs", exc, sdk=False) from None
            except BotoCoreError as exc:
                raise StatesError("States.TaskFailed", str(exc)) from None
            world.spark_task_sent(token, parameters["MessageBody"])
            return task.wait(timeout_s=context.timeout_s, heartbeat_s=context.heartbeat_s)
        finally:
            task.closed = True


class TokenTask:
    """A task-token task waiting for SendTaskSuccess/Failure, under its timeout and heartbeat timeout."""

    def __init__(self, scheduler: Scheduler) -> None:
        self._scheduler = scheduler
        self.closed = False
        self._done = Signal()
        self._last_beat = scheduler.now()

    def succeed(self, output: str) -> None:
        self._scheduler.set(self._done, ("ok", json.loads(output)))

    def fail(self, error: str, cause: str) -> None:
        self._scheduler.set(self._done, ("error", StatesError(error, cause)))

    def heartbeat(self) -> None:
        self._last_beat = self._scheduler.now()

    def wait(self, *, timeout_s: float | None, heartbeat_s: float | None) -> Any:
        scheduler = self._scheduler
        deadline = scheduler.now() + (timeout_s if timeout_s is not None else 99_999_999)
        while True:
            beat_deadline = self._last_beat + heartbeat_s if heartbeat_s is not None else deadline
            try:
                kind, value = scheduler.wait_for(self._done, max(0.0, min(deadline, beat_deadline) - scheduler.now()))
            except TimeoutError:
                now = scheduler.now()
                if now >= deadline:
                    raise StatesError("States.Timeout", "the task ran past its TimeoutSeconds") from None
                if heartbeat_s is not None and now >= self._last_beat + heartbeat_s:
                    raise StatesError("States.HeartbeatTimeout", "no heartbeat within HeartbeatSeconds") from None
                continue
            if kind == "error":
                raise value
            return value


def _states_error(service: str, exc: ClientError, *, sdk: bool) -> StatesError:
    """A service error as the Task state reports it: `DynamoDB.<Code>` for the optimized DynamoDB
    integration and `DynamoDb.<Exception>` for the AWS SDK one (the SDK's exception name, as
    `InternalServerError` -> `InternalServerErrorException`), `Sqs.<Exception>` for SQS's AWS SDK one
    (generic `Sqs.SqsException` for the rest)."""
    error = exc.response.get("Error", {})
    code = str(error.get("Code", "")).removeprefix("AWS.SimpleQueueService.")
    cause = str(error.get("Message", ""))
    if service == "dynamodb":
        if not sdk:
            return StatesError(f"DynamoDB.{code}", cause)
        return StatesError(f"DynamoDb.{code if code.endswith('Exception') else code + 'Exception'}", cause)
    if sdk:
        return StatesError(SDK_SQS_ERRORS.get(code, "Sqs.SqsException"), cause)
    return StatesError(f"SQS.{code}", cause)


class Executions:
    """The executions of one seed's world and their Spark runs (see the module). `watch(change, at)` hands
    an execution's status-change event to the watcher at `at`."""

    def __init__(
        self,
        stage: Stage,
        definition: dict[str, Any],
        *,
        execution_timeout_s: float,
        watch: Callable[[ExecutionStatusChange, float], None],
        emr_limits_s: dict[str, float] | None = None,
    ) -> None:
        """`emr_limits_s`: each emr_serverless type's declared run limit, which its runs must keep."""
        self.seed, self.workload = stage.seed, stage.workload
        self.scheduler, self.trace, self.rng = stage.scheduler, stage.trace, stage.rng
        self.monitor, self.faults, self.aws, self.client = stage.monitor, stage.faults, stage.aws, stage.client
        self.execution_timeout_s = execution_timeout_s
        self._watch = watch
        self.aws.stepfunctions.on_start = self.on_start
        self.aws.stepfunctions.on_stop = self.on_stop
        self.workflow_clients = {name: self.client(name, "workflow") for name in ("sqs", "dynamodb")}
        self.interpreter = Interpreter(definition, Integrations(self), self.scheduler)
        self.emr_limits_s = dict(emr_limits_s or {})
        self.emr = EmrServerless(
            self.scheduler,
            self.trace,
            self.seed,
            faults_active=self.faults.active,
            reach=self.monitor.reach,
            on_run=self._emr_run,
        )
        job_step = definition["States"][JOB_STATE]
        self.after_success = str(job_step["Next"])  # the states after the job's end, as the definition says
        self.after_job = {self.after_success, *(str(catch["Next"]) for catch in job_step.get("Catch", []))}
        self.groups: dict[str, Group] = {}  # execution ARN -> its actor's group
        self.definition_since: float | None = None  # when a deploy gave new starts a new definition
        self.running = 0  # executions running now

    # -- executions -------------------------------------------------------------

    def on_start(self, execution: Execution) -> None:
        self.running += 1
        group = Group(f"execution:{execution.name}")
        self.groups[execution.arn] = group
        job_id = str(execution.input.get("job", {}).get("job_id", ""))
        self.trace.event("stepfunctions", "execution_started", execution=execution.name, job_id=job_id)
        self.monitor.execution_started(execution.name)
        self.monitor.reach("execution_started")
        interpreter = self.interpreter  # Step Functions runs an execution on the definition it started with
        self.scheduler.spawn(lambda: self._execute(execution, interpreter), group=group)
        self.scheduler.call_at(self.scheduler.now() + self.execution_timeout_s, lambda: self._time_out(execution))

    def deploy_definition(self, definition: dict[str, Any]) -> None:
        """A deploy updated the state machine: executions started from now on run `definition`."""
        self.interpreter = Interpreter(definition, Integrations(self), self.scheduler)
        self.definition_since = self.scheduler.now()

    def _execute(self, execution: Execution, interpreter: Interpreter) -> None:
        context = ExecutionContext(
            execution.arn, execution.started, on_enter=lambda name: self._entered(execution, name)
        )
        outcome = interpreter.run(execution.input, context, random.Random(f"{execution.arn}:{self.seed}"))
        self.groups.pop(execution.arn, None)  # it ends by itself: nothing to kill
        for visit in context.visits:
            if visit.startswith(("catch:", "retry:")):
                self.monitor.reach(f"workflow:{visit}")
            if visit.startswith(f"catch:{CLOSE_READ}->"):
                # the success's close could not read its lease: it leaves the message to a redelivery
                self.monitor.needless.may_show_again(str(execution.input["message_id"]))
        self.monitor.reach(f"workflow:end:{outcome.status}:{outcome.error}")
        if execution.status == "RUNNING":
            self.aws.stepfunctions.end(execution, outcome.status, outcome.error, outcome.cause)

    def _entered(self, execution: Execution, state: str) -> None:
        if state == JOB_STATE:
            job = execution.input["job"]
            lease = self.aws.dynamodb.items.get(str(execution.input["message_id"]))
            cap = float(lease["renew_until"]["N"]) if lease and "renew_until" in lease else None
            run = Running(execution.arn, execution.input["message_id"], str(job["job_id"]), str(job["type"]), cap)
            self.trace.event(
                "workflow", "job_started", execution=execution.name, message_id=run.message_id, job_id=run.job_key
            )
            self.monitor.job_started(run, lease)
        elif state in self.after_job and execution.arn in self.monitor.running:
            self._job_ended(execution, succeeded=state == self.after_success)

    def _job_ended(self, execution: Execution, *, succeeded: bool) -> None:
        job_id = str(execution.input["job"]["job_id"])
        self.trace.event("workflow", "job_ended", execution=execution.name, job_id=job_id, succeeded=succeeded)
        now = self.scheduler.now()
        self.monitor.job_ended(execution.arn, succeeded=succeeded, now=now)
        if succeeded:
            self.faults.job_succeeded(now)
        if not succeeded and self.faults.happens(now, WorldFault.DUPLICATE_DELIVERY):
            # SQS's at-least-once delivery may hand a message out again at any time while it is in flight;
            # at a failed job's end it meets the failure path's release (a handle superseded meanwhile)
            queue = self.aws.sqs.queues.get(str(execution.input.get("queue_url", "")))
            message = queue.messages.get(str(execution.input["message_id"])) if queue is not None else None
            if queue is not None and message is not None and not message.deleted:
                self.monitor.duplicates.add(message.message_id)
                self.monitor.reach("duplicate_delivery_injected_at_failure")
                queue.hide(message, now + self.rng.uniform(0.0, 1.0))

    def _time_out(self, execution: Execution) -> None:
        if execution.status == "RUNNING":
            self.monitor.reach("execution_timed_out")
            self.aws.stepfunctions.end(execution, "TIMED_OUT", "States.Timeout", "the execution ran past its timeout")

    def on_stop(self, execution: Execution) -> None:
        self.running -= 1
        self.emr.execution_ended(execution.arn)
        self.trace.event("stepfunctions", "execution_ended", execution=execution.name, status=execution.status)
        if self.definition_since is not None and execution.started < self.definition_since:
            self.monitor.reach("sim:definition:older_execution_ended")  # it ran on its own definition
        if execution.arn in self.monitor.running:
            self._job_ended(execution, succeeded=False)
        if execution.status == "SUCCEEDED":
            self.monitor.job_recorded(str(execution.input["job"]["job_id"]), str(execution.input["message_id"]))
        group = self.groups.get(execution.arn)
        if group is not None:
            group.killed = True  # it stops where it waits, at once (StopExecution, the execution's timeout)
            self.scheduler.call_at(self.scheduler.now(), lambda: self.scheduler.kill(group))
        self._status_events(execution)

    def _status_events(self, execution: Execution) -> None:
        now = self.scheduler.now()
        if self.faults.happens(now, WorldFault.EVENT_LOST):
            self.monitor.reach("status_event:lost")
            return
        copies = 2 if self.faults.happens(now, WorldFault.EVENT_DUPLICATED) else 1
        for _ in range(copies):
            late = self.faults.happens(now, WorldFault.EVENT_LATE)
            delay = self.rng.uniform(*(EVENT_LATE_S if late else EVENT_DELAY_S))
            if late:
                self.monitor.reach("status_event:late")
            self._watch(status_change(execution, STATE_MACHINE_ARN), now + delay)
        if copies > 1:
            self.monitor.reach("status_event:duplicated")

    # -- Spark runs -----------------------------------------------------------------------------------------

    def _behaviour(self, job_input: dict[str, Any], attempt: int) -> SparkBehaviour:
        """What the job's Spark run does on this attempt: the workload's draw, or a hang or a vanishing."""
        behaviour = self.workload.by_id[str(job_input["job_id"])].spark_behaviour(attempt)
        if self.faults.active(self.scheduler.now()):
            if self.faults.happens(self.scheduler.now(), WorldFault.JOB_HANGS):
                behaviour = SparkBehaviour("hang", behaviour.seconds)
            elif self.faults.happens(self.scheduler.now(), WorldFault.JOB_VANISHES):
                behaviour = SparkBehaviour("vanish", behaviour.seconds)
        self.monitor.reach(f"spark:{behaviour.kind}")
        return behaviour

    def emr_task(self, parameters: Any, context: ExecutionContext) -> Any:
        """An emr_serverless type's `.sync` step: a run on the simulated EMR Serverless (`longjobs.sim.emr`).
        Each attempt goes into the execution's history as Step Functions records a task: scheduled,
        started, submitted with StartJobRun's answer (unless that answer was lost), then its end
        (https://docs.aws.amazon.com/step-functions/latest/apireference/API_HistoryEvent.html)."""
        sfn = self.aws.stepfunctions
        execution = sfn.executions[context.execution_arn]
        behaviour = self._behaviour(execution.input["job"], int(execution.input["attempt"]))
        declared = self.emr_limits_s[str(execution.input["job"]["type"])]
        task = {"resourceType": EMR_TASK[0], "resource": EMR_TASK[1]}
        sfn.record(execution, "TaskScheduled", **task, region=REGION, parameters=json.dumps(parameters))
        sfn.record(execution, "TaskStarted", **task)

        def submitted(answer: dict[str, Any]) -> None:
            sfn.record(execution, "TaskSubmitted", **task, output=json.dumps(answer))

        try:
            output = self.emr.run_job(
                dict(parameters), context.execution_arn, behaviour, context.timeout_s, declared, submitted=submitted
            )
        except StatesError as exc:
            ended = "TaskTimedOut" if exc.error == "States.Timeout" else "TaskFailed"
            sfn.record(execution, ended, **task, error=exc.error, cause=exc.cause)
            raise
        sfn.record(execution, "TaskSucceeded", **task, output=json.dumps(output))
        return output

    def _emr_run(self, run: JobRun) -> None:
        """An EMR Serverless run submitted, or at its end state: a job run of its execution's job."""
        if run.state in EMR_TERMINAL:
            self._run_ended(run.run_id)
            return
        job_id = str(self.aws.stepfunctions.executions[run.execution_arn].input["job"]["job_id"])
        self._run_started(run.run_id, job_id)

    def spark_task_sent(self, token: str, body: dict[str, Any]) -> None:
        behaviour = self._behaviour(body["job"], int(body["attempt"]))
        at = self.scheduler.now() + self.rng.uniform(*SPARK_PICKUP_S)
        job_id = str(body["job"]["job_id"])
        self.scheduler.spawn(lambda: self._spark_job(token, job_id, behaviour), at=at, group=Group(f"spark:{token}"))

    def _spark_job(self, token: str, job_id: str, behaviour: SparkBehaviour) -> None:
        """A Spark worker's run, from its pickup of the task to its exit: a job run of `job_id`. A failed
        run ends before its failure is sent, as the worker sends it only once the run's Spark jobs have
        ended (`longjobs.offline.worker`): its retry need not wait for it."""
        run_id = f"spark:{token}"
        self._run_started(run_id, job_id)
        client = self.client("stepfunctions", "spark")
        ended = False
        try:
            if not self._spark_run(token, behaviour, client):
                return
            if behaviour.kind == "fail":
                self._run_ended(run_id)
                ended = True
            self._answer(token, behaviour, client)
        finally:
            if not ended:
                self._run_ended(run_id)

    def _run_started(self, run_id: str, job_id: str) -> None:
        self.trace.event("runner", "run_started", run=run_id, job_id=job_id)
        self.monitor.runs.started(run_id, job_id, now=self.scheduler.now())

    def _run_ended(self, run_id: str) -> None:
        self.trace.event("runner", "run_ended", run=run_id)
        self.monitor.runs.ended(run_id)

    def _spark_run(self, token: str, behaviour: SparkBehaviour, client: Any) -> bool:
        """The offline worker's run (`longjobs.offline.worker`): a heartbeat first (a task already over is
        not run), then one every third of the step's heartbeat timeout; it stops at a refused heartbeat,
        and by itself once no heartbeat was accepted for the timeout less one interval, so its run ends
        before Step Functions could time its task out (`longjobs.engine.runs` counts on it). Whether the
        run got to its end, to be answered."""
        every = self.workload.spark_heartbeat_s / 3
        unheard_s = self.workload.spark_heartbeat_s - every
        heard = self.scheduler.now()  # the task began before its pickup
        try:
            client.call("send_task_heartbeat", {"taskToken": token})  # a task over before its run is not run
        except ClientError as exc:
            if exc.response["Error"]["Code"] in ("TaskTimedOut", "InvalidToken"):
                self.trace.event("spark", "task_over", token=token)
                return False
        except BotoCoreError:
            pass
        left = behaviour.seconds
        while left > 0 or behaviour.kind == "hang":
            step = min(every, left) if behaviour.kind != "hang" else every
            self.scheduler.sleep(step)
            left -= step
            if behaviour.kind == "vanish" and left <= behaviour.seconds / 2:
                self.trace.event("spark", "vanished", token=token)
                return False
            sent = self.scheduler.now()
            try:
                client.call("send_task_heartbeat", {"taskToken": token})
                heard = sent
            except ClientError as exc:
                if exc.response["Error"]["Code"] in ("TaskTimedOut", "InvalidToken"):
                    self.trace.event("spark", "run_stopped", token=token)
                    self.monitor.reach("spark:stopped_by_closed_task")
                    return False
            except BotoCoreError:
                pass
            if self.scheduler.now() >= heard + unheard_s:
                self.trace.event("spark", "run_unheard", token=token)
                self.monitor.reach("spark:stopped_unheard")
                return False
        return True

    def _answer(self, token: str, behaviour: SparkBehaviour, client: Any) -> None:
        """The run's answer: its failure or its summary, sent again on an error that leaves the task open."""
        for _ in range(5):
            try:
                if behaviour.kind == "fail":
                    client.call(
                        "send_task_failure",
                        {"taskToken": token, "error": SPARK_ERROR, "cause": "[TABLE_OR_VIEW_NOT_FOUND] events"},
                    )
                else:
                    client.call("send_task_success", {"taskToken": token, "output": json.dumps({"rows": 10})})
                return
            except ClientError as exc:
                if exc.response["Error"]["Code"] in ("TaskTimedOut", "InvalidToken"):
                    return
                self.scheduler.sleep(1.0)
            except BotoCoreError:
                self.scheduler.sleep(1.0)


def status_change(execution: Execution, state_machine_arn: str) -> ExecutionStatusChange:
    """The status-change event of an execution as EventBridge delivers it to the watcher."""
    return ExecutionStatusChange(
        executionArn=execution.arn,
        stateMachineArn=state_machine_arn,
        name=execution.name,
        status=execution.status,
        error=execution.error,
        cause=execution.cause,
        input=execution.raw_input,
        startDate=int(execution.started * 1000),
        stopDate=int(execution.stopped * 1000) if execution.stopped is not None else None,
    )


def status_event(change: ExecutionStatusChange) -> dict[str, Any]:
    """The EventBridge event that carries `change` to the watcher: its detail as the model holds it (times
    in milliseconds, kept exact), and an id made from the change, so that a seed stays deterministic."""
    at = change.stopDate if change.stopDate is not None else change.startDate or 0
    return status_change_envelope(
        change.model_dump(mode="json"),
        event_id=f"{change.name}:{change.status}",
        at=datetime.fromtimestamp(at / 1000, UTC),
        account=ACCOUNT,
        region=REGION,
    )
