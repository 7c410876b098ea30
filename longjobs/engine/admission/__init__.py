"""Admission control per job type: at most `max_concurrency` executions of a type at once.

An attempt of a limited type takes one of the type's slots with its lease and job lock, in one
transaction, before it starts; every way it ends releases the slot (with its lease), conditional on the
execution that holds it. A message that finds its type full is not an attempt and is not started:

- **Waits in flight** when it can be expected to run within `admission_horizon_s`: the message stays on
  its queue, hidden by a visibility delay estimated from when a slot frees (`estimate`); its lease is
  WAITING and sits in the `waiting` index by its place in line.
- **Is parked** otherwise (`parking`): copied to the type's waiting queue, a PARKED marker written on its
  lease first, and acknowledged. Nothing receives a waiting queue but admission, and only what can be
  expected to run within the horizon, so a parked message costs no receive while it waits.

Whoever finds a free slot gives it to the longest-waiting message first (`line`, `admit`): an admission
pass after every extender run and on every execution end the watcher hears of admits the WAITING
messages in place, oldest first (their lease becomes the ACTIVE lease of an attempt on the receive that
holds them), then unparks what the horizon can take; the receiver, for a message that finds a free
slot, first admits the WAITING messages that waited longer, and a new arrival lets parked ones go first.

The modules, by role:

- `slots`: the type's N slots, lock items `slot#<type>#<i>` held by one execution each (the job lock's
  mechanism, N times). Taken with a conditional write before the execution starts, released on every
  way it ends, a stale holding freed once its execution is seen not running.
- `estimate`: when a waiting message can be expected to run, from the slots' holders and durations.

- `readings`: what admission reads of a type (its slots, its waiting counts) and the bounds of a wait.
- `line`: a message's place in its type's line: claim a slot behind those waiting longer, or wait or park.
- `parking`: the waiting queues: park, send a copy again, claim a copy's run, unpark.
- `admit`: admission passes (in place, then unparking) and the sweep of stale slots.

Admission sits below the receiver's entry point: it calls `receive` only through the `handle` its
caller passes (an unparked message is handled as the receiver handles any).
"""

from __future__ import annotations

from longjobs.engine.admission.estimate import (
    drain_time_s,
    expected_start_s,
    in_flight_target,
    mean_duration_s,
    waiting_delay_s,
)
from longjobs.engine.admission.slots import Slots, TypeSlots, slot_key, slot_type

__all__ = [
    "Slots",
    "TypeSlots",
    "drain_time_s",
    "expected_start_s",
    "in_flight_target",
    "mean_duration_s",
    "slot_key",
    "slot_type",
    "waiting_delay_s",
]
