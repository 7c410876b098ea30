"""The mutation command (`longjobs.sim.mutation`): each clause of each condition the processor's writes carry,
and each row of the receiver's decision, changed in turn, must be reported by the default campaign or argued
equivalent. These tests hold the mutants' making, their place of effect, and the reach pass's promise that a
seed it does not list runs as without the mutant; the command itself runs whole campaigns and is not part of
CI."""

from __future__ import annotations

import pytest

from longjobs.engine.delivery import decision
from longjobs.engine.delivery.decision import Action, Limits, Reading
from longjobs.engine.lease.types import Lease, LeaseStatus
from longjobs.sim.campaign import run_seed
from longjobs.sim.mutation import ClauseMutant, GuardMutant, RowMutant, clauses, guards, rows
from longjobs.sim.mutation.equivalent import ARGUED, key
from longjobs.sim.mutation.probes import PROBES

LEASE_ADOPTION = (
    "#status = :active AND version = :version"
    " AND (receive_count < :rc OR (receive_count = :rc AND receipt_handle <> :handle))"
)


@pytest.mark.parametrize(
    ("condition", "expected"),
    [
        ("attribute_not_exists(#pk)", ["attribute_not_exists(#pk)"]),
        ("attribute_not_exists(#pk) OR #state = :free", ["attribute_not_exists(#pk) OR #state = :free"]),
        (
            LEASE_ADOPTION,
            [
                "#status = :active",
                "version = :version",
                "(receive_count < :rc OR (receive_count = :rc AND receipt_handle <> :handle))",
            ],
        ),
        ("#n BETWEEN :a AND :b AND #s = :s", ["#n BETWEEN :a AND :b", "#s = :s"]),
    ],
    ids=["one", "or-is-one-clause", "nested-and-kept", "between"],
)
def test_mutation_clauses_split_at_top_level_ands(condition: str, expected: list[str]) -> None:
    assert clauses.clauses(condition) == expected


def test_mutation_clause_mutant_removes_one_clause_or_the_whole_condition() -> None:
    assert ClauseMutant(LEASE_ADOPTION, 1).condition == (
        "#status = :active AND (receive_count < :rc OR (receive_count = :rc AND receipt_handle <> :handle))"
    )
    assert ClauseMutant("attribute_not_exists(#pk)", 0).condition is None
    made = clauses.mutants([LEASE_ADOPTION, "attribute_not_exists(#pk)"])
    assert [m.index for m in made] == [0, 1, 2, 0]


def test_mutation_clause_mutant_rewrites_its_site_only_and_is_undone() -> None:
    """A write whose condition is the mutant's site meets the weakened condition; the patch ends with the block
    (seed 0 runs the same with and without a mutant of a condition it never sends)."""
    from longjobs.sim.aws.dynamodb import FakeDynamoDb

    before = FakeDynamoDb._check
    unused = ClauseMutant("#never = :sent AND #other = :one", 0)
    plain = run_seed(0).trace.records
    with unused.active():
        assert FakeDynamoDb._check is not before
        assert run_seed(0).trace.records == plain
    assert FakeDynamoDb._check is before


def test_mutation_of_the_lease_creation_is_killed_by_the_campaign() -> None:
    """The lease's creation without `attribute_not_exists(#pk)` lets a second receive write a lease over the
    first's: the campaign's first seed it breaks (within its first hundred) sees a lease go back to an older
    receive, or a job run twice from one message."""
    with ClauseMutant("attribute_not_exists(#pk)", 0).active():
        results = (run_seed(seed, keep_calls=False) for seed in range(100))
        result = next((result for result in results if result.violation is not None), None)
    assert result is not None and result.violation is not None, "the mutant escaped 100 seeds"
    assert result.violation.property in ("newest_receive", "once_per_message"), result.violation


