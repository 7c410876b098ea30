"""Legacy shards: what the extender still watches after `shards` was lowered (the upgrade path).

A lease keeps the shard it was written with (its index key): a new or replacing write uses the current
count, a renewal leaves the shard as it is. `shards` defaults to 1 and `previous_shards` to 8, the count
older stacks run with. So after `shards` is lowered, the leases written before the change, and those an
invocation of the previous deployment writes meanwhile, sit on shards [shards, previous_shards). The
current deployment's writes never use them. A stranded ACTIVE lease is never renewed: its message shows
again while its job runs. So the extender (this object is its
container's memory, like `SweepSchedule`) watches those *legacy shards*:

- For the first `window_s` after the container's first run it queries every legacy shard on every run.
  The window is Lambda's longest timeout plus a minute: every invocation of code replaced before the
  container started (a receiver, the watcher, an old extender, whatever its own timeout) has ended and its
  last write is in the index. (The stack updates the extender after the receiver and the watcher.)
- A legacy shard is queried first with `Limit=1` and no bound: nothing means it is empty; its soonest
  lease not due means nothing to renew there; otherwise the shard's due query follows. So a legacy shard
  costs one query a run, two when something on it is due.
- After the window, a legacy shard found empty is dropped from the every-run set; one found holding a
  lease stays until it is empty (its leases drain as their jobs end or are received again: a new receive's
  lease is written on the new shards).
- Every `window_s` after that, every legacy shard is queried once more (the same query, so what it finds
  due is renewed): a shard found holding a lease again (a writer of the previous deployment, outside the
  design: a function updated by hand out of order, an index lagging minutes) is watched every run again,
  and logged.
- The reconciliation index holds the same leases under the same shards, so reconciliation queries the
  shards watched every run (every legacy shard until the first drop).

When every legacy shard has been found empty after the window, the container logs "legacy shards empty":
the upgrade is complete and `previous_shards` may be set to `shards`, which stops the periodic check.
"""

from __future__ import annotations

import threading

from longjobs.engine.clock import Clock
from longjobs.engine.observability import logger
from longjobs.engine.settings import LAMBDA_MAX_TIMEOUT_S

LEGACY_WINDOW_S = LAMBDA_MAX_TIMEOUT_S + 60.0
"""Legacy shards are queried every run this long after a container's first run, then once per this long."""


class LegacyShards:
    """The legacy shards [first, limit) and which of them one extender container queries on every run."""

    def __init__(self, first: int, limit: int, *, clock: Clock, window_s: float = LEGACY_WINDOW_S) -> None:
        if not 1 <= first < limit:
            raise ValueError(f"legacy shards [{first}, {limit}) must be a non-empty range above shard 0")
        self.shards = range(first, limit)
        self._clock = clock
        self._window_s = window_s
        self._live = set(self.shards)
        self._started_at: float | None = None
        self._next_check_at = 0.0
        self._lock = threading.Lock()
        self.complete = False
        """Every legacy shard was found empty after the window (logged once per container)."""

    @property
    def live(self) -> list[int]:
        """The legacy shards queried on every run (every one until the window has passed)."""
        with self._lock:
            return sorted(self._live)

    def to_query(self) -> list[int]:
        """The legacy shards this run queries: the every-run set, or all of them when a check is due."""
        now = self._clock.now()
        with self._lock:
            if self._started_at is None:
                self._started_at = now
                self._next_check_at = now + self._window_s
            if now >= self._next_check_at:
                self._next_check_at = now + self._window_s
                return list(self.shards)
            return sorted(self._live)

    def found(self, held: dict[int, bool]) -> None:
        """What this run's queries found on each legacy shard: True when it holds a lease."""
        now = self._clock.now()
        with self._lock:
            past_window = self._started_at is not None and now >= self._started_at + self._window_s
            for shard, holds in sorted(held.items()):
                if holds and shard not in self._live:
                    self._live.add(shard)
                    self.complete = False
                    logger.warning(
                        "a lease was found on a legacy shard after it was empty: a writer of the old shard "
                        "count still runs; the shard is queried every run again",
                        extra={"shard": shard, "shards": self.shards.start},
                    )
                elif not holds and past_window:
                    self._live.discard(shard)
            if past_window and not self._live and not self.complete:
                self.complete = True
                logger.info(
                    "legacy shards empty: no lease is left on the shards of the previous shard count; "
                    "previous_shards may now be set to shards",
                    extra={"shards": self.shards.start, "previous_shards": self.shards.stop},
                )
