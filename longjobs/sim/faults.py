"""Faults drawn from the seed: what goes wrong at each AWS call and between the steps of the world.

A `FaultPlan` is drawn once per seed: which kinds are on, how often, and when the quiet period starts
(no fault after it, so liveness can be checked). Each call then asks `at_call` for its fault, from the
plan's own random stream, so the same seed fails the same calls.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from longjobs.history.faults import CallFault, WorldFault

# The calls a function makes: a crash is that function's; the workflow's own calls (Step Functions
# retries them) and the producer's sends see errors only.
CRASHING_ACTORS = frozenset({"receiver", "extender", "watcher"})
FOCUS_SHARES = (0.0, 0.0, 0.0, 0.1, 0.3)
"""A seed's share of focused operations (`FaultPlan.focus_share`): most seeds focus on none."""
FOCUS_RATE = 0.5
FOCUS_MAX_STREAK = 8
"""A focused operation fails at most this many calls in a row (by one actor): a service failing every call
for minutes is an outage, beyond what the design claims to survive (the workflow's success path retries 12
times, about 3 minutes on average: a streak past its retries fails it for good), except those of `OUTAGES`."""
RARE_OPERATIONS = frozenset({"delete_message_batch", "stop_execution", "cancel_job_run", "list_job_runs"})
"""Operations few seeds call at all, and then once to four times: the unparking delete (`longjobs.engine.
admission.parking`: 5 % of the seeds of the mixed campaign 0-999), the stop of an execution (6 %), the
receiver's cancel of a job run that outlived its execution (`longjobs.engine.runs`, under 1 %), and its
listing of an application's runs when the execution's history names no run (a start whose answer was
lost); every other operation is called by more than a quarter of the seeds, most by all. Coverage counts each fault kind
per operation over a campaign, but one seed cannot tell from its own calls which operations the others
rarely make (many are first called late, or only a few times, in one seed), so it is measured and written
down here. Every seed focuses on these (`FaultPlan.rare_rng`). Measured without that focus, the unparking
delete's 62 attempts in the fault window of seeds 0-999 met five faults, and three of its six kinds none."""
RARE_FUNCTION_OPERATIONS = frozenset({"delete_message"})
"""Operations the workflow calls in every seed but the functions rarely (a delete by reconciliation or a
cancel): focused as `RARE_OPERATIONS` are, when a function calls them, so that the crash kinds, which only
strike a function's call, are met too (the workflow's calls meet every other kind)."""
OUTAGE_SHARE = 0.05
"""The share of seeds with an outage (`Outage`)."""
OUTAGE_S = 480.0
"""An outage's length: longer than the workflow's patient retries (12 attempts, at most about 6 minutes)."""
UNANSWERED = (CallFault.THROTTLED, CallFault.SERVER_ERROR, CallFault.TIMEOUT)
"""The kinds of an outage's calls that take no effect (one is drawn per outage)."""
OUTAGES: tuple[tuple[str, dict[str, CallFault | None]], ...] = (
    ("workflow", {"get_item": None}),
    ("workflow", {"transact_write_items": None, "update_item": None, "delete_message": None}),
    ("workflow", {"transact_write_items": None, "update_item": CallFault.ANSWER_LOST, "get_item": None}),
)
"""The calls an outage may strike, each beyond every retry its caller makes, with its fault (None: the
outage's drawn kind, one that takes no effect). All are the workflow's calls on its success path, since a
success path that fails for good is within the design:
- its reads: a read that fails for good frees the holds (else the execution would end with its job lock
  held);
- its close and its delete: a close that fails for good deletes the message all the same and frees the
  holds, and when the delete fails too the execution still ends SUCCEEDED: reconciliation completes the
  lease (it deletes the message);
- a close that lands unanswered (its retry then meets its own write) followed by reads that fail: the
  holds are freed by the Catch of the read.
Without these, `FOCUS_MAX_STREAK` keeps every call within its retries, and those Catches are never reached."""


OUTAGE_AT_SUCCESS = (1, 4)
"""An outage begins at a job's success, the n-th of the seed, n drawn in this range."""


