"""Admission's pure parts: a type's slots as read (accounting), taking one, and the delay estimate, on a
fake clock."""

from __future__ import annotations

import random
from typing import Any

import pytest

from longjobs.engine.admission import (
    Slots,
    TypeSlots,
    drain_time_s,
    expected_start_s,
    in_flight_target,
    mean_duration_s,
    slot_key,
    slot_type,
    waiting_delay_s,
)
from longjobs.engine.admission.admit import AdmitReport, publish
from longjobs.engine.admission.estimate import DELAY_STRETCH
from longjobs.engine.delivery.copies import PARKED_MESSAGE_MAX_BYTES, has_room, message_to_send, stored_message
from longjobs.engine.delivery.types import ADMISSION_ATTRIBUTE, Carried, Delivery
from longjobs.engine.lease.lock import Hold, Lock
from longjobs.sim.clock import FakeClock

TYPE = "backfill"


def held(index: int, arn: str, acquired_at: float, *, last: float | None = None) -> Lock:
    return Lock(slot_key(TYPE, index), arn, arn, acquired_at, held=True, last_duration_s=last)


def freed(index: int, acquired_at: float, released_at: float, *, last: float | None = None) -> Lock:
    return Lock(
        slot_key(TYPE, index), "m", "arn:old", acquired_at, held=False, released_at=released_at, last_duration_s=last
    )


def reading(limit: int, *locks: Lock, at: float) -> TypeSlots:
    return TypeSlots(TYPE, limit, {lock.key: lock for lock in locks}, at)


class FakeLocks:
    """The conditional take of `longjobs.engine.lease.lock.Locks`, in memory: a take succeeds on a free (or
    absent) slot or one already naming the same execution, as the condition expression says."""

    def __init__(self, items: dict[str, Lock] | None = None) -> None:
        self.items = dict(items or {})
        self.takes: list[str] = []

    def take(self, key: str, *, holder: str, execution_arn: str, now: float, **_: Any) -> bool:
        self.takes.append(key)
        found = self.items.get(key)
        if found is not None and found.held and found.execution_arn != execution_arn:
            return False
        self.items[key] = Lock(key, holder, execution_arn, now, held=True)
        return True

    def release(self, key: str, execution_arn: str, *, now: float) -> bool:
        found = self.items.get(key)
        if found is None or not found.held or found.execution_arn != execution_arn:
            return False
        self.items[key] = Lock(key, found.holder, execution_arn, found.acquired_at, held=False, released_at=now)
        return True


# -- keys -------------------------------------------------------------------------------------------


def test_slot_key_round_trips_a_type_name_with_hashes() -> None:
    assert slot_type(slot_key("a#b", 3)) == "a#b"
    assert slot_type("job#x") is None
    assert slot_type("slot#x#y") is None, "the index must be a number"


# -- accounting ---------------------------------------------------------------------------------------


def test_type_slots_count_held_free_and_absent_items() -> None:
    clock = FakeClock()
    now = clock.now()
    state = reading(4, held(0, "arn:a", now - 30), freed(1, now - 100, now - 10), at=now)

    assert state.used == 1
    assert state.free_keys == [slot_key(TYPE, 1), slot_key(TYPE, 2), slot_key(TYPE, 3)], "never used = free"
    assert state.holding_of("arn:a") == slot_key(TYPE, 0)
    assert state.holding_of("arn:b") is None
    clock.advance(20)
    assert state.ages(clock.now()) == [50.0]


def test_type_slots_ignore_items_beyond_a_lowered_limit() -> None:
    now = FakeClock().now()
    state = reading(2, held(0, "arn:a", now), held(5, "arn:z", now), at=now)

    assert state.used == 1, "slot 5 is not one of the two slots any more"
    assert state.free_keys == [slot_key(TYPE, 1)]


def test_type_slots_durations_are_the_last_holding_else_the_one_before() -> None:
    now = FakeClock().now()
    state = reading(
        3, freed(0, now - 100, now - 40), held(1, "arn:b", now - 5, last=300.0), held(2, "arn:c", now), at=now
    )

    assert sorted(state.durations()) == [60.0, 300.0], "slot 2 has no ended holding yet"


def test_type_slots_pick_a_free_slot_with_its_last_holding_time() -> None:
    now = FakeClock().now()
    state = reading(2, held(0, "arn:a", now), freed(1, now - 100, now - 40), at=now)

    assert state.pick(random.Random(1)) == Hold(slot_key(TYPE, 1), last_duration_s=60.0)


