"""The mutation command (`longjobs.sim.mutation`): each top-level clause of each condition the processor's writes
carry, removed in turn, must be reported by the default campaign. These tests hold the clause splitting and
the mutant's place of effect; the command itself runs whole campaigns and is not part of CI."""

from __future__ import annotations

import pytest

from longjobs.sim.campaign import run_seed
from longjobs.sim.mutation import Mutant, applied, clauses, mutants

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
    assert clauses(condition) == expected


def test_mutation_mutant_removes_one_clause_or_the_whole_condition() -> None:
    assert Mutant(LEASE_ADOPTION, 1).condition == (
        "#status = :active AND (receive_count < :rc OR (receive_count = :rc AND receipt_handle <> :handle))"
    )
    assert Mutant("attribute_not_exists(#pk)", 0).condition is None
    assert [m.index for m in mutants([LEASE_ADOPTION, "attribute_not_exists(#pk)"])] == [0, 1, 2, 0]


def test_mutation_applied_rewrites_its_site_only_and_is_undone() -> None:
    """A write whose condition is the mutant's site meets the weakened condition; the patch ends with the block
    (seed 0 runs the same with and without a mutant of a condition it never sends)."""
    from longjobs.sim.aws.dynamodb import FakeDynamoDb

    before = FakeDynamoDb._check
    unused = Mutant("#never = :sent AND #other = :one", 0)
    plain = run_seed(0).trace.records
    with applied(unused):
        assert FakeDynamoDb._check is not before
        assert run_seed(0).trace.records == plain
    assert FakeDynamoDb._check is before


def test_mutation_of_the_lease_creation_is_killed_by_the_campaign() -> None:
    """The lease's creation without `attribute_not_exists(#pk)` lets a second receive write a lease over the
    first's: the campaign's seed 8 runs a job twice from one message (the command's first run found it)."""
    with applied(Mutant("attribute_not_exists(#pk)", 0)):
        result = run_seed(8, keep_calls=False)
    assert result.violation is not None and result.violation.property == "once_per_message"


@pytest.mark.parametrize(
    ("argv", "says"),
    [(["--seeds", "0"], "at least 1"), (["--discover", "1", "--only", "no such clause"], "'no such clause'")],
    ids=["no-seeds", "no-site"],
)
def test_mutation_command_refuses_what_it_cannot_run(
    argv: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from longjobs.sim.mutation import main

    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
    assert says in capsys.readouterr().err