@dataclass(frozen=True)
class Outage:
    """Every attempt of `actor`'s calls of the operations in `faults` fails, each with its fault, for
    `OUTAGE_S` from the seed's `at_success`-th job success (`FaultPlan.job_succeeded` starts it), when that
    comes no later than `last_start`, so that it ends before the quiet period. Anchored on a success, it
    strikes the success path: from a drawn time it would rarely meet one (most of a seed's few dozen
    jobs end early in its fault window; the close's Catch was met once or twice in 1,000 seeds)."""

    actor: str
    faults: dict[str, CallFault]
    at_success: int
    last_start: float
    start: float = math.inf
    until: float = math.inf

    def strikes(self, now: float, actor: str, operation: str) -> CallFault | None:
        if actor != self.actor or not self.start <= now < self.until:
            return None
        return self.faults.get(operation)

    def begun(self, now: float, successes: int) -> Outage | None:
        """This outage begun at `now`, the seed's `successes`-th job success, when that is its own; else None."""
        if successes != self.at_success or now > self.last_start:
            return None
        return replace(self, start=now, until=now + OUTAGE_S)

    @classmethod
    def draw(cls, seed: int, *, start: float, quiet_after_s: float) -> Outage | None:
        """A seed's outage, on a stream of its own (it changes no other fault the seed draws)."""
        rng = random.Random(f"faults:{seed}:outage")
        if rng.random() >= OUTAGE_SHARE:
            return None
        actor, operations = rng.choice(OUTAGES)
        at_success = rng.randint(*OUTAGE_AT_SUCCESS)
        unanswered = rng.choice(UNANSWERED)
        faults = {operation: fault or unanswered for operation, fault in operations.items()}
        return cls(actor, faults, at_success, start + quiet_after_s - OUTAGE_S)


def _possible(kinds: Iterable[CallFault], actor: str) -> list[CallFault]:
    """The kinds that can strike `actor`'s call: a crash only strikes a function."""
    return [k for k in kinds if actor in CRASHING_ACTORS or k not in (CallFault.CRASH_BEFORE, CallFault.CRASH_AFTER)]


@dataclass
class CallRule:
    """Some calls of a written scenario fail: `fault` on `operation` (snake_case; None for any) made by one
    of `actors`, with `probability`, at most `count` times, between `start` and `until` (virtual time)."""

    fault: CallFault
    actors: frozenset[str]
    operation: str | None = None
    probability: float = 1.0
    count: int | None = None
    start: float = -math.inf
    until: float = math.inf
    used: int = 0

    def strikes(self, now: float, actor: str, operation: str) -> bool:
        return (
            actor in self.actors
            and self.operation in (None, operation)
            and self.start <= now < self.until
            and (self.count is None or self.used < self.count)
        )


