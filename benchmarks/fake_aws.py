"""An in-process AWS for simulations on a virtual clock: SQS, DynamoDB and Step Functions, answered by
Python objects that take the boto3 clients' methods and arguments and raise botocore's `ClientError`
with the codes AWS sends. No network, no serialization: only the semantics the processor relies on.

- **SQS** (`FakeSqs`): standard queues with a visibility timeout, a receive count and a new receipt
  handle per receive, SQS's 12 h limit per receive, delays, redrive to a dead-letter queue after
  `maxReceiveCount` receives, and the errors of a stale handle (`InvalidParameterValue`, "expired"), a
  message not in flight (`MessageNotInflight`) and the 12 h limit ("beyond the limit"). A receive takes
  messages at random among the visible ones (SQS's standard queues promise no order).
- **DynamoDB** (`FakeDynamoDb`): items, conditional writes (`ConditionExpression`), update expressions
  (SET with `+`/`-`, REMOVE), transactions (cancelled with per-item reasons), `BatchGetItem`, and
  queries of the table's global secondary indexes (sorted by their range key, `Limit`, `Select=COUNT`).
  The expressions are parsed by a small parser of DynamoDB's grammar, the part the processor writes.
- **Step Functions** (`FakeStepFunctions`): executions by name (a second start of a name with the same
  input is the same execution), `DescribeExecution` and `StopExecution`. What an execution does is the
  simulation's (a `Workflow` callback), through these same fakes.

Every request is counted by service and operation (`Counter` in `FakeAws.calls`).
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import json
import math
import random
import re
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from botocore.exceptions import ClientError

from longjobs.engine.clock import Clock

SQS_MAX_VISIBILITY_S = 43_200
REGION = "us-east-1"
ACCOUNT = "123456789012"


def client_error(operation: str, code: str, message: str = "", *, status: int = 400, **extra: Any) -> ClientError:
    response: dict[str, Any] = {
        "Error": {"Code": code, "Message": message},
        "ResponseMetadata": {"HTTPStatusCode": status},
    }
    response.update(extra)
    return ClientError(response, operation)  # type: ignore[arg-type]


# -- DynamoDB expressions --------------------------------------------------------------------------------

_TOKEN = re.compile(
    r"\s*(?:(?P<name>#[A-Za-z0-9_]+)|(?P<value>:[A-Za-z0-9_]+)|(?P<op><>|<=|>=|=|<|>|\(|\)|,|\+|-)"
    r"|(?P<ident>[A-Za-z_][A-Za-z0-9_]*))"
)
_KEYWORDS = {"AND", "OR", "NOT", "SET", "REMOVE", "ADD", "DELETE", "BETWEEN"}


def _tokens(text: str) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    position = 0
    text = text.strip()
    while position < len(text):
        match = _TOKEN.match(text, position)
        if match is None or match.end() == position:
            raise ValueError(f"cannot parse expression at {text[position:]!r}")
        kind = match.lastgroup or ""
        token = match.group(kind)
        if kind == "ident" and token.upper() in _KEYWORDS:
            kind, token = "kw", token.upper()
        out.append((kind, token))
        position = match.end()
    return out


class _Parser:
    def __init__(self, text: str) -> None:
        self.tokens = _tokens(text)
        self.i = 0

    def peek(self) -> tuple[str, str] | None:
        return self.tokens[self.i] if self.i < len(self.tokens) else None

    def take(self) -> tuple[str, str]:
        token = self.tokens[self.i]
        self.i += 1
        return token

    def expect(self, token: str) -> None:
        got = self.take()
        if got[1] != token:
            raise ValueError(f"expected {token!r}, got {got[1]!r}")

    # condition := or
    def condition(self) -> Any:
        left = self.conjunction()
        while (p := self.peek()) is not None and p == ("kw", "OR"):
            self.take()
            left = ("or", left, self.conjunction())
        return left

    def conjunction(self) -> Any:
        left = self.negation()
        while (p := self.peek()) is not None and p == ("kw", "AND"):
            self.take()
            left = ("and", left, self.negation())
        return left

    def negation(self) -> Any:
        if self.peek() == ("kw", "NOT"):
            self.take()
            return ("not", self.negation())
        if self.peek() == ("op", "("):
            self.take()
            inner = self.condition()
            self.expect(")")
            return inner
        kind, token = self.peek() or ("", "")
        if kind == "ident" and token in ("attribute_exists", "attribute_not_exists", "contains", "begins_with"):
            self.take()
            self.expect("(")
            args = [self.operand()]
            while self.peek() == ("op", ","):
                self.take()
                args.append(self.operand())
            self.expect(")")
            return ("fn", token, args)
        left = self.operand()
        op = self.take()[1]
        if op == "BETWEEN":
            low = self.operand()
            self.expect("AND")
            return ("between", left, low, self.operand())
        return ("cmp", op, left, self.operand())

    def operand(self) -> Any:
        kind, token = self.take()
        if kind == "name":
            return ("path", token)
        if kind == "value":
            return ("value", token)
        if kind == "ident" and token == "size":
            self.expect("(")
            inner = self.operand()
            self.expect(")")
            return ("size", inner)
        if kind == "ident" and token == "if_not_exists":
            self.expect("(")
            path = self.operand()
            self.expect(",")
            default = self.operand()
            self.expect(")")
            return ("if_not_exists", path, default)
        if kind == "ident":
            return ("path", token)
        raise ValueError(f"unexpected {token!r}")

    def update(self) -> list[Any]:
        actions: list[Any] = []
        while self.peek() is not None:
            _, clause = self.take()
            while True:
                if clause == "SET":
                    path = self.operand()
                    self.expect("=")
                    value = self.operand()
                    if self.peek() in (("op", "+"), ("op", "-")):
                        op = self.take()[1]
                        value = ("arith", op, value, self.operand())
                    actions.append(("set", path, value))
                elif clause == "REMOVE":
                    actions.append(("remove", self.operand()))
                elif clause in ("ADD", "DELETE"):
                    path = self.operand()
                    actions.append((clause.lower(), path, self.operand()))
                else:
                    raise ValueError(f"unknown clause {clause!r}")
                if self.peek() == ("op", ","):
                    self.take()
                    continue
                break
        return actions


_parsed: dict[tuple[str, str], Any] = {}


def parse_condition(text: str) -> Any:
    key = ("c", text)
    if key not in _parsed:
        parser = _Parser(text)
        _parsed[key] = parser.condition()
        if parser.peek() is not None:
            raise ValueError(f"trailing tokens in {text!r}")
    return _parsed[key]


def parse_update(text: str) -> Any:
    key = ("u", text)
    if key not in _parsed:
        _parsed[key] = _Parser(text).update()
    return _parsed[key]


def _name(path: Any, names: Mapping[str, str]) -> str:
    token = path[1]
    return names[token] if token.startswith("#") else str(token)


def _resolve(node: Any, item: Mapping[str, Any], names: Mapping[str, str], values: Mapping[str, Any]) -> Any:
    kind = node[0]
    if kind == "path":
        return item.get(_name(node, names))
    if kind == "value":
        return values[node[1]]
    if kind == "size":
        inner = _resolve(node[1], item, names, values)
        if inner is None:
            return None
        [(_, raw)] = inner.items()
        return {"N": str(len(raw))}
    if kind == "if_not_exists":
        found = _resolve(node[1], item, names, values)
        return found if found is not None else _resolve(node[2], item, names, values)
    if kind == "arith":
        left = _resolve(node[2], item, names, values)
        right = _resolve(node[3], item, names, values)
        a, b = Decimal(left["N"]), Decimal(right["N"])
        return {"N": str(a + b if node[1] == "+" else a - b)}
    raise ValueError(f"cannot resolve {node!r}")


def _plain(value: Mapping[str, Any]) -> Any:
    [(kind, raw)] = value.items()
    return Decimal(raw) if kind == "N" else raw


def _compare(op: str, left: Any, right: Any) -> bool:
    if left is None or right is None:
        return op == "<>" and not (left is None and right is None)
    [(lk, _)] = left.items()
    [(rk, _)] = right.items()
    same = bool(lk == rk and _plain(left) == _plain(right))
    if op == "=":
        return same
    if op == "<>":
        return not same
    if lk != rk:
        return False
    a, b = _plain(left), _plain(right)
    result: bool = {"<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b}[op]
    return result


def evaluate(node: Any, item: Mapping[str, Any], names: Mapping[str, str], values: Mapping[str, Any]) -> bool:
    kind = node[0]
    if kind == "and":
        return evaluate(node[1], item, names, values) and evaluate(node[2], item, names, values)
    if kind == "or":
        return evaluate(node[1], item, names, values) or evaluate(node[2], item, names, values)
    if kind == "not":
        return not evaluate(node[1], item, names, values)
    if kind == "cmp":
        return _compare(node[1], _resolve(node[2], item, names, values), _resolve(node[3], item, names, values))
    if kind == "between":
        value = _resolve(node[1], item, names, values)
        low, high = _resolve(node[2], item, names, values), _resolve(node[3], item, names, values)
        return _compare(">=", value, low) and _compare("<=", value, high)
    if kind == "fn":
        name, args = node[1], node[2]
        if name == "attribute_exists":
            return _name(args[0], names) in item
        if name == "attribute_not_exists":
            return _name(args[0], names) not in item
        target = _resolve(args[0], item, names, values)
        operand = _resolve(args[1], item, names, values)
        if target is None:
            return False
        [(_, raw)] = target.items()
        needle = _plain(operand)
        if name == "contains":
            return needle in raw
        return isinstance(raw, str) and raw.startswith(str(needle))
    raise ValueError(f"cannot evaluate {node!r}")


def apply_update(
    actions: Sequence[Any], item: dict[str, Any], names: Mapping[str, str], values: Mapping[str, Any]
) -> None:
    for action in actions:
        if action[0] == "set":
            item[_name(action[1], names)] = _resolve(action[2], item, names, values)
        elif action[0] == "remove":
            item.pop(_name(action[1], names), None)
        else:
            raise ValueError(f"the fake does not apply {action[0]!r}")


# -- DynamoDB ----------------------------------------------------------------------------------------------


@dataclass
class _Index:
    hash_attr: str
    range_attr: str
    entries: dict[str, dict[str, Any]] = field(default_factory=dict)  # hash value -> {pk: item}


def _index_key(value: Mapping[str, Any]) -> str:
    [(kind, raw)] = value.items()
    return f"{kind}:{raw}"


class FakeDynamoDb:
    """One table (any name) with its global secondary indexes (from `CreateTable`-style arguments)."""

    def __init__(self, aws: FakeAws, definition: Mapping[str, Any]) -> None:
        self._aws = aws
        self.pk = definition["KeySchema"][0]["AttributeName"]
        self.items: dict[str, dict[str, Any]] = {}
        self.indexes: dict[str, _Index] = {}
        for index in definition.get("GlobalSecondaryIndexes", []):
            keys = {k["KeyType"]: k["AttributeName"] for k in index["KeySchema"]}
            self.indexes[index["IndexName"]] = _Index(keys["HASH"], keys["RANGE"])

    def _count(self, operation: str) -> None:
        self._aws.calls[f"dynamodb.{operation}"] += 1

    def _store(self, key: str, item: dict[str, Any] | None) -> None:
        old = self.items.get(key)
        for index in self.indexes.values():
            if old is not None and index.hash_attr in old:
                index.entries.get(_index_key(old[index.hash_attr]), {}).pop(key, None)
        if item is None:
            self.items.pop(key, None)
            return
        self.items[key] = item
        for index in self.indexes.values():
            if index.hash_attr in item and index.range_attr in item:
                index.entries.setdefault(_index_key(item[index.hash_attr]), {})[key] = item

    def _check(self, operation: str, item: Mapping[str, Any], request: Mapping[str, Any]) -> bool:
        condition = request.get("ConditionExpression")
        if not condition:
            return True
        return evaluate(
            parse_condition(condition),
            item,
            request.get("ExpressionAttributeNames", {}),
            request.get("ExpressionAttributeValues", {}),
        )

    def get_item(self, **request: Any) -> dict[str, Any]:
        self._count("GetItem")
        item = self.items.get(request["Key"][self.pk]["S"])
        return {"Item": dict(item)} if item is not None else {}

    def batch_get_item(self, **request: Any) -> dict[str, Any]:
        self._count("BatchGetItem")
        responses: dict[str, list[dict[str, Any]]] = {}
        for table, spec in request["RequestItems"].items():
            found = [self.items.get(key[self.pk]["S"]) for key in spec["Keys"]]
            responses[table] = [dict(item) for item in found if item is not None]
        return {"Responses": responses, "UnprocessedKeys": {}}

    def put_item(self, **request: Any) -> dict[str, Any]:
        self._count("PutItem")
        item = dict(request["Item"])
        key = item[self.pk]["S"]
        if not self._check("PutItem", self.items.get(key, {}), request):
            raise client_error("PutItem", "ConditionalCheckFailedException", "The conditional request failed")
        self._store(key, item)
        return {}

    def _updated(self, request: Mapping[str, Any]) -> tuple[str, dict[str, Any]] | None:
        key = request["Key"][self.pk]["S"]
        current = self.items.get(key, {})
        if not self._check("UpdateItem", current, request):
            return None
        item = dict(current) if current else dict(request["Key"])
        apply_update(
            parse_update(request["UpdateExpression"]),
            item,
            request.get("ExpressionAttributeNames", {}),
            request.get("ExpressionAttributeValues", {}),
        )
        return key, item

    def update_item(self, **request: Any) -> dict[str, Any]:
        self._count("UpdateItem")
        updated = self._updated(request)
        if updated is None:
            raise client_error("UpdateItem", "ConditionalCheckFailedException", "The conditional request failed")
        self._store(*updated)
        return {}

    def transact_write_items(self, **request: Any) -> dict[str, Any]:
        self._count("TransactWriteItems")
        results = [self._updated(entry["Update"]) for entry in request["TransactItems"]]
        if any(result is None for result in results):
            reasons = [{"Code": "ConditionalCheckFailed" if r is None else "None"} for r in results]
            raise client_error(
                "TransactWriteItems", "TransactionCanceledException", "cancelled", CancellationReasons=reasons
            )
        for result in results:
            assert result is not None
            self._store(*result)
        return {}

    def query(self, **request: Any) -> dict[str, Any]:
        self._count("Query")
        index = self.indexes[request["IndexName"]]
        names = request.get("ExpressionAttributeNames", {})
        values = request.get("ExpressionAttributeValues", {})
        condition = parse_condition(request["KeyConditionExpression"])
        hash_value = next(
            _resolve(node[3], {}, names, values)
            for node in _conjuncts(condition)
            if node[0] == "cmp" and node[1] == "=" and _name(node[2], names) == index.hash_attr
        )
        candidates = index.entries.get(_index_key(hash_value), {})
        low, high = _range_bounds(condition, index.range_attr, names, values)
        matched = [
            item
            for item in candidates.values()
            if low <= float(item[index.range_attr]["N"]) <= high and evaluate(condition, item, names, values)
        ]
        matched.sort(key=lambda item: (Decimal(item[index.range_attr]["N"]), item[self.pk]["S"]))
        if not request.get("ScanIndexForward", True):
            matched.reverse()
        if "ExclusiveStartKey" in request:
            start = request["ExclusiveStartKey"][self.pk]["S"]
            position = next((i for i, item in enumerate(matched) if item[self.pk]["S"] == start), len(matched))
            matched = matched[position + 1 :]
        last: dict[str, Any] | None = None
        if "Limit" in request and len(matched) > request["Limit"]:
            matched = matched[: request["Limit"]]  # DynamoDB limits the items read, before the filter
            last = {self.pk: matched[-1][self.pk], index.range_attr: matched[-1][index.range_attr]}
        if request.get("FilterExpression"):
            kept = parse_condition(request["FilterExpression"])
            matched = [item for item in matched if evaluate(kept, item, names, values)]
        page: dict[str, Any] = {"Count": len(matched), "ScannedCount": len(matched)}
        if last is not None:
            page["LastEvaluatedKey"] = last
        if request.get("Select") != "COUNT":
            page["Items"] = [dict(item) for item in matched]
        return page


def _range_bounds(
    condition: Any, range_attr: str, names: Mapping[str, str], values: Mapping[str, Any]
) -> tuple[float, float]:
    """Inclusive numeric bounds a key condition puts on the index's range key (a cheap prefilter before the
    exact evaluation; -inf..inf where it puts none)."""
    low, high = -math.inf, math.inf
    for node in _conjuncts(condition):
        if node[0] == "cmp" and node[2][0] == "path" and _name(node[2], names) == range_attr and node[3][0] == "value":
            bound = float(values[node[3][1]]["N"])
            if node[1] in ("<", "<="):
                high = min(high, bound)
            elif node[1] in (">", ">="):
                low = max(low, bound)
            elif node[1] == "=":
                low, high = max(low, bound), min(high, bound)
        elif node[0] == "between" and node[1][0] == "path" and _name(node[1], names) == range_attr:
            low = max(low, float(values[node[2][1]]["N"]))
            high = min(high, float(values[node[3][1]]["N"]))
    return low, high


def _conjuncts(node: Any) -> list[Any]:
    return _conjuncts(node[1]) + _conjuncts(node[2]) if node[0] == "and" else [node]


# -- SQS ---------------------------------------------------------------------------------------------------


@dataclass
class Message:
    message_id: str
    body: str
    attributes: dict[str, Any]
    sent_at: float
    visible_at: float
    job_key: str | None
    receive_count: int = 0
    handle: str | None = None
    received_at: float = 0.0
    deleted: bool = False


class FakeQueue:
    def __init__(self, name: str, *, visibility_timeout_s: int, clock: Clock, rng: random.Random) -> None:
        self.name = name
        self.url = f"https://sqs.{REGION}.amazonaws.com/{ACCOUNT}/{name}"
        self.arn = f"arn:aws:sqs:{REGION}:{ACCOUNT}:{name}"
        self.visibility_timeout_s = visibility_timeout_s
        self.redrive: tuple[FakeQueue, int] | None = None
        self.messages: dict[str, Message] = {}
        self._clock = clock
        self._rng = rng
        self._visible: list[Message] = []
        self._visible_index: dict[str, int] = {}
        self._hidden: list[tuple[float, int, str, int]] = []  # (visible_at, seq, message id, version)
        self._version: dict[str, int] = {}
        self._seq = itertools.count()
        self._delayed: set[str] = set()  # sent with a delay that has not run out, never received

    # visibility bookkeeping: a message is either in `_visible` or has a current entry in `_hidden`
    def _hide(self, message: Message, until: float) -> None:
        self._unlist(message)
        self._delayed.discard(message.message_id)
        message.visible_at = until
        version = self._version.get(message.message_id, 0) + 1
        self._version[message.message_id] = version
        heapq.heappush(self._hidden, (until, next(self._seq), message.message_id, version))

    def _unlist(self, message: Message) -> None:
        index = self._visible_index.pop(message.message_id, None)
        if index is None:
            return
        last = self._visible.pop()
        if last.message_id != message.message_id:
            self._visible[index] = last
            self._visible_index[last.message_id] = index

    def refresh(self) -> None:
        now = self._clock.now()
        while self._hidden and self._hidden[0][0] <= now:
            _, _, message_id, version = heapq.heappop(self._hidden)
            message = self.messages.get(message_id)
            if message is None or message.deleted or self._version.get(message_id) != version:
                continue
            self._delayed.discard(message_id)
            self._visible_index[message_id] = len(self._visible)
            self._visible.append(message)

    def next_visible_at(self) -> float | None:
        while self._hidden:
            at, _, message_id, version = self._hidden[0]
            message = self.messages.get(message_id)
            if message is None or message.deleted or self._version.get(message_id) != version:
                heapq.heappop(self._hidden)
                continue
            return at
        return None

    @property
    def visible_count(self) -> int:
        return len(self._visible)

    def add(self, message: Message) -> None:
        self.messages[message.message_id] = message
        if message.visible_at > self._clock.now():
            self._hide(message, message.visible_at)
            if message.receive_count == 0:
                self._delayed.add(message.message_id)
        else:
            self._visible_index[message.message_id] = len(self._visible)
            self._visible.append(message)

    def remove(self, message: Message) -> None:
        message.deleted = True
        self._unlist(message)
        self._delayed.discard(message.message_id)
        self.messages.pop(message.message_id, None)

    def take_visible(self, count: int) -> list[Message]:
        self.refresh()
        taken: list[Message] = []
        while self._visible and len(taken) < count:
            message = self._visible[self._rng.randrange(len(self._visible))]
            self._unlist(message)
            taken.append(message)
        return taken

    def hide(self, message: Message, until: float) -> None:
        self._hide(message, until)

    def counts(self) -> tuple[int, int, int]:
        """(visible, in flight, delayed)."""
        self.refresh()
        visible, delayed = len(self._visible), len(self._delayed)
        return visible, len(self.messages) - visible - delayed, delayed


class FakeSqs:
    """SQS's operations the processor calls, on `FakeQueue`s by URL."""

    def __init__(self, aws: FakeAws) -> None:
        self._aws = aws
        self.queues: dict[str, FakeQueue] = {}
        self._ids = itertools.count(1)
        self.on_receive: Callable[[FakeQueue, Message], None] | None = None
        self.on_dead_letter: Callable[[FakeQueue, Message], None] | None = None

    def _count(self, operation: str) -> None:
        self._aws.calls[f"sqs.{operation}"] += 1

    def create_queue(self, name: str, *, visibility_timeout_s: int) -> FakeQueue:
        queue = FakeQueue(name, visibility_timeout_s=visibility_timeout_s, clock=self._aws.clock, rng=self._aws.rng)
        self.queues[queue.url] = queue
        return queue

    def _queue(self, operation: str, url: str) -> FakeQueue:
        queue = self.queues.get(url)
        if queue is None:
            raise client_error(operation, "AWS.SimpleQueueService.NonExistentQueue", "The queue does not exist")
        return queue

    def put(self, queue: FakeQueue, body: str, attributes: Mapping[str, Any] | None = None, delay_s: int = 0) -> str:
        """A send, without counting it as a request (the producer's)."""
        now = self._aws.clock.now()
        message_id = f"m{next(self._ids):07d}-0000-4000-8000-000000000000"
        job_key = None
        with contextlib.suppress(ValueError, AttributeError):
            job_key = json.loads(body).get("job_id")
        queue.add(Message(message_id, body, dict(attributes or {}), now, now + delay_s, job_key))
        return message_id

    def send_message(self, **request: Any) -> dict[str, Any]:
        self._count("SendMessage")
        queue = self._queue("SendMessage", request["QueueUrl"])
        message_id = self.put(
            queue, request["MessageBody"], request.get("MessageAttributes"), int(request.get("DelaySeconds", 0))
        )
        if self.on_dead_letter is not None and queue.redrive is None and queue.name.endswith("dlq"):
            self.on_dead_letter(queue, queue.messages[message_id])
        return {"MessageId": message_id}

    def receive_message(self, **request: Any) -> dict[str, Any]:
        self._count("ReceiveMessage")
        queue = self._queue("ReceiveMessage", request["QueueUrl"])
        return {"Messages": self.receive(queue, int(request.get("MaxNumberOfMessages", 1)), request)}

    def receive(self, queue: FakeQueue, count: int, request: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
        """Receive up to `count` visible messages (the caller counts the request)."""
        now = self._aws.clock.now()
        vt = int((request or {}).get("VisibilityTimeout", queue.visibility_timeout_s))
        out: list[dict[str, Any]] = []
        while len(out) < count:
            taken = queue.take_visible(count - len(out))
            if not taken:
                break
            for message in taken:
                if queue.redrive is not None and message.receive_count >= queue.redrive[1]:
                    dead, _ = queue.redrive
                    queue.remove(message)
                    dead.add(Message(message.message_id, message.body, message.attributes, now, now, message.job_key))
                    if self.on_dead_letter is not None:
                        self.on_dead_letter(dead, message)
                    continue
                message.receive_count += 1
                message.handle = f"{message.message_id}#{message.receive_count}"
                message.received_at = now
                queue.hide(message, now + vt)
                self._aws.receives += 1
                if self.on_receive is not None:
                    self.on_receive(queue, message)
                out.append(
                    {
                        "MessageId": message.message_id,
                        "ReceiptHandle": message.handle,
                        "Body": message.body,
                        "Attributes": {"ApproximateReceiveCount": str(message.receive_count)},
                        "MessageAttributes": dict(message.attributes),
                    }
                )
        return out

    def _held(self, operation: str, queue: FakeQueue, handle: str) -> Message:
        message_id = handle.partition("#")[0]
        message = queue.messages.get(message_id)
        if message is None or message.deleted:
            raise client_error(operation, "ReceiptHandleIsInvalid", f"The input receipt handle {handle} is not valid")
        if message.handle != handle:
            raise client_error(
                operation,
                "InvalidParameterValue",
                f"Value {handle} for parameter ReceiptHandle is invalid. Reason: The receipt handle has expired.",
            )
        return message

    def _change(self, operation: str, queue: FakeQueue, handle: str, timeout: int) -> None:
        message = self._held(operation, queue, handle)
        now = self._aws.clock.now()
        if message.visible_at <= now:
            raise client_error(operation, "AWS.SimpleQueueService.MessageNotInflight", "Message not inflight")
        if now + timeout > message.received_at + SQS_MAX_VISIBILITY_S:
            raise client_error(
                operation,
                "InvalidParameterValue",
                f"Value {timeout} for parameter VisibilityTimeout is invalid. Reason: Total VisibilityTimeout for "
                "the message is beyond the limit [43200 seconds]",
            )
        queue.hide(message, now + timeout)

    def change_message_visibility(self, **request: Any) -> dict[str, Any]:
        self._count("ChangeMessageVisibility")
        queue = self._queue("ChangeMessageVisibility", request["QueueUrl"])
        queue.refresh()
        self._change("ChangeMessageVisibility", queue, request["ReceiptHandle"], int(request["VisibilityTimeout"]))
        return {}

    def change_message_visibility_batch(self, **request: Any) -> dict[str, Any]:
        self._count("ChangeMessageVisibilityBatch")
        queue = self._queue("ChangeMessageVisibilityBatch", request["QueueUrl"])
        queue.refresh()
        successful, failed = [], []
        for entry in request["Entries"]:
            try:
                self._change("ChangeMessageVisibility", queue, entry["ReceiptHandle"], int(entry["VisibilityTimeout"]))
            except ClientError as exc:
                error = exc.response["Error"]
                code = str(error["Code"]).removeprefix("AWS.SimpleQueueService.")
                failed.append({"Id": entry["Id"], "Code": code, "Message": error["Message"], "SenderFault": True})
            else:
                successful.append({"Id": entry["Id"]})
        return {"Successful": successful, "Failed": failed}

    def _delete(self, operation: str, queue: FakeQueue, handle: str) -> None:
        queue.remove(self._held(operation, queue, handle))

    def delete_message(self, **request: Any) -> dict[str, Any]:
        self._count("DeleteMessage")
        self._delete("DeleteMessage", self._queue("DeleteMessage", request["QueueUrl"]), request["ReceiptHandle"])
        return {}

    def delete_message_batch(self, **request: Any) -> dict[str, Any]:
        self._count("DeleteMessageBatch")
        queue = self._queue("DeleteMessageBatch", request["QueueUrl"])
        successful, failed = [], []
        for entry in request["Entries"]:
            try:
                self._delete("DeleteMessage", queue, entry["ReceiptHandle"])
            except ClientError as exc:
                failed.append({"Id": entry["Id"], "Code": exc.response["Error"]["Code"], "SenderFault": True})
            else:
                successful.append({"Id": entry["Id"]})
        return {"Successful": successful, "Failed": failed}

    def get_queue_attributes(self, **request: Any) -> dict[str, Any]:
        self._count("GetQueueAttributes")
        queue = self._queue("GetQueueAttributes", request["QueueUrl"])
        visible, in_flight, delayed = queue.counts()
        return {
            "Attributes": {
                "ApproximateNumberOfMessages": str(visible),
                "ApproximateNumberOfMessagesNotVisible": str(in_flight),
                "ApproximateNumberOfMessagesDelayed": str(delayed),
                "VisibilityTimeout": str(queue.visibility_timeout_s),
                "QueueArn": queue.arn,
            }
        }


# -- Step Functions ------------------------------------------------------------------------------------------


@dataclass
class Execution:
    arn: str
    name: str
    input: dict[str, Any]
    raw_input: str
    started: float
    status: str = "RUNNING"
    stopped: float | None = None
    error: str | None = None
    cause: str | None = None
    state: dict[str, Any] = field(default_factory=dict)  # the workflow model's own notes


class FakeStepFunctions:
    """Executions of one state machine; what each does is `workflow(execution)`, called at its start."""

    def __init__(self, aws: FakeAws, state_machine_arn: str) -> None:
        self._aws = aws
        self.state_machine_arn = state_machine_arn
        self.executions: dict[str, Execution] = {}
        self.on_start: Callable[[Execution], None] | None = None
        self.on_stop: Callable[[Execution], None] | None = None

    def _count(self, operation: str) -> None:
        self._aws.calls[f"stepfunctions.{operation}"] += 1

    def arn_of(self, name: str) -> str:
        parts = self.state_machine_arn.split(":")
        return ":".join([*parts[:5], "execution", parts[6], name])

    def start_execution(self, **request: Any) -> dict[str, Any]:
        self._count("StartExecution")
        name, raw = request["name"], request.get("input", "{}")
        arn = self.arn_of(name)
        existing = self.executions.get(arn)
        if existing is not None:
            if existing.raw_input != raw:
                raise client_error("StartExecution", "ExecutionAlreadyExists", f"Execution Already Exists: '{arn}'")
            return {"executionArn": arn, "startDate": existing.started}
        execution = Execution(arn, name, json.loads(raw), raw, self._aws.clock.now())
        self.executions[arn] = execution
        if self.on_start is not None:
            self.on_start(execution)
        return {"executionArn": arn, "startDate": execution.started}

    def describe_execution(self, **request: Any) -> dict[str, Any]:
        self._count("DescribeExecution")
        execution = self.executions.get(request["executionArn"])
        if execution is None:
            raise client_error("DescribeExecution", "ExecutionDoesNotExist", "Execution Does Not Exist")
        return {"executionArn": execution.arn, "name": execution.name, "status": execution.status}

    def stop_execution(self, **request: Any) -> dict[str, Any]:
        self._count("StopExecution")
        execution = self.executions.get(request["executionArn"])
        if execution is None:
            raise client_error("StopExecution", "ExecutionDoesNotExist", "Execution Does Not Exist")
        if execution.status == "RUNNING":
            self.end(execution, "ABORTED", request.get("error"), request.get("cause"))
        return {"stopDate": self._aws.clock.now()}

    def end(self, execution: Execution, status: str, error: str | None = None, cause: str | None = None) -> None:
        execution.status, execution.error, execution.cause = status, error, cause
        execution.stopped = self._aws.clock.now()
        if self.on_stop is not None:
            self.on_stop(execution)


class FakeAws:
    """The three services on one clock, with one request counter."""

    def __init__(self, clock: Clock, rng: random.Random, *, table: Mapping[str, Any], state_machine_arn: str) -> None:
        self.clock = clock
        self.rng = rng
        self.calls: Counter[str] = Counter()
        self.receives = 0  # messages handed out by ReceiveMessage
        self.sqs = FakeSqs(self)
        self.dynamodb = FakeDynamoDb(self, table)
        self.stepfunctions = FakeStepFunctions(self, state_machine_arn)

    @property
    def requests(self) -> int:
        return sum(self.calls.values())
