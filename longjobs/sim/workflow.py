"""The workflow as deployed: an interpreter of the ASL the infrastructure code renders, on virtual time.

It runs the definition `longjobs.construct.workflow.render_definition` produces (no hand-written copy),
state by state, as one actor of the scheduler: Task (the integrations in `Integrations`, with Retry and
its backoff, Catch, TimeoutSeconds and HeartbeatSeconds of a task-token task), Choice, Pass, Wait,
Succeed, Fail and a one-branch Parallel. `Interpreter` refuses, when it is built, any state type, field,
choice operator, intrinsic or resource it does not model, naming it: the definition cannot outgrow it
silently. The semantics follow the Amazon States Language specification (states-language.net) and the
Step Functions developer guide (error names, States.ALL not catching States.Runtime, full jitter).
"""

from __future__ import annotations

import fnmatch
import json
import random
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

from longjobs.sim.scheduler import Scheduler

_MISSING: Any = object()  # a path that matched nothing (IsPresent false), apart from a JSON null
COMMON_FIELDS = {"Type", "Comment", "InputPath", "OutputPath"}
FIELDS = {
    "Pass": {"Next", "End", "Parameters", "ResultPath", "Result"},
    "Task": {
        "Next",
        "End",
        "Resource",
        "Parameters",
        "ResultPath",
        "ResultSelector",
        "Retry",
        "Catch",
        "TimeoutSeconds",
        "HeartbeatSeconds",
    },
    "Choice": {"Choices", "Default"},
    "Wait": {"Next", "End", "Seconds", "SecondsPath"},
    "Succeed": set(),
    "Fail": {"Error", "Cause", "ErrorPath", "CausePath"},
    "Parallel": {"Next", "End", "Branches", "ResultPath", "ResultSelector", "Retry", "Catch", "Parameters"},
}
RETRY_FIELDS = {"ErrorEquals", "IntervalSeconds", "MaxAttempts", "BackoffRate", "JitterStrategy", "MaxDelaySeconds"}
CATCH_FIELDS = {"ErrorEquals", "Next", "ResultPath"}
COMPARISONS: dict[str, Callable[[Any, Any], bool]] = {
    "StringEquals": lambda a, b: isinstance(a, str) and a == b,
    "StringMatches": lambda a, b: isinstance(a, str) and fnmatch.fnmatchcase(a, b),
    "BooleanEquals": lambda a, b: isinstance(a, bool) and a == b,
    "NumericEquals": lambda a, b: _number(a) and a == b,
    "NumericGreaterThan": lambda a, b: _number(a) and a > b,
    "NumericLessThan": lambda a, b: _number(a) and a < b,
    "IsPresent": lambda a, b: (a is not _MISSING) == b,
    "IsString": lambda a, b: isinstance(a, str) == b,
}
PATH_COMPARISONS = {"StringEqualsPath": "StringEquals"}
INTRINSICS = {"States.JsonToString", "States.Format", "States.Array"}
TASK_FAILED_EXCLUDES = {"States.Timeout", "States.HeartbeatTimeout"}


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


class DefinitionError(ValueError):
    """The definition uses something the interpreter does not model."""


class StatesError(Exception):
    """An error raised inside an execution, with its ASL name and cause."""

    def __init__(self, error: str, cause: str = "") -> None:
        super().__init__(f"{error}: {cause}")
        self.error = error
        self.cause = cause


class Integrations(Protocol):
    """What the Task states call: the world answers each resource (raising `StatesError`)."""

    def resources(self) -> set[str]: ...

    def invoke(self, resource: str, parameters: Any, context: ExecutionContext) -> Any: ...


@dataclass
class ExecutionContext:
    """The context object (`$$`) and what an integration needs to know of its execution."""

    execution_arn: str
    started: float
    state_name: str = ""
    entered: float = 0.0
    task_token: str | None = None
    timeout_s: float | None = None
    retry_count: int = 0  # the current state's retries so far (`$$.State.RetryCount`)
    heartbeat_s: float | None = None
    visits: list[str] = field(default_factory=list)  # the states entered, catches and retries, in order
    on_enter: Callable[[str], None] | None = None  # told of each state entered (the world's observer)

    def as_json(self) -> dict[str, Any]:
        return {
            "Execution": {
                "Id": self.execution_arn,
                "Name": self.execution_arn.rsplit(":", 1)[-1],
                "StartTime": _iso(self.started),
            },
            "State": {"Name": self.state_name, "EnteredTime": _iso(self.entered), "RetryCount": self.retry_count},
            "Task": {"Token": self.task_token} if self.task_token else {},
        }


