"""DynamoDB: one table with its global secondary indexes, conditional writes and transactions."""

from __future__ import annotations

import bisect
import heapq
import itertools
import math
import operator
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from longjobs.sim.aws.base import Account, client_error
from longjobs.sim.aws.expressions import (
    ExpressionError,
    apply_update,
    attribute_name,
    check_placeholders,
    compiled,
    conjuncts,
    evaluate,
    parse_condition,
    parse_update,
    prepared,
    resolve,
)


@dataclass(frozen=True)
class IndexLag:
    """How long a write takes to reach the global secondary indexes: a delay drawn from `rng` for each
    write, uniform up to `max_s`. AWS propagates a table's changes to its global secondary indexes
    asynchronously, "within a fraction of a second" under normal conditions, so an index query may miss
    a write that just landed or still show an item as it was
    (https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/GSI.html, "Synchronizing data between
    tables and global secondary indexes"). The writes of one item reach the index in their order."""

    max_s: float
    rng: random.Random


class _Partition:
    """The items of one hash value of an index, kept in the order a query reads them: by the range key's
    number, then the table's key (`order`, with `numbers` the range keys as floats and `rows` the items, in
    step), kept as items are written: a query reads a slice of it instead of sorting the partition. An item
    whose range key is not a plain number (not `{"N": ...}` alone, or NaN) has no place in that order: it
    goes to `irregular`, and while any is there a query of the partition reads every item (`items`, in the
    order written) and sorts its matches, so it answers, or fails, as a sort of the whole partition does."""

    __slots__ = ("irregular", "items", "keys", "numbers", "order", "rows")

    def __init__(self) -> None:
        self.items: dict[str, dict[str, Any]] = {}  # pk -> item, in the order written
        self.keys: dict[str, tuple[Decimal, str]] = {}  # pk -> its place in `order`
        self.order: list[tuple[Decimal, str]] = []  # (range key, pk), sorted
        self.numbers: list[float] = []  # the range keys as floats, in `order`'s order (hence sorted too)
        self.rows: list[dict[str, Any]] = []  # the items, in `order`'s order
        self.irregular: set[str] = set()

    def add(self, key: str, item: dict[str, Any], range_attr: str) -> None:
        self.items[key] = item
        value = item[range_attr]
        try:
            raw = value["N"]
            number, exact = float(raw), Decimal(raw)
        except (KeyError, TypeError, ValueError, ArithmeticError):
            self.irregular.add(key)
            return
        if len(value) != 1 or exact.is_nan():
            self.irregular.add(key)
            return
        place = (exact, key)
        position = bisect.bisect_left(self.order, place)
        self.order.insert(position, place)
        self.numbers.insert(position, number)
        self.rows.insert(position, item)
        self.keys[key] = place

    def discard(self, key: str) -> None:
        if self.items.pop(key, None) is None:
            return
        place = self.keys.pop(key, None)
        if place is None:
            self.irregular.discard(key)
            return
        position = bisect.bisect_left(self.order, place)
        del self.order[position], self.numbers[position], self.rows[position]


@dataclass
class _Index:
    hash_attr: str
    range_attr: str
    entries: dict[str, _Partition] = field(default_factory=dict)  # hash value -> its items


_EXPRESSION_FIELDS = (
    "ConditionExpression",
    "UpdateExpression",
    "KeyConditionExpression",
    "FilterExpression",
    "ProjectionExpression",
)


def _index_key(value: Mapping[str, Any]) -> str:
    [(kind, raw)] = value.items()
    return f"{kind}:{raw}"


