"""DynamoDB's expression grammar, the part the processor writes: conditions and updates, parsed and
evaluated on items in DynamoDB's JSON shape."""

from __future__ import annotations

import operator
import re
from collections.abc import Callable, Mapping, Sequence
from decimal import Decimal
from typing import Any

_TOKEN = re.compile(
    r"\s*(?:(?P<name>#[A-Za-z0-9_]+)|(?P<value>:[A-Za-z0-9_]+)|(?P<op><>|<=|>=|=|<|>|\(|\)|,|\+|-)"
    r"|(?P<ident>[A-Za-z_][A-Za-z0-9_]*))"
)
_KEYWORDS = {"AND", "OR", "NOT", "SET", "REMOVE", "ADD", "DELETE", "BETWEEN"}
MISSING_OPERAND = "The provided expression refers to an attribute that does not exist in the item"


class ExpressionError(ValueError):
    """An update DynamoDB refuses for the item it meets (a `ValidationException`): an operand that names an
    attribute the item does not have."""


def _tokens(text: str) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    position = 0
    text = text.strip()
    while position < len(text):
        match = _TOKEN.match(text, position)
        if match is None or match.end() == position:
            raise ExpressionError(f"cannot parse expression at {text[position:]!r}")
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
            raise ExpressionError(f"expected {token!r}, got {got[1]!r}")

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
        raise ExpressionError(f"unexpected {token!r}")

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
                    raise ExpressionError(f"unknown clause {clause!r}")
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
        parsed = parser.condition()
        if parser.peek() is not None:
            raise ExpressionError(f"trailing tokens in {text!r}")
        _parsed[key] = parsed  # only a whole parse: a refused expression is refused every time
    return _parsed[key]


def parse_update(text: str) -> Any:
    key = ("u", text)
    if key not in _parsed:
        _parsed[key] = _Parser(text).update()
    return _parsed[key]


_NAME_PLACEHOLDER = re.compile(r"#[A-Za-z0-9_]+")
_VALUE_PLACEHOLDER = re.compile(r":[A-Za-z0-9_]+")
_placeholders: dict[str, tuple[frozenset[str], frozenset[str]]] = {}


def check_placeholders(expressions: Sequence[str | None], names: Mapping[str, str], values: Mapping[str, Any]) -> None:
    """DynamoDB's request validation of `#name` and `:value` placeholders: each one an expression uses must
    be defined, and each one defined must be used by one of the request's expressions."""
    used_names: set[str] = set()
    used_values: set[str] = set()
    for text in expressions:
        if not text:
            continue
        if text not in _placeholders:
            _placeholders[text] = (
                frozenset(_NAME_PLACEHOLDER.findall(text)),
                frozenset(_VALUE_PLACEHOLDER.findall(text)),
            )
        found_names, found_values = _placeholders[text]
        used_names |= found_names
        used_values |= found_values
    if undefined := sorted(used_names - names.keys()):
        raise ExpressionError(
            "Invalid expression: An expression attribute name used in the document path is not defined; "
            f"attribute name: {undefined[0]}"
        )
    if undefined := sorted(used_values - values.keys()):
        raise ExpressionError(
            f"Invalid expression: An expression attribute value used in expression is not defined; "
            f"attribute value: {undefined[0]}"
        )
    if unused := sorted(names.keys() - used_names):
        raise ExpressionError(
            f"Value provided in ExpressionAttributeNames unused in expressions: keys: {{{', '.join(unused)}}}"
        )
    if unused := sorted(values.keys() - used_values):
        raise ExpressionError(
            f"Value provided in ExpressionAttributeValues unused in expressions: keys: {{{', '.join(unused)}}}"
        )


def attribute_name(path: Any, names: Mapping[str, str]) -> str:
    token = path[1]
    return names[token] if token.startswith("#") else str(token)


def resolve(node: Any, item: Mapping[str, Any], names: Mapping[str, str], values: Mapping[str, Any]) -> Any:
    kind = node[0]
    if kind == "path":
        return item.get(attribute_name(node, names))
    if kind == "value":
        return values[node[1]]
    if kind == "size":
        inner = resolve(node[1], item, names, values)
        if inner is None:
            return None
        [(_, raw)] = inner.items()
        return {"N": str(len(raw))}
    if kind == "if_not_exists":
        found = resolve(node[1], item, names, values)
        return found if found is not None else resolve(node[2], item, names, values)
    if kind == "arith":
        left = resolve(node[2], item, names, values)
        right = resolve(node[3], item, names, values)
        if left is None or right is None:
            raise ExpressionError(MISSING_OPERAND)
        a, b = Decimal(left["N"]), Decimal(right["N"])
        return {"N": str(a + b if node[1] == "+" else a - b)}
    raise ValueError(f"cannot resolve {node!r}")