def test_type_slots_pick_none_when_every_slot_is_held() -> None:
    now = FakeClock().now()
    assert reading(2, held(0, "arn:a", now), held(1, "arn:b", now), at=now).pick(random.Random(1)) is None


def test_type_slots_pick_spreads_concurrent_takers_over_the_free_slots() -> None:
    """Takers pick at random, so two that read the same free slots rarely write the same item."""
    state = reading(8, at=FakeClock().now())
    picked = {hold.key for seed in range(40) if (hold := state.pick(random.Random(seed))) is not None}
    assert picked == set(state.keys)


def test_slots_release_only_frees_the_named_holder() -> None:
    now = FakeClock().now()
    locks = FakeLocks({slot_key(TYPE, 0): held(0, "arn:new", now)})
    slots = Slots(locks)  # type: ignore[arg-type]

    assert slots.release(slot_key(TYPE, 0), "arn:old", now=now) is False, "a late release of an older holder"
    assert locks.items[slot_key(TYPE, 0)].held
    assert slots.release(slot_key(TYPE, 0), "arn:new", now=now + 5) is True
    assert slots.release(slot_key(TYPE, 0), "arn:new", now=now + 6) is False, "released at most once"
    assert locks.items[slot_key(TYPE, 0)].held_for_s == 5.0


# -- the estimate -------------------------------------------------------------------------------------


def test_admission_mean_duration_is_unknown_before_any_holding_ended() -> None:
    now = FakeClock().now()
    assert mean_duration_s(reading(2, held(0, "arn:a", now - 10), at=now), now) is None


def test_admission_mean_duration_counts_running_ages_until_every_slot_has_a_duration() -> None:
    """The first holdings to end are the short ones: until each slot has ended one, the running holders'
    ages count too (time on test over the endings), so the mean is not biased short."""
    now = FakeClock().now()
    partial = reading(2, freed(0, now - 70, now - 60), held(1, "arn:b", now - 240), at=now)
    full = reading(2, freed(0, now - 70, now - 60), freed(1, now - 50, now - 20), at=now)

    assert mean_duration_s(partial, now) == pytest.approx((10 + 240) / 1)
    assert mean_duration_s(full, now) == pytest.approx((10 + 30) / 2)


def test_admission_expected_start_is_now_for_a_free_slot_then_one_slot_per_mean_over_n() -> None:
    now = FakeClock().now()
    # 4 slots, 3 held, every slot's last holding 600 s: a slot frees every 150 s on average.
    state = reading(
        4,
        held(0, "arn:a", now - 100, last=600.0),
        held(1, "arn:b", now - 200, last=600.0),
        held(2, "arn:c", now - 300, last=600.0),
        freed(3, now - 700, now - 100),
        at=now,
    )

    assert expected_start_s(state, now, 0) == 0.0, "one slot free: the first in line starts now"
    assert expected_start_s(state, now, 1) == pytest.approx(150.0)
    assert expected_start_s(state, now, 4) == pytest.approx(600.0)


def test_drain_time_is_when_the_last_of_the_backlog_can_be_expected_to_start() -> None:
    now = FakeClock().now()
    state = reading(
        4,
        held(0, "arn:a", now - 100, last=600.0),
        held(1, "arn:b", now - 200, last=600.0),
        held(2, "arn:c", now - 300, last=600.0),
        freed(3, now - 700, now - 100),
        at=now,
    )
    assert drain_time_s(state, now, 0) == 0.0, "nothing waits"
    assert drain_time_s(state, now, 1) == 0.0, "the one waiter takes the free slot"
    assert drain_time_s(state, now, 5) == pytest.approx(600.0), "the fifth waits for four slots to free"
    assert drain_time_s(state, now, 10_001) == pytest.approx(1_500_000.0), "10,001 waiters: about 17 days"
    assert drain_time_s(reading(2, held(0, "arn:a", now), at=now), now, 3) is None, "no duration known yet"


def test_admission_expected_start_is_unknown_past_the_free_slots_without_a_mean() -> None:
    now = FakeClock().now()
    state = reading(2, held(0, "arn:a", now), at=now)

    assert expected_start_s(state, now, 0) == 0.0
    assert expected_start_s(state, now, 1) is None


def test_admission_in_flight_target_is_what_the_horizon_can_start() -> None:
    now = FakeClock().now()
    state = reading(2, freed(0, now - 700, now - 100), held(1, "arn:b", now - 10, last=600.0), at=now)

    # a slot frees every 300 s, one is free now: 1 + 3600 * 2 / 600 within an hour
    assert in_flight_target(state, now, 3_600) == 1 + 12
    assert in_flight_target(reading(3, at=now), now, 3_600) == 6, "no mean yet: one per slot, plus the free"


