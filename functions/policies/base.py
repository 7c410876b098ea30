"""The renewal policy contract: a pure function of (now, lease, settings)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol


class LeaseTiming(Protocol):
    """The parts of a lease a policy reads (the `Lease` record satisfies it)."""

    @property
    def received_at(self) -> float: ...

    @property
    def visible_until(self) -> float: ...

    @property
    def last_renewed_at(self) -> float: ...


@dataclass(frozen=True)
class RenewalDecision:
    """Renew now or not, and the `VisibilityTimeout` to ask SQS for (seconds from the call)."""

    renew: bool
    visibility_timeout_s: int = 0


KEEP = RenewalDecision(renew=False)


class RenewalPolicy(Protocol):
    """Decides when a lease is renewed and for how long. Implementations hold no mutable state."""

    @property
    def name(self) -> str: ...

    def initial_timeout_s(self) -> int:
        """The first chunk, asked for when the job is accepted."""
        ...

    def renew_at(self, lease: LeaseTiming) -> float:
        """When the lease should next be looked at (the due-index key)."""
        ...

    def decide(self, now: float, lease: LeaseTiming) -> RenewalDecision:
        """Whether to renew at `now`, and with which timeout."""
        ...


def whole_seconds(seconds: float) -> int:
    """SQS takes whole seconds: round up, ignoring float noise below a millisecond."""
    return max(0, math.ceil(round(seconds, 3)))