def test_mutation_rows_are_every_returned_action_of_the_decision() -> None:
    """Each `return` of the decision is a row, each branch of a conditional return one too; every row's action
    has plausible replacements, none of them a read (the receiver would ask again forever)."""
    found = rows.rows()
    returned = {row.returns for row in found}
    assert {f"Action.{action.name}" for action in Action} <= returned
    assert [row.returns for row in found if row.function == "decide"][:5] == [
        "Action.CLAIM_COPY",
        "Action.DEAD_LETTER_CANCELLED",
        "Action.DEAD_LETTER_UNKNOWN",
        "Action.STALE",
        "Action.DUPLICATE",
    ]
    reads = {"Action.CLAIM_COPY", "Action.READ_EXECUTION", "Action.READ_JOB_LOCK", "Action.FIND_SLOT"}
    for mutant in rows.mutants():
        assert mutant.replacement != mutant.row.returns
        assert mutant.replacement not in reads, mutant.change


def test_mutation_row_mutant_changes_its_row_only_and_is_undone() -> None:
    """A succeeded lease's row answers as the mutant says, every caller sees it (the code is swapped in place),
    and the decision is itself again after the block."""
    from longjobs.engine.receiver import service

    lease = _lease(LeaseStatus.SUCCEEDED)
    limits = Limits(max_attempts=3, max_refused_starts=3)
    succeeded = next(row for row in rows.rows() if row.returns == "Action.ALREADY_SUCCEEDED")
    original = decision.decide.__code__
    with RowMutant(succeeded, "Action.START").active():
        assert service.decide(Reading(receive_count=2, receipt_handle="h", lease=lease), limits) is Action.START
        assert decision.decide(Reading(receive_count=1, receipt_handle="h"), limits) is Action.READ_JOB_LOCK
    assert decision.decide.__code__ is original
    assert (
        decision.decide(Reading(receive_count=2, receipt_handle="h", lease=lease), limits) is Action.ALREADY_SUCCEEDED
    )


def test_mutation_cancelled_copy_acknowledged_without_its_dlq_copy_is_killed() -> None:
    """A copy whose cancelled marker has no DLQ copy yet, acknowledged instead of sent to the DLQ: at seed 135
    the operator's cancel of job j13's message is cut short after its mark, and only the account of each
    message (`nothing_lost`) sees the cancelled message vanish."""
    mutant = next(
        m
        for m in rows.mutants()
        if m.row.returns == "Action.DEAD_LETTER_CANCELLED" and m.row.index == 1 and "ALREADY_CANCELLED" in m.replacement
    )
    assert run_seed(135, keep_calls=False).violation is None
    with mutant.active():
        result = run_seed(135, keep_calls=False)
    assert result.violation is not None and result.violation.property == "nothing_lost"
    assert "m0000003" in result.violation.detail  # the message the operator cancelled


def test_mutation_rows_recorded_are_the_rows_a_seed_takes() -> None:
    """Recording notes each row returned and changes nothing: seed 0 runs as without it, and a new message's
    first receive takes the rows of a new attempt."""
    plain = run_seed(0).trace.records
    with rows.recording() as taken:
        assert run_seed(0).trace.records == plain
    returned = {row.returns for row in taken}
    assert {"Action.READ_JOB_LOCK", "Action.FIND_SLOT", "Action.START"} <= returned
    assert "_mutation_noted" not in vars(decision)


def test_mutation_seeds_the_reach_pass_leaves_out_run_as_without_the_mutant() -> None:
    """The reach pass's promise: a seed where the change is not taken is the unmutated seed, trace for trace,
    so judging only the listed seeds loses nothing."""
    mutant = next(m for m in rows.mutants() if m.row.returns == "Action.DEAD_LETTER_UNKNOWN")
    with rows.recording() as taken:
        plain = run_seed(1).trace.records
    assert mutant.row not in taken
    with mutant.active():
        assert run_seed(1).trace.records == plain


def test_mutation_every_argument_and_probe_names_a_mutant() -> None:
    """An argument or a probe whose mutant is gone (its row or guard changed, its clause no longer in its
    condition) is stale: it must be argued or probed again."""
    made = {key(m): m for m in [*rows.mutants(), *guards.mutants()]}
    for named in [*ARGUED, *PROBES]:
        if " | without " in named:
            site, removed = named.split(" | without ")
            assert removed in clauses.clauses(site), named
        else:
            assert named in made, named