class FakeDynamoDb:
    """One table (any name) with its global secondary indexes (from `CreateTable`-style arguments)."""

    def __init__(self, aws: Account, definition: Mapping[str, Any], *, index_lag: IndexLag | None = None) -> None:
        self._aws = aws
        self.pk = definition["KeySchema"][0]["AttributeName"]
        self.items: dict[str, dict[str, Any]] = {}
        self.indexes: dict[str, _Index] = {}
        self._index_lag = index_lag
        self._indexed: dict[str, dict[str, Any]] = {}  # each item as the indexes have it
        self._propagating: list[tuple[float, int, str, dict[str, Any] | None]] = []  # (reaches at, order, key, item)
        self._reaches_at: dict[str, float] = {}  # the last write of each item reaches the indexes then
        self._order = itertools.count()  # ties in time reach the indexes in the order written
        self.on_store: Callable[[str, dict[str, Any] | None], None] | None = None  # told of every write
        for index in definition.get("GlobalSecondaryIndexes", []):
            keys = {k["KeyType"]: k["AttributeName"] for k in index["KeySchema"]}
            self.indexes[index["IndexName"]] = _Index(keys["HASH"], keys["RANGE"])

    def _count(self, operation: str) -> None:
        self._aws.calls[f"dynamodb.{operation}"] += 1

    def _store(self, key: str, item: dict[str, Any] | None) -> None:
        if item is None:
            self.items.pop(key, None)
        else:
            self.items[key] = item
        if self._index_lag is None:
            self._index_store(key, item)
        else:
            now = self._aws.clock.now()
            reaches_at = max(
                now + self._index_lag.rng.uniform(0, self._index_lag.max_s), self._reaches_at.get(key, now)
            )
            self._reaches_at[key] = reaches_at
            heapq.heappush(self._propagating, (reaches_at, next(self._order), key, item))
        if self.on_store is not None:
            self.on_store(key, item)

    def _propagate(self) -> None:
        """The writes that have reached the indexes by now, applied to them in order."""
        now = self._aws.clock.now()
        while self._propagating and self._propagating[0][0] <= now:
            _, _, key, item = heapq.heappop(self._propagating)
            self._index_store(key, item)

    def _index_store(self, key: str, item: dict[str, Any] | None) -> None:
        old = self._indexed.get(key)
        for index in self.indexes.values():
            if old is not None and index.hash_attr in old:
                partition = index.entries.get(_index_key(old[index.hash_attr]))
                if partition is not None:
                    partition.discard(key)
        if item is None:
            self._indexed.pop(key, None)
            return
        self._indexed[key] = item
        for index in self.indexes.values():
            if index.hash_attr in item and index.range_attr in item:
                hash_key = _index_key(item[index.hash_attr])
                partition = index.entries.get(hash_key)
                if partition is None:
                    partition = index.entries[hash_key] = _Partition()
                partition.add(key, item, index.range_attr)

    def _check(self, operation: str, item: Mapping[str, Any], request: Mapping[str, Any]) -> bool:
        condition = request.get("ConditionExpression")
        if not condition:
            return True
        return compiled(parse_condition(condition))(
            item,
            request.get("ExpressionAttributeNames", {}),
            request.get("ExpressionAttributeValues", {}),
        )

    def _validate(self, operation: str, request: Mapping[str, Any]) -> None:
        """DynamoDB's validation of a request's expressions, before it reads anything: placeholders defined
        and used, and no update of the table's key."""
        try:
            check_placeholders(
                [request.get(field) for field in _EXPRESSION_FIELDS],
                request.get("ExpressionAttributeNames", {}),
                request.get("ExpressionAttributeValues", {}),
            )
        except ExpressionError as exc:
            raise client_error(operation, "ValidationException", str(exc)) from None
        if "UpdateExpression" in request:
            names = request.get("ExpressionAttributeNames", {})
            if any(attribute_name(action[1], names) == self.pk for action in parse_update(request["UpdateExpression"])):
                raise client_error(
                    operation,
                    "ValidationException",
                    f"One or more parameter values were invalid: Cannot update attribute {self.pk}. "
                    "This attribute is part of the key",
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
        self._validate("PutItem", request)
        item = dict(request["Item"])
        key = item[self.pk]["S"]
        try:
            met = self._check("PutItem", self.items.get(key, {}), request)
        except ExpressionError as exc:
            raise client_error("PutItem", "ValidationException", str(exc)) from None
        if not met:
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
        self._validate("UpdateItem", request)
        try:
            updated = self._updated(request)
        except ExpressionError as exc:
            raise client_error("UpdateItem", "ValidationException", str(exc)) from None
        if updated is None:
            raise client_error("UpdateItem", "ConditionalCheckFailedException", "The conditional request failed")
        self._store(*updated)
        return {}

    def transact_write_items(self, **request: Any) -> dict[str, Any]:
        """All the actions or none (`Put`, `Update`, `ConditionCheck`). DynamoDB refuses two actions on
        one item outright (ValidationException), and cancels the whole transaction when any action fails,
        with one reason per action in request order: `None` for the actions that did not fail."""
        self._count("TransactWriteItems")
        actions = [next(iter(action.items())) for action in request["TransactItems"]]
        for _, entry in actions:
            self._validate("TransactWriteItems", entry)
        keys = [(entry["Item"] if kind == "Put" else entry["Key"])[self.pk]["S"] for kind, entry in actions]
        if len(set(keys)) < len(keys):
            raise client_error(
                "TransactWriteItems",
                "ValidationException",
                "Transaction request cannot include multiple operations on one item",
            )
        results: list[tuple[str, dict[str, Any]] | None] = []
        reasons: list[dict[str, str]] = []
        writes: list[tuple[str, dict[str, Any]]] = []
        for (kind, entry), key in zip(actions, keys, strict=True):
            try:
                result = self._transact_action(kind, entry, key)
            except ExpressionError as exc:
                results.append(None)
                reasons.append({"Code": "ValidationError", "Message": str(exc)})
                continue
            results.append(result)
            if result is None:
                reasons.append({"Code": "ConditionalCheckFailed", "Message": "The conditional request failed"})
            else:
                reasons.append({"Code": "None"})
                if kind != "ConditionCheck":
                    writes.append(result)
        if any(result is None for result in results):
            codes = ", ".join(reason["Code"] for reason in reasons)
            raise client_error(
                "TransactWriteItems",
                "TransactionCanceledException",
                f"Transaction cancelled, please refer cancellation reasons for specific reasons [{codes}]",
                CancellationReasons=reasons,
            )
        for write in writes:
            self._store(*write)
        return {}

    def _transact_action(self, kind: str, entry: Mapping[str, Any], key: str) -> tuple[str, dict[str, Any]] | None:
        """One action of a transaction, checked and computed (not stored): the item it writes, else None
        when its condition failed."""
        if kind == "Update":
            return self._updated(entry)
        current = self.items.get(key, {})
        if not self._check(kind, current, entry):
            return None
        if kind == "Put":
            return key, dict(entry["Item"])
        if kind == "ConditionCheck":
            return key, current
        raise ExpressionError(f"unmodelled transaction action {kind}")

    def query(self, **request: Any) -> dict[str, Any]:
        self._count("Query")
        self._validate("Query", request)
        self._propagate()
        index = self.indexes[request["IndexName"]]
        names = request.get("ExpressionAttributeNames", {})
        values = request.get("ExpressionAttributeValues", {})
        condition = parse_condition(request["KeyConditionExpression"])
        hash_value = next(
            resolve(node[3], {}, names, values)
            for node in conjuncts(condition)
            if node[0] == "cmp" and node[1] == "=" and attribute_name(node[2], names) == index.hash_attr
        )
        partition = index.entries.get(_index_key(hash_value))
        low, high = _range_bounds(condition, index.range_attr, names, values)
        if partition is not None and partition.irregular:
            matched = self._matched_by_scan(request, partition, condition, low, high)
        else:
            matched = self._matched_in_order(request, index, partition, condition, low, high)
        last: dict[str, Any] | None = None
        if "Limit" in request and len(matched) > request["Limit"]:
            matched = matched[: request["Limit"]]  # DynamoDB limits the items read, before the filter
            # An index's key for paging: the table's key and the index's own (hash and range).
            last = {attr: matched[-1][attr] for attr in (self.pk, index.hash_attr, index.range_attr)}
        scanned = len(matched)  # ScannedCount: the items read, before the filter
        if request.get("FilterExpression"):
            kept = prepared(parse_condition(request["FilterExpression"]), names, values)
            matched = [item for item in matched if kept(item)]
        page: dict[str, Any] = {"Count": len(matched), "ScannedCount": scanned}
        if last is not None:
            page["LastEvaluatedKey"] = last
        if request.get("Select") != "COUNT":
            page["Items"] = [dict(item) for item in matched]
        return page

    def _matched_in_order(
        self,
        request: Mapping[str, Any],
        index: _Index,
        partition: _Partition | None,
        condition: Any,
        low: float,
        high: float,
    ) -> list[dict[str, Any]]:
        """The items a query reads, in its order, from the first after `ExclusiveStartKey` on: those of the
        partition whose range key is within the key condition's bounds (a slice of its order) and that meet
        the condition, no more than one past `Limit` (all its caller keeps of them, to know there are more)."""
        if partition is None:
            partition = _Partition()  # nothing to read (its ExclusiveStartKey is read all the same)
        names = request.get("ExpressionAttributeNames", {})
        values = request.get("ExpressionAttributeValues", {})
        rows = partition.rows
        exact = _exact_slice(condition, index, partition, names, values)
        if exact is not None:
            first, end = exact
            meets: Callable[[Mapping[str, Any]], bool] = _always
        else:
            first = bisect.bisect_left(partition.numbers, low)
            end = bisect.bisect_right(partition.numbers, high)
            meets = prepared(condition, names, values)
        forward = request.get("ScanIndexForward", True)
        positions = range(first, end) if forward else range(end - 1, first - 1, -1)
        if "ExclusiveStartKey" in request:
            start = request["ExclusiveStartKey"][self.pk]["S"]
            place = partition.keys.get(start)
            if place is None:
                return []  # not an item the query matches: nothing after it
            position = bisect.bisect_left(partition.order, place)
            if not (first <= position < end and meets(rows[position])):
                return []
            positions = range(position + 1, end) if forward else range(position - 1, first - 1, -1)
        limit = request.get("Limit")
        enough = limit + 1 if isinstance(limit, int) and limit >= 0 else None
        if meets is _always:  # every item in the slice matches: the slice itself
            if enough is not None:
                positions = positions[:enough]
            if positions.step == 1:
                return rows[positions.start : positions.stop]
            return rows[positions.stop + 1 : positions.start + 1][::-1]
        matched: list[dict[str, Any]] = []
        for position in positions:
            item = rows[position]
            if meets(item):
                matched.append(item)
                if enough is not None and len(matched) >= enough:
                    break
        return matched

    def _matched_by_scan(
        self, request: Mapping[str, Any], partition: _Partition, condition: Any, low: float, high: float
    ) -> list[dict[str, Any]]:
        """`_matched_in_order` for a partition that holds an item whose range key is not a number: every
        item read, matched and sorted (which then raises as DynamoDB's order cannot be had)."""
        names = request.get("ExpressionAttributeNames", {})
        values = request.get("ExpressionAttributeValues", {})
        range_attr = self.indexes[request["IndexName"]].range_attr
        matched = [
            item
            for item in partition.items.values()
            if low <= float(item[range_attr]["N"]) <= high and evaluate(condition, item, names, values)
        ]
        matched.sort(key=lambda item: (Decimal(item[range_attr]["N"]), item[self.pk]["S"]))
        if not request.get("ScanIndexForward", True):
            matched.reverse()
        if "ExclusiveStartKey" in request:
            start = request["ExclusiveStartKey"][self.pk]["S"]
            position = next((i for i, item in enumerate(matched) if item[self.pk]["S"] == start), len(matched))
            matched = matched[position + 1 :]
        return matched


def _always(item: Mapping[str, Any]) -> bool:
    return True


def _number(value: Any) -> Decimal | None:
    """The number of a `{"N": ...}` value, None for any other value or NaN."""
    if type(value) is not dict or len(value) != 1 or "N" not in value:
        return None
    try:
        number = Decimal(value["N"])
    except (TypeError, ValueError, ArithmeticError):
        return None
    return None if number.is_nan() else number


_RANGE_KEY = operator.itemgetter(0)


def _exact_slice(
    condition: Any, index: _Index, partition: _Partition, names: Mapping[str, str], values: Mapping[str, Any]
) -> tuple[int, int] | None:
    """The positions of `partition`'s order that meet a key condition made of the one `hash = :value` (the
    partition's own value: every item of it meets that) and comparisons or BETWEENs of the range key with
    numbers: every item from `first` to `end` meets it and no other does, as the order is the range key's.
    None for any other condition (each item is then tested)."""
    order, first, end = partition.order, 0, len(partition.order)
    hashed = False

    def attribute(path: Any) -> str | None:
        if path[0] != "path":
            return None
        token: str = path[1]
        return names.get(token) if token.startswith("#") else token

    for node in conjuncts(condition):
        if node[0] == "cmp" and node[3][0] == "value":
            attr, op, value = attribute(node[2]), node[1], values.get(node[3][1])
            if attr == index.hash_attr and op == "=" and not hashed:
                if type(value) is not dict or len(value) != 1:
                    return None
                [(kind, raw)] = value.items()
                if kind not in ("S", "N") or type(raw) is not str or (kind == "N" and _number(value) is None):
                    return None
                hashed = True
                continue
            bound = _number(value)
            if attr != index.range_attr or bound is None:
                return None
            if op in ("<", "<=", "="):
                cut = bisect.bisect_left if op == "<" else bisect.bisect_right
                end = min(end, cut(order, bound, key=_RANGE_KEY))
            if op in (">", ">=", "="):
                cut = bisect.bisect_right if op == ">" else bisect.bisect_left
                first = max(first, cut(order, bound, key=_RANGE_KEY))
            if op not in ("<", "<=", "=", ">", ">="):
                return None
        elif node[0] == "between" and node[2][0] == "value" and node[3][0] == "value":
            low, high = _number(values.get(node[2][1])), _number(values.get(node[3][1]))
            if attribute(node[1]) != index.range_attr or low is None or high is None:
                return None
            first = max(first, bisect.bisect_left(order, low, key=_RANGE_KEY))
            end = min(end, bisect.bisect_right(order, high, key=_RANGE_KEY))
        else:
            return None
    return (first, max(first, end)) if hashed else None


def _range_bounds(
    condition: Any, range_attr: str, names: Mapping[str, str], values: Mapping[str, Any]
) -> tuple[float, float]:
    """Inclusive numeric bounds a key condition puts on the index's range key (a cheap prefilter before the
    exact evaluation; -inf..inf where it puts none)."""
    low, high = -math.inf, math.inf
    for node in conjuncts(condition):
        if (
            node[0] == "cmp"
            and node[2][0] == "path"
            and attribute_name(node[2], names) == range_attr
            and node[3][0] == "value"
        ):
            bound = float(values[node[3][1]]["N"])
            if node[1] in ("<", "<="):
                high = min(high, bound)
            elif node[1] in (">", ">="):
                low = max(low, bound)
            elif node[1] == "=":
                low, high = max(low, bound), min(high, bound)
        elif node[0] == "between" and node[1][0] == "path" and attribute_name(node[1], names) == range_attr:
            low = max(low, float(values[node[2][1]]["N"]))
            high = min(high, float(values[node[3][1]]["N"]))
    return low, high