def _plain(value: Mapping[str, Any]) -> Any:
    [(kind, raw)] = value.items()
    return Decimal(raw) if kind == "N" else raw


_NUMBERS_KEPT = 1 << 16
_numbers: dict[str, Decimal] = {}  # a number's text -> its Decimal (the same numbers come back item after item)


def _decimal(raw: Any) -> Decimal:
    """`Decimal(raw)`, remembered for a text (a Decimal is immutable, so one serves every comparison)."""
    if type(raw) is not str:
        return Decimal(raw)
    number = _numbers.get(raw)
    if number is None:
        number = Decimal(raw)
        if len(_numbers) >= _NUMBERS_KEPT:
            _numbers.clear()
        _numbers[raw] = number
    return number


def _compare(op: str, left: Any, right: Any) -> bool:
    if left is None or right is None:
        return op == "<>" and not (left is None and right is None)
    [(lk, a)] = left.items()
    [(rk, b)] = right.items()
    if lk != rk:
        return op == "<>"  # values of two types are never equal, nor ordered
    if lk == "N":
        a, b = _decimal(a), _decimal(b)
    if op == "=":
        return bool(a == b)
    if op == "<>":
        return bool(a != b)
    if op == "<":
        return bool(a < b)
    if op == "<=":
        return bool(a <= b)
    if op == ">":
        return bool(a > b)
    if op == ">=":
        return bool(a >= b)
    result: bool = {"<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b}[op]  # any other operator: KeyError
    return result


def evaluate(node: Any, item: Mapping[str, Any], names: Mapping[str, str], values: Mapping[str, Any]) -> bool:
    return compiled(node)(item, names, values)


Evaluator = Callable[[Mapping[str, Any], Mapping[str, str], Mapping[str, Any]], bool]
_compiled: dict[int, tuple[Any, Evaluator]] = {}


def compiled(node: Any) -> Evaluator:
    """`node` as a function of (item, names, values), made once per parsed condition (the parser's answers
    are cached, so each condition's tree lives on): the same answers, and the same errors when it is
    evaluated, as a walk of the tree, without its dispatch on every item."""
    entry = _compiled.get(id(node))
    if entry is not None and entry[0] is node:
        return entry[1]
    fn = _compile(node)
    _compiled[id(node)] = (node, fn)
    return fn


def _compile(node: Any) -> Evaluator:
    kind = node[0]
    if kind == "and":
        first, second = _compile(node[1]), _compile(node[2])
        return lambda item, names, values: first(item, names, values) and second(item, names, values)
    if kind == "or":
        first, second = _compile(node[1]), _compile(node[2])
        return lambda item, names, values: first(item, names, values) or second(item, names, values)
    if kind == "not":
        inner = _compile(node[1])
        return lambda item, names, values: not inner(item, names, values)
    if kind == "cmp":
        op, left, right = node[1], node[2], node[3]
        if left[0] == "path" and right[0] == "value":
            token, value = left[1], right[1]
            if token.startswith("#"):
                return lambda item, names, values: _compare(op, item.get(names[token]), values[value])
            return lambda item, names, values: _compare(op, item.get(token), values[value])
        return lambda item, names, values: _compare(
            op, resolve(left, item, names, values), resolve(right, item, names, values)
        )
    return lambda item, names, values: _evaluate(node, item, names, values)


Test = Callable[[Mapping[str, Any]], bool]
_OPERATORS: dict[str, Callable[[Any, Any], bool]] = {
    "=": operator.eq,
    "<>": operator.ne,
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
}
_preparers: dict[int, tuple[Any, Callable[[Mapping[str, str], Mapping[str, Any]], Test]]] = {}


def prepared(node: Any, names: Mapping[str, str], values: Mapping[str, Any]) -> Test:
    """`node` with a request's names and values bound, as a test of items: for a query's many items. The
    same answers and errors as `evaluate`; a comparison of an attribute with a value converts the value
    once, not once an item."""
    entry = _preparers.get(id(node))
    if entry is None or entry[0] is not node:
        entry = (node, _preparer(node))
        _preparers[id(node)] = entry
    return entry[1](names, values)


def _preparer(node: Any) -> Callable[[Mapping[str, str], Mapping[str, Any]], Test]:
    kind = node[0]
    if kind in ("and", "or"):
        first, second = _preparer(node[1]), _preparer(node[2])
        if kind == "and":
            return lambda names, values: _both(first(names, values), second(names, values))
        return lambda names, values: _either(first(names, values), second(names, values))
    if kind == "not":
        inner = _preparer(node[1])
        return lambda names, values: _negated(inner(names, values))
    if kind == "cmp" and node[1] in _OPERATORS and node[2][0] == "path" and node[3][0] == "value":
        return lambda names, values: _comparison(node, names, values)
    evaluator = compiled(node)
    return lambda names, values: lambda item: evaluator(item, names, values)


def _both(first: Test, second: Test) -> Test:
    return lambda item: first(item) and second(item)


def _either(first: Test, second: Test) -> Test:
    return lambda item: first(item) or second(item)


def _negated(inner: Test) -> Test:
    return lambda item: not inner(item)


def _comparison(node: Any, names: Mapping[str, str], values: Mapping[str, Any]) -> Test:
    """`attribute op :value`, the value read and converted once. What is not a plain case (a name or value
    not defined, a value not of one type or not a valid number) is left to `evaluate`, errors and all."""
    op, token, placeholder = node[1], node[2][1], node[3][1]
    attr = names.get(token) if token.startswith("#") else token
    right = values.get(placeholder)
    if attr is None or type(right) is not dict or len(right) != 1:
        evaluator = compiled(node)
        return lambda item: evaluator(item, names, values)
    [(kind, raw)] = right.items()
    compare = _OPERATORS[op]
    unequal: bool = op == "<>"
    if kind == "N":
        numbers = _numbers
        try:
            number = _decimal(raw)
        except (TypeError, ValueError, ArithmeticError):
            evaluator = compiled(node)
            return lambda item: evaluator(item, names, values)

        def test_number(item: Mapping[str, Any]) -> bool:
            left = item.get(attr)
            if left is None:
                return unequal
            if type(left) is dict and len(left) == 1 and "N" in left:
                text = left["N"]
                found = numbers.get(text) if type(text) is str else None
                return bool(compare(found if found is not None else _decimal(text), number))
            return _compare(op, left, right)

        return test_number

    def test(item: Mapping[str, Any]) -> bool:
        left = item.get(attr)
        if left is None:
            return unequal
        if type(left) is dict and len(left) == 1 and kind in left:
            return bool(compare(left[kind], raw))
        return _compare(op, left, right)

    return test


def _evaluate(node: Any, item: Mapping[str, Any], names: Mapping[str, str], values: Mapping[str, Any]) -> bool:
    """The kinds `_compile` does not specialise: BETWEEN and the functions."""
    kind = node[0]
    if kind == "between":
        value = resolve(node[1], item, names, values)
        low, high = resolve(node[2], item, names, values), resolve(node[3], item, names, values)
        return _compare(">=", value, low) and _compare("<=", value, high)
    if kind == "fn":
        name, args = node[1], node[2]
        if name == "attribute_exists":
            return attribute_name(args[0], names) in item
        if name == "attribute_not_exists":
            return attribute_name(args[0], names) not in item
        target = resolve(args[0], item, names, values)
        operand = resolve(args[1], item, names, values)
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
    """Apply `actions` to `item`. Every operand is read from the item as it was before the update, as
    DynamoDB evaluates a multi-action expression: `SET a = :x, b = a` gives `b` the old `a`."""
    before = dict(item)
    assigned: list[tuple[str, Any]] = []
    for action in actions:
        if action[0] == "set":
            value = resolve(action[2], before, names, values)
            if value is None:
                raise ExpressionError(MISSING_OPERAND)
            assigned.append((attribute_name(action[1], names), value))
        elif action[0] != "remove":
            raise ValueError(f"the fake does not apply {action[0]!r}")
    for action in actions:
        if action[0] == "remove":
            item.pop(attribute_name(action[1], names), None)
    item.update(assigned)


def conjuncts(node: Any) -> list[Any]:
    """The terms of a condition's top-level ANDs."""
    return conjuncts(node[1]) + conjuncts(node[2]) if node[0] == "and" else [node]
