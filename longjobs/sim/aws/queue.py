"""An SQS queue's state in the simulated SQS: its messages, which are visible, hidden or delayed, their
retention and the queue's redrive. `FakeSqs` (`longjobs.sim.aws.sqs`) answers the API on these."""

from __future__ import annotations

import heapq
import itertools
import math
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from longjobs.engine.clock import Clock
from longjobs.engine.settings import SQS_MAX_RETENTION_S
from longjobs.sim.aws.base import ACCOUNT, REGION

__all__ = ["MAXIMUM_MESSAGE_SIZE", "FakeQueue", "Message"]


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
    group_id: str | None = None  # FIFO: its message group
    sequence: int = 0  # FIFO: its place in the queue (a group is handed out in this order)
    origin: str | None = None  # in a DLQ: the ARN of the queue whose redrive policy moved it there


MAXIMUM_MESSAGE_SIZE = 262_144
"""A queue's `MaximumMessageSize` unless set: SQS's default (the processor's queues keep it)."""


class FakeQueue:
    def __init__(
        self,
        name: str,
        *,
        visibility_timeout_s: int,
        clock: Clock,
        rng: random.Random,
        retention_s: float = SQS_MAX_RETENTION_S,
    ) -> None:
        self.name = name
        self.retention_s = retention_s
        self.maximum_message_size = MAXIMUM_MESSAGE_SIZE
        self.url = f"https://sqs.{REGION}.amazonaws.com/{ACCOUNT}/{name}"
        self.arn = f"arn:aws:sqs:{REGION}:{ACCOUNT}:{name}"
        self.visibility_timeout_s = visibility_timeout_s
        self.redrive: tuple[FakeQueue, int] | None = None
        self.fifo = name.endswith(".fifo")
        self.deduplicated: dict[str, tuple[float, str]] = {}  # FIFO: deduplication id -> (sent at, message id)
        self.messages: dict[str, Message] = {}
        self._clock = clock
        self._rng = rng
        self._visible: list[Message] = []
        self._visible_index: dict[str, int] = {}
        self._hidden: list[tuple[float, int, str, int]] = []  # (visible_at, seq, message id, version)
        self._version: dict[str, int] = {}
        self._seq = itertools.count()
        self._delayed: set[str] = set()  # sent with a delay that has not run out, never received
        self.on_change: Callable[[], None] | None = None  # told when a message comes, goes or changes visibility
        self.gone: dict[str, int] = {}  # message id -> receives it had when deleted or moved to the DLQ
        self._expiry: list[tuple[float, int, str]] = []  # (sent at + retention, seq, message id)
        self.on_expired: Callable[[FakeQueue, Message], None] | None = None  # told of each message SQS deleted

    # visibility bookkeeping: a message is either in `_visible` or has a current entry in `_hidden`
    def _hide(self, message: Message, until: float) -> None:
        self._unlist(message)
        self._delayed.discard(message.message_id)
        message.visible_at = until
        version = self._version.get(message.message_id, 0) + 1
        self._version[message.message_id] = version
        heapq.heappush(self._hidden, (until, next(self._seq), message.message_id, version))
        if self.on_change is not None:
            self.on_change()

    def _unlist(self, message: Message) -> None:
        index = self._visible_index.pop(message.message_id, None)
        if index is None:
            return
        last = self._visible.pop()
        if last.message_id != message.message_id:
            self._visible[index] = last
            self._visible_index[last.message_id] = index

    def expire(self) -> None:
        """Delete the messages whose retention has run out, visible or in flight: SQS keeps a message
        `MessageRetentionPeriod` from its send ("a message is deleted after the retention period
        regardless of whether it was received"; a standard queue's DLQ copy keeps its first send time)."""
        now = self._clock.now()
        while self._expiry and self._expiry[0][0] <= now:
            _, _, message_id = heapq.heappop(self._expiry)
            message = self.messages.get(message_id)
            if message is None or message.deleted:
                continue
            self.remove(message)
            if self.on_expired is not None:
                self.on_expired(self, message)

    @property
    def next_expiry(self) -> float:
        """When the next message may expire (infinity when none is kept)."""
        return self._expiry[0][0] if self._expiry else math.inf

    def refresh(self) -> None:
        now = self._clock.now()
        self.expire()
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
        heapq.heappush(self._expiry, (message.sent_at + self.retention_s, next(self._seq), message.message_id))
        if message.visible_at > self._clock.now():
            self._hide(message, message.visible_at)
            if message.receive_count == 0:
                self._delayed.add(message.message_id)
        else:
            self._visible_index[message.message_id] = len(self._visible)
            self._visible.append(message)
            if self.on_change is not None:
                self.on_change()

    def remove(self, message: Message) -> None:
        message.deleted = True
        self.gone[message.message_id] = message.receive_count
        self._unlist(message)
        self._delayed.discard(message.message_id)
        self.messages.pop(message.message_id, None)
        if self.on_change is not None:
            self.on_change()  # FIFO: its group may go on

    def take_visible(self, count: int) -> list[Message]:
        self.refresh()
        if self.fifo:
            return self._take_group_heads(count)
        taken: list[Message] = []
        while self._visible and len(taken) < count:
            message = self._visible[self._rng.randrange(len(self._visible))]
            self._unlist(message)
            taken.append(message)
        return taken

    def _take_group_heads(self, count: int) -> list[Message]:
        """FIFO: SQS hands out no message of a group while one of its messages is in flight, and then the
        group's head (the message sent first). Groups are taken in a random order (not modelled: several
        messages of one group in one receive)."""
        heads: dict[str | None, Message] = {}
        blocked: set[str | None] = set()
        for message in self.messages.values():
            if message.message_id not in self._visible_index:
                blocked.add(message.group_id)  # in flight (hidden after a receive)
            head = heads.get(message.group_id)
            if head is None or message.sequence < head.sequence:
                heads[message.group_id] = message
        ready = [
            head for group, head in sorted(heads.items(), key=lambda item: item[1].sequence) if group not in blocked
        ]
        self._rng.shuffle(ready)
        taken = ready[:count]
        for message in taken:
            self._unlist(message)
        return taken

    def hide(self, message: Message, until: float) -> None:
        self._hide(message, until)

    def oldest_visible(self) -> Message | None:
        """The visible message sent first (a move task takes them in that order)."""
        self.refresh()
        return min(self._visible, key=lambda message: (message.sent_at, message.sequence), default=None)

    def counts(self) -> tuple[int, int, int]:
        """(visible, in flight, delayed)."""
        self.refresh()
        visible, delayed = len(self._visible), len(self._delayed)
        return visible, len(self.messages) - visible - delayed, delayed
