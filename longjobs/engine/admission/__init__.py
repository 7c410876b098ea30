"""Admission control per job type: at most `max_concurrency` executions of a type at once.

- `slots`: the type's N slots, lock items `slot#<type>#<i>` held by one execution each (the job lock's
  mechanism, N times). Taken with a conditional write before the execution starts, released on every
  way it ends, a stale holding freed once its execution is seen not running.
- `estimate`: when a waiting message can be expected to run, from the slots' holders and durations.

What the receiver, the extender and the watcher do with them is in `longjobs.engine.receiver.admission`.
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
