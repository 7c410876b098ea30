"""docs/deploy.md's cost table is what `python -m benchmarks.stack_cost` prints for the default stack: a
resource billed by the month that the stack adds or drops changes the table, or this fails."""

from __future__ import annotations

from collections import Counter

from benchmarks.stack_cost import report
from tests.infra.conftest import REPO_ROOT, Synth

MARKER = "printed this table on"


def documented_rows() -> list[str]:
    """The table's rows under its `stack_cost` comment in docs/deploy.md."""
    lines = (REPO_ROOT / "docs" / "deploy.md").read_text(encoding="utf-8").splitlines()
    start = next(i for i, line in enumerate(lines) if MARKER in line and "stack_cost" in line)
    rows = []
    for line in lines[start + 1 :]:
        if not line.startswith("|"):
            break
        rows.append(line)
    return rows


def test_stack_cost_table_in_deploy_md_is_the_default_stacks(dev: Synth) -> None:
    resources = Counter(resource["Type"] for resource in dev.template["Resources"].values())
    result = report(resources, minutes=10, workers=2)
    expected = [f"| {line.item} | {line.count:,.0f} | {line.unit_usd:.8g} | {line.usd:.2f} |" for line in result.idle]
    expected.append(f"| **idle month** | | | **{result.idle_usd:.2f}** |")
    rows = documented_rows()
    assert [row for row in rows if row in expected] == expected, "\n".join(rows)
