"""The mutation command's test judge (`longjobs.sim.mutation.named`): a pytest process records which tests take
each row's and guard's change, and another runs those tests under a mutant and names the first that fails."""

from __future__ import annotations

from pathlib import Path

from longjobs.sim.mutation import named

ROOT = Path(__file__).resolve().parents[2]
PARKED = "tests/unit/test_receiver_decision.py::test_receiver_decision_table[parked copy, not claimed yet]"
ROW = "row:decide:0:claim_copy>duplicate"


def test_mutation_named_reach_lists_the_tests_that_take_a_rows_change() -> None:
    reached = named.reach(ROOT, [PARKED])
    assert reached[ROW] == [PARKED]
    assert "row:decide:0:claim_copy>start" in reached  # each mutant of a row taken
    assert not [name for name in reached if name.startswith("guard:")]  # the decision tests no renewal


def test_mutation_named_judge_names_the_failing_test_and_passes_a_mutant_it_cannot_see() -> None:
    mutants = named.mutants()
    assert named.judge(mutants[ROW], [PARKED], ROOT) == PARKED
    renewal = next(mutant for name, mutant in mutants.items() if name.startswith("guard:_renew:"))
    assert named.judge(renewal, [PARKED], ROOT) is None