def test_mutation_guards_are_the_tests_of_the_guarded_functions() -> None:
    """Every guarded function has its tests listed, the renewal policy's due test among them."""
    found = guards.guards()
    assert {guard.target for guard in found} == set(guards.GUARDED)
    due = [g for g in found if g.target.endswith("AdaptivePolicy.decide")]
    assert [g.test for g in due] == ["now + self.horizon_s >= self.renew_at(lease)"]
    assert len(guards.mutants()) == 2 * len(found)


def test_mutation_guard_mutant_forces_its_test_and_is_undone() -> None:
    """The adaptive policy's due test forced false never renews, forced true always does; the policy is itself
    again after the block."""
    from longjobs.engine.policies.adaptive import AdaptivePolicy

    policy = AdaptivePolicy(lead_s=60.0, floor_s=300, ceiling_s=3600)
    due = next(g for g in guards.guards() if g.target.endswith("AdaptivePolicy.decide"))
    lease = _lease(LeaseStatus.ACTIVE)  # visible until 0: due at any time after
    assert policy.decide(1000.0, lease).renew
    with GuardMutant(due, forced=False).active():
        assert not policy.decide(1000.0, lease).renew
    assert policy.decide(1000.0, lease).renew
    with GuardMutant(due, forced=True).active():
        assert policy.decide(-1e9, lease).renew
    assert not policy.decide(-1e9, lease).renew


def test_mutation_guards_recorded_with_each_value_a_seed_gives_them() -> None:
    """Recording notes each guard's value and changes nothing: seed 3 runs as without it; its extender found
    leases due (the due index gives no other), and its releases were accepted by SQS."""
    plain = run_seed(3).trace.records
    with guards.recording() as tested:
        assert run_seed(3).trace.records == plain
    seen = {(guard.target.split(":")[1], guard.test): value for guard, value in tested}
    assert seen[("AdaptivePolicy.decide", "now + self.horizon_s >= self.renew_at(lease)")] is True
    assert seen[("release", "outcome.ok")] is True


def test_mutation_guard_reached_where_its_constant_changes_what_it_gives() -> None:
    """A test that was true reaches only its `False` mutant: forced true, it decides the same. A returned `or`
    that gave an operand (`store.amend(...) or closed` gives a lease) reaches both: either constant is
    returned in its place."""
    tested = guards.Guard("longjobs.engine.settle:release", 0, 85, "delay_s is None")
    returned = guards.Guard("longjobs.engine.settle:release", 4, 97, "store.amend(...) or closed")
    found = guards.reached({(tested, True), (returned, None)})
    assert sorted(found, key=lambda m: (m.guard.index, m.forced)) == [
        GuardMutant(tested, False),
        GuardMutant(returned, False),
        GuardMutant(returned, True),
    ]


def _mutant_of(argued: str) -> ClauseMutant | RowMutant | GuardMutant:
    if " | without " in argued:
        site, removed = argued.split(" | without ")
        return ClauseMutant(site, clauses.clauses(site).index(removed))
    return next(m for m in [*rows.mutants(), *guards.mutants()] if key(m) == argued)


@pytest.mark.parametrize("argued", sorted(PROBES), ids=[probe.__name__ for _, probe in sorted(PROBES.items())])
def test_mutation_probe_passes_and_reports_its_mutant(argued: str) -> None:
    """Each probe passes on the protocol and fails under the mutant it is named for."""
    probe = PROBES[argued]
    probe()
    with _mutant_of(argued).active(), pytest.raises(AssertionError):
        probe()


@pytest.mark.parametrize(
    ("argv", "says"),
    [(["--seeds", "0"], "at least 1"), (["--discover", "1", "--only", "no such clause"], "'no such clause'")],
    ids=["no-seeds", "no-site"],
)
def test_mutation_command_refuses_what_it_cannot_run(
    argv: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from longjobs.sim.mutation.__main__ import main

    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
    assert says in capsys.readouterr().err


def _lease(status: LeaseStatus) -> Lease:
    return Lease(
        message_id="m",
        queue_url="q",
        receipt_handle="h",
        receive_count=1,
        received_at=0.0,
        visible_until=0.0,
        renew_until=0.0,
        status=status,
    )