def test_waiting_delay_stretches_the_estimate_and_adds_the_admitters_period() -> None:
    rng = random.Random(3)
    delays = [waiting_delay_s(600.0, waits=0, base_s=30, cap_s=10_000, slack_s=60, rng=rng) for _ in range(200)]

    low, high = DELAY_STRETCH
    assert min(delays) >= 600 * low + 60
    assert max(delays) <= 600 * high + 60 + 1
    assert len(set(delays)) > 50, "jittered: waiters with one estimate do not all return at once"


def test_waiting_delay_doubles_with_each_wait_up_to_the_cap() -> None:
    rng = random.Random(4)
    floors = [waiting_delay_s(0.0, waits=w, base_s=30, cap_s=7_260, slack_s=0, rng=rng) for w in range(12)]

    assert floors[:4] == [30, 60, 120, 240], "an estimate of 0 that keeps failing: the floor doubles"
    assert floors[-1] == 7_260 and max(floors) == 7_260


def test_waiting_delay_without_an_estimate_is_the_floor_jittered() -> None:
    rng = random.Random(5)
    delays = {waiting_delay_s(None, waits=1, base_s=30, cap_s=7_260, slack_s=60, rng=rng) for _ in range(50)}

    assert min(delays) >= 60 and max(delays) <= 75
    assert all(delay >= 1 for delay in delays)


class TypedRecorder:
    """A metrics sink that keeps each type's metrics with their dimension."""

    def __init__(self) -> None:
        self.typed: list[tuple[str, str, float, str]] = []

    def add_metric(self, name: str, unit: str, value: float) -> None:
        raise AssertionError(f"{name} published without its job_type")

    def add_type_metric(self, *, name: str, unit: str, value: float, job_type: str) -> None:
        self.typed.append((name, unit, value, job_type))


def test_admission_publish_reports_the_backlog_drain_time_when_known() -> None:
    sink = TypedRecorder()
    publish(sink, [AdmitReport("known", parked=40, drain_s=7_200.0), AdmitReport("unknown", parked=3)])
    drains = [(value, job_type) for name, unit, value, job_type in sink.typed if name == "BacklogDrainTime"]
    assert drains == [(7_200.0, "known")], "none for a type whose durations are not known yet"
    assert ("ParkedMessages", "Count", 40, "known") in sink.typed


def test_parked_message_round_trip_keeps_body_attributes_and_original() -> None:
    """A PARKED marker keeps the message as it came (binary attributes in base64, its admission attribute
    left out: each copy gets its own), so a fresh copy can be sent from the marker alone."""
    delivery = Delivery(
        message_id="copy-2",
        receipt_handle="h",
        body='{"job_id": "j"}',
        receive_count=1,
        source_arn="arn",
        message_attributes={
            "Team": {"DataType": "String", "StringValue": "data"},
            "Blob": {"DataType": "Binary", "BinaryValue": b"\x00\xff"},
            ADMISSION_ATTRIBUTE: {"DataType": "String", "StringValue": Carried(original_id="m-1").encode()},
        },
    )
    body, attributes, original = message_to_send(stored_message(delivery))
    assert body == '{"job_id": "j"}'
    assert attributes == {
        "Team": {"DataType": "String", "StringValue": "data"},
        "Blob": {"DataType": "Binary", "BinaryValue": b"\x00\xff"},
    }
    assert original == "m-1", "the producer's message id, carried through every copy"


@pytest.mark.parametrize(
    ("body_bytes", "attributes", "parkable"),
    [(10, 0, True), (10, 9, True), (10, 10, False), (PARKED_MESSAGE_MAX_BYTES, 0, False), (262_000, 0, False)],
    ids=[
        "small",
        "nine attributes",
        "no room for the admission attribute",
        "too large for a marker",
        "too large for SQS with the admission attribute",
    ],
)
def test_parked_message_needs_room_for_its_attribute_and_its_marker(
    body_bytes: int, attributes: int, parkable: bool
) -> None:
    delivery = Delivery(
        message_id="m",
        receipt_handle="h",
        body="x" * body_bytes,
        receive_count=1,
        source_arn="arn",
        message_attributes={f"A{i}": {"DataType": "String", "StringValue": "v"} for i in range(attributes)},
    )
    assert has_room(delivery, (), parked=True) is parkable