@dataclass
class FaultPlan:
    """The faults of one seed."""

    rate: float  # the chance that one attempt of a call fails (the functions' clients retry twice)
    kinds: tuple[CallFault, ...]
    world: dict[WorldFault, float]  # the chance of each world fault where it can happen
    quiet_at: float  # virtual time after which nothing fails
    rng: random.Random = field(repr=False)
    rules: list[CallRule] = field(default_factory=list)
    """A written scenario's faults (each attempt of a call meets the first rule that strikes it)."""
    within_design: bool = True
    """Lost extender runs stay within what the design survives (a scenario may go beyond, on purpose)."""
    focus_share: float = 0.0
    """The share of operations this seed *focuses* on: decided per operation at its first call, a
    focused operation fails at `FOCUS_RATE` with any kind. An operation the code calls once or twice a
    seed (a stop at the cap, the unparking delete) otherwise meets a given fault kind about once in
    thousands of seeds; focused, in tens. Those few seeds call at all (`RARE_OPERATIONS`) are focused in
    every seed, on a stream of their own (`rare_rng`)."""
    focus_rng: random.Random = field(default_factory=random.Random, repr=False)
    focused: dict[str, bool] = field(default_factory=dict)
    streaks: dict[tuple[str, str], int] = field(default_factory=dict)
    """Focused failures in a row, by actor and operation (`FOCUS_MAX_STREAK`)."""
    rare_rng: random.Random | None = field(default=None, repr=False)
    """The stream of the focus on `RARE_OPERATIONS` that a seed's share did not focus on (a drawn plan's;
    a written scenario has none). Its own, drawn only at their calls: a seed that never calls them, or
    whose draws there give no fault, fails exactly the calls it would fail without this focus."""
    outage: Outage | None = None
    """A drawn plan's outage (`OUTAGE_SHARE` of the seeds), ahead of every other fault."""
    successes: int = 0
    """The seed's job successes so far (`job_succeeded`): its outage begins at one of them."""
    rare_turns: dict[str, tuple[int, int]] = field(default_factory=dict)
    """Each rare operation's focus (`RARE_OPERATIONS`), as (start, attempts failed so far): its first
    attempts fail with every kind that can strike, in turn from a seed-drawn start, then at the focus
    rate. A rare operation is called in the fault window of a few dozen seeds of a campaign; with one
    fault each, of a random kind, some campaigns of 1,000 seeds leave a kind of the stop unmet. Six in a
    row stay within `FOCUS_MAX_STREAK`."""

    @classmethod
    def draw(cls, seed: int, *, start: float, quiet_after_s: float) -> FaultPlan:
        rng = random.Random(f"faults:{seed}")
        kinds = tuple(kind for kind in CallFault if rng.random() < 0.7) or (CallFault.SERVER_ERROR,)
        world = {fault: rng.choice((0.0, 0.02, 0.1, 0.25)) for fault in WorldFault}
        # A stream of its own: the focus changes no other fault the seed draws.
        focus_rng = random.Random(f"faults:{seed}:focus")
        return cls(
            rate=rng.choice((0.0, 0.02, 0.08, 0.25)),
            kinds=kinds,
            world=world,
            quiet_at=start + quiet_after_s,
            rng=random.Random(f"faults:{seed}:calls"),
            focus_share=focus_rng.choice(FOCUS_SHARES),
            focus_rng=focus_rng,
            rare_rng=random.Random(f"faults:{seed}:rare"),
            outage=Outage.draw(seed, start=start, quiet_after_s=quiet_after_s),
        )

    def job_succeeded(self, now: float) -> None:
        """A job succeeded at `now` (its workflow enters its success path): the outage may begin."""
        self.successes += 1
        begun = self.outage.begun(now, self.successes) if self.outage is not None else None
        if begun is not None:
            self.outage = begun

    def active(self, now: float) -> bool:
        return now < self.quiet_at

    @classmethod
    def scenario(
        cls,
        *,
        rules: list[CallRule],
        world: dict[WorldFault, float],
        within_design: bool,
        seed: int,
    ) -> FaultPlan:
        """A written scenario's faults: its rules and world faults, never quiet."""
        return cls(
            rate=0.0,
            kinds=(),
            world=world,
            quiet_at=math.inf,
            rng=random.Random(f"scenario:{seed}"),
            rules=rules,
            within_design=within_design,
        )

    def at_call(self, now: float, actor: str, operation: str) -> CallFault | None:
        """The fault of one attempt of `operation` by `actor` at `now`, or None."""
        for rule in self.rules:
            if rule.strikes(now, actor, operation) and self.rng.random() < rule.probability:
                rule.used += 1
                return rule.fault
        if not self.active(now):
            return None
        struck = self.outage.strikes(now, actor, operation) if self.outage is not None else None
        if struck is not None:
            return struck
        if self.focus_share > 0 and self._focused_on(operation):
            fault = self._focused(actor, operation, self.focus_rng)
            if fault is not None:
                return fault
        elif self.rare_rng is not None and (
            operation in RARE_OPERATIONS or (operation in RARE_FUNCTION_OPERATIONS and actor in CRASHING_ACTORS)
        ):
            fault = self._focused(actor, operation, self.rare_rng, by_turns=True)
            if fault is not None:
                return fault
        if self.rate <= 0 or self.rng.random() >= self.rate:
            return None
        kinds = _possible(self.kinds, actor)
        return self.rng.choice(kinds) if kinds else None

    def _focused(self, actor: str, operation: str, rng: random.Random, *, by_turns: bool = False) -> CallFault | None:
        """A focused operation's attempt: it fails at `FOCUS_RATE`, with any kind that can strike `actor`
        (`by_turns`: each kind in turn, `rare_turns`), at most `FOCUS_MAX_STREAK` times in a row; None
        leaves it to the base rate."""
        streak = self.streaks.get((actor, operation), 0)
        kinds = _possible(CallFault, actor)
        if by_turns:
            start, failed = self.rare_turns.get(operation) or (rng.randrange(len(kinds)), 0)
            if failed < len(kinds):
                self.rare_turns[operation] = (start, failed + 1)
                self.streaks[(actor, operation)] = streak + 1
                return kinds[(start + failed) % len(kinds)]
        if streak < FOCUS_MAX_STREAK and rng.random() < FOCUS_RATE:
            self.streaks[(actor, operation)] = streak + 1
            return rng.choice(kinds)
        self.streaks[(actor, operation)] = 0
        return None

    def _focused_on(self, operation: str) -> bool:
        if operation not in self.focused:
            self.focused[operation] = self.focus_rng.random() < self.focus_share
        return self.focused[operation]

    def happens(self, now: float, fault: WorldFault) -> bool:
        """Whether world fault `fault` happens at this opportunity."""
        chance = self.world.get(fault, 0.0)
        return chance > 0 and self.active(now) and self.rng.random() < chance