def _iso(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


# -- paths, parameters and intrinsics -------------------------------------------------------------------------

_STEP = re.compile(r"\.([A-Za-z_][A-Za-z0-9_]*)|\[(\d+)\]")


def read_path(path: str, data: Any, context: Mapping[str, Any]) -> Any:
    """The value at a reference path (`$.a.b`, `$[0]`, `$$.Execution.Id`), or `_MISSING`."""
    if path.startswith("$$"):
        value, rest = context, path[2:]
    elif path.startswith("$"):
        value, rest = data, path[1:]
    else:
        raise DefinitionError(f"not a path: {path!r}")
    position = 0
    for match in _STEP.finditer(rest):
        if match.start() != position:
            raise DefinitionError(f"path {path!r} uses syntax the interpreter does not model")
        position = match.end()
        key, index = match.group(1), match.group(2)
        if key is not None:
            if not isinstance(value, dict) or key not in value:
                return _MISSING
            value = value[key]
        else:
            if not isinstance(value, list) or int(index) >= len(value):
                return _MISSING
            value = value[int(index)]
    if position != len(rest):
        raise DefinitionError(f"path {path!r} uses syntax the interpreter does not model")
    return value


def _required(path: str, data: Any, context: Mapping[str, Any]) -> Any:
    value = read_path(path, data, context)
    if value is _MISSING:
        raise StatesError("States.Runtime", f"the path {path!r} matched nothing in the state's input")
    return value


def _split_arguments(text: str) -> list[str]:
    """An intrinsic's arguments: split at the commas outside quotes and outside a nested intrinsic."""
    arguments, current, quoted, depth = [], "", False, 0
    for char in text:
        if char == "'" and not current.endswith("\\"):
            quoted = not quoted
        if not quoted and char in "()":
            depth += 1 if char == "(" else -1
        if char == "," and not quoted and depth == 0:
            arguments.append(current.strip())
            current = ""
        else:
            current += char
    if current.strip():
        arguments.append(current.strip())
    return arguments


def _intrinsic(text: str, data: Any, context: Mapping[str, Any]) -> Any:
    name, _, rest = text.partition("(")
    arguments = [
        argument[1:-1].replace("\\'", "'")
        if argument.startswith("'")
        else _intrinsic(argument, data, context)
        if argument.startswith("States.")
        else _required(argument, data, context)
        for argument in _split_arguments(rest.removesuffix(")"))
    ]
    if name == "States.Array":
        return arguments
    if name == "States.JsonToString":
        return json.dumps(arguments[0], separators=(",", ":"))
    if name == "States.Format":
        template, values = str(arguments[0]), arguments[1:]
        for value in values:
            template = template.replace("{}", value if isinstance(value, str) else json.dumps(value), 1)
        return template
    raise DefinitionError(f"intrinsic {name} is not modelled")


def resolve(template: Any, data: Any, context: Mapping[str, Any]) -> Any:
    """A payload template (`Parameters`, `ResultSelector`) filled from the input and the context."""
    if isinstance(template, dict):
        out: dict[str, Any] = {}
        for key, value in template.items():
            if key.endswith(".$"):
                text = str(value)
                out[key[:-2]] = (
                    _intrinsic(text, data, context) if text.startswith("States.") else _required(text, data, context)
                )
            else:
                out[key] = resolve(value, data, context)
        return out
    if isinstance(template, list):
        return [resolve(item, data, context) for item in template]
    return template


def write_path(path: str | None, data: Any, result: Any) -> Any:
    """`ResultPath`: the result placed into the input (`$` replaces it; None discards the result)."""
    if path is None:
        return data
    if path == "$":
        return result
    keys = [match.group(1) for match in _STEP.finditer(path[1:])]
    out = json.loads(json.dumps(data)) if isinstance(data, dict) else {}
    target = out
    for key in keys[:-1]:
        target = target.setdefault(key, {})
    target[keys[-1]] = result
    return out


# -- validation -----------------------------------------------------------------------------------------------


def _check_choice(rule: Mapping[str, Any], where: str, top: bool) -> None:
    allowed = {"And", "Or", "Not", "Variable", *COMPARISONS, *PATH_COMPARISONS} | ({"Next"} if top else set())
    unknown = set(rule) - allowed
    if unknown:
        raise DefinitionError(f"{where}: choice field(s) {sorted(unknown)} are not modelled")
    for key in ("And", "Or"):
        for sub in rule.get(key, []):
            _check_choice(sub, where, False)
    if "Not" in rule:
        _check_choice(rule["Not"], where, False)


def _check_template(template: Any, where: str) -> None:
    if isinstance(template, dict):
        for key, value in template.items():
            if key.endswith(".$") and str(value).startswith("States."):
                for name in re.findall(r"(States\.[A-Za-z]+)\(", str(value)):  # nested ones too
                    if name not in INTRINSICS:
                        raise DefinitionError(f"{where}: intrinsic {name} is not modelled")
            else:
                _check_template(value, where)
    elif isinstance(template, list):
        for item in template:
            _check_template(item, where)


def validate(states: Mapping[str, Any], resources: set[str], path: str = "") -> None:
    """Refuse what is not modelled, naming the state and the field."""
    for name, state in states.items():
        where = f"state {path}{name}"
        kind = state.get("Type")
        if kind not in FIELDS:
            raise DefinitionError(f"{where}: state type {kind!r} is not modelled")
        unknown = set(state) - FIELDS[kind] - COMMON_FIELDS
        if unknown:
            raise DefinitionError(f"{where}: field(s) {sorted(unknown)} of a {kind} state are not modelled")
        for retry in state.get("Retry", []):
            if set(retry) - RETRY_FIELDS:
                raise DefinitionError(f"{where}: Retry field(s) {sorted(set(retry) - RETRY_FIELDS)} are not modelled")
        for catch in state.get("Catch", []):
            if set(catch) - CATCH_FIELDS:
                raise DefinitionError(f"{where}: Catch field(s) {sorted(set(catch) - CATCH_FIELDS)} are not modelled")
        if kind == "Task" and state["Resource"] not in resources:
            raise DefinitionError(f"{where}: resource {state['Resource']} is not modelled")
        if kind == "Choice":
            for rule in state["Choices"]:
                _check_choice(rule, where, True)
        if kind == "Parallel":
            if len(state["Branches"]) != 1:
                raise DefinitionError(f"{where}: a Parallel state of {len(state['Branches'])} branches is not modelled")
            validate(state["Branches"][0]["States"], resources, f"{path}{name}/")
        for key in ("Parameters", "ResultSelector"):
            _check_template(state.get(key), where)


# -- running --------------------------------------------------------------------------------------------------


@dataclass
class Outcome:
    """How an execution ended: SUCCEEDED with its output, or FAILED with an error and a cause."""

    status: str
    output: Any = None
    error: str | None = None
    cause: str | None = None


class Interpreter:
    """One definition, checked once, run by any number of executions."""

    def __init__(self, definition: Mapping[str, Any], integrations: Integrations, scheduler: Scheduler) -> None:
        validate(definition["States"], integrations.resources())
        self.definition = definition
        self._integrations = integrations
        self._scheduler = scheduler

    def run(self, execution_input: Any, context: ExecutionContext, rng: random.Random) -> Outcome:
        """Run an execution to its end (the caller is its actor; StopExecution kills it)."""
        try:
            output = self._run_states(self.definition, execution_input, context, rng)
        except StatesError as exc:
            return Outcome("FAILED", error=exc.error, cause=exc.cause)
        return Outcome("SUCCEEDED", output=output)

    def _run_states(self, machine: Mapping[str, Any], data: Any, context: ExecutionContext, rng: random.Random) -> Any:
        name = machine["StartAt"]
        while True:
            state = machine["States"][name]
            context.state_name, context.entered, context.retry_count = name, self._scheduler.now(), 0
            context.visits.append(name)
            if context.on_enter is not None:
                context.on_enter(name)
            state_input = data
            effective = self._input(state, data, context)
            kind = state["Type"]
            if kind == "Choice":
                name = self._choose(state, effective, context)
                continue
            if kind == "Fail":
                error = state.get("Error") or _text(state.get("ErrorPath"), effective, context) or "States.Fail"
                cause = state.get("Cause") or _text(state.get("CausePath"), effective, context) or ""
                raise StatesError(str(error), str(cause))
            if kind == "Succeed":
                return self._output(state, effective, context)
            try:
                result = self._act(state, effective, context, rng)
            except StatesError as exc:
                caught = self._catch(state, exc)
                if caught is None:
                    raise
                context.visits.append(f"catch:{name}->{caught['Next']}")
                data = write_path(caught.get("ResultPath", "$"), state_input, {"Error": exc.error, "Cause": exc.cause})
                name = caught["Next"]
                continue
            if kind in ("Task", "Parallel", "Pass"):
                if "ResultSelector" in state:
                    result = resolve(state["ResultSelector"], result, context.as_json())
                data = write_path(state.get("ResultPath", "$"), effective, result)
            else:
                data = effective
            data = self._output(state, data, context)
            if state.get("End"):
                return data
            name = state["Next"]

    def _input(self, state: Mapping[str, Any], data: Any, context: ExecutionContext) -> Any:
        path = state.get("InputPath", "$")
        return {} if path is None else _required(path, data, context.as_json())

    def _output(self, state: Mapping[str, Any], data: Any, context: ExecutionContext) -> Any:
        path = state.get("OutputPath", "$")
        return {} if path is None else _required(path, data, context.as_json())

    def _act(self, state: Mapping[str, Any], data: Any, context: ExecutionContext, rng: random.Random) -> Any:
        kind = state["Type"]
        if kind == "Pass":
            if "Parameters" in state:
                return resolve(state["Parameters"], data, context.as_json())
            return state.get("Result", data)
        if kind == "Wait":
            seconds = state.get("Seconds")
            if seconds is None:
                seconds = _required(state["SecondsPath"], data, context.as_json())
            if not _number(seconds) or seconds < 0:
                raise StatesError(
                    "States.Runtime", f"the Wait state's seconds are not a non-negative number: {seconds}"
                )
            self._scheduler.sleep(float(seconds))
            return data
        attempts: dict[int, int] = {}
        while True:
            try:
                if kind == "Parallel":
                    branch_input = (
                        resolve(state["Parameters"], data, context.as_json()) if "Parameters" in state else data
                    )
                    branch_context = context
                    return [self._run_states(state["Branches"][0], branch_input, branch_context, rng)]
                if state["Resource"].endswith(".waitForTaskToken"):
                    context.task_token = f"{context.execution_arn}#{len(context.visits)}"
                context.retry_count = sum(attempts.values())
                parameters = resolve(state.get("Parameters", {}), data, context.as_json())
                context.timeout_s = state.get("TimeoutSeconds")
                context.heartbeat_s = state.get("HeartbeatSeconds")
                return self._integrations.invoke(state["Resource"], parameters, context)
            except StatesError as exc:
                delay = self._retry_delay(state, exc, attempts, rng)
                if delay is None:
                    raise
                context.visits.append(f"retry:{context.state_name}")
                self._scheduler.sleep(delay)

    def _retry_delay(
        self, state: Mapping[str, Any], exc: StatesError, attempts: dict[int, int], rng: random.Random
    ) -> float | None:
        for index, retrier in enumerate(state.get("Retry", [])):
            if not _matches(retrier["ErrorEquals"], exc.error):
                continue
            done = attempts.get(index, 0)
            if done >= retrier.get("MaxAttempts", 3):
                return None
            attempts[index] = done + 1
            delay = retrier.get("IntervalSeconds", 1) * retrier.get("BackoffRate", 2.0) ** done
            delay = min(delay, retrier.get("MaxDelaySeconds", delay))
            return rng.uniform(0, delay) if retrier.get("JitterStrategy") == "FULL" else float(delay)
        return None

    def _catch(self, state: Mapping[str, Any], exc: StatesError) -> Mapping[str, Any] | None:
        catchers: list[Mapping[str, Any]] = state.get("Catch", [])
        return next((catcher for catcher in catchers if _matches(catcher["ErrorEquals"], exc.error)), None)

    def _choose(self, state: Mapping[str, Any], data: Any, context: ExecutionContext) -> str:
        for rule in state["Choices"]:
            if _holds(rule, data, context.as_json()):
                return str(rule["Next"])
        if "Default" not in state:
            raise StatesError("States.NoChoiceMatched", f"no choice of {context.state_name} matched")
        return str(state["Default"])


def _text(path: str | None, data: Any, context: ExecutionContext) -> str | None:
    if path is None:
        return None
    value = read_path(path, data, context.as_json())
    return None if value is _MISSING else str(value)


def _matches(names: list[str], error: str) -> bool:
    if error == "States.Runtime":
        return "States.Runtime" in names  # States.ALL does not catch it
    if error in names or "States.ALL" in names:
        return True
    return "States.TaskFailed" in names and error not in TASK_FAILED_EXCLUDES


def _holds(rule: Mapping[str, Any], data: Any, context: Mapping[str, Any]) -> bool:
    if "And" in rule:
        return all(_holds(sub, data, context) for sub in rule["And"])
    if "Or" in rule:
        return any(_holds(sub, data, context) for sub in rule["Or"])
    if "Not" in rule:
        return not _holds(rule["Not"], data, context)
    value = read_path(rule["Variable"], data, context)
    for operator, compare in COMPARISONS.items():
        if operator in rule:
            if operator != "IsPresent" and value is _MISSING:
                raise StatesError("States.Runtime", f"the choice variable {rule['Variable']} is not present")
            return compare(value, rule[operator])
    for operator, base in PATH_COMPARISONS.items():
        if operator in rule:
            if value is _MISSING:
                raise StatesError("States.Runtime", f"the choice variable {rule['Variable']} is not present")
            return COMPARISONS[base](value, _required(rule[operator], data, context))
    raise DefinitionError(f"choice rule {rule} has no modelled operator")
