"""README.md's and docs/offline.md's figures for `make demo` are what the demo produces.

The pages show only the figures every run of the demo repeats (per job: final state, deliveries,
executions, releases, the DLQ's reason); renewals and API calls depend on timing and stay in the run's
own report. The demo itself takes over a minute of wall time with Spark, too long for CI, so the test
runs the demo's own scenario file in the simulation, on virtual time (a few seconds): the same
engine, workflow, settings, jobs and faults. `python -m offline demo` writes the same table from its
real run (`out/demo/figures.md`), so a page is refreshed by copying that file.
"""

from __future__ import annotations

import pytest

from longjobs.offline.__main__ import DEMO_SCENARIO
from longjobs.offline.report import FIGURES_HEADER, figures_table
from longjobs.offline.scenario import load_scenario
from longjobs.sim.scenario import run_scenario
from tests import REPO_ROOT

MARKER = "<!-- the demo's figures:"
PAGES = ("README.md", "docs/offline.md")


def page_figures(page: str) -> str:
    """The Markdown table that follows the page's figures marker, up to the first blank line."""
    lines = (REPO_ROOT / page).read_text(encoding="utf-8").splitlines()
    [start] = [index for index, line in enumerate(lines) if line.startswith(MARKER)]
    table = []
    for line in lines[start + 1 :]:
        if not line.strip():
            break
        table.append(line)
    return "\n".join(table)


@pytest.fixture(scope="module")
def demo_figures() -> str:
    """The demo scenario, run in the simulation: its figures table (the run must break no property)."""
    run = run_scenario(load_scenario(DEMO_SCENARIO))
    assert run.result.violation is None, run.result.violation
    return figures_table({name: vars(job) for name, job in run.jobs.items()})


@pytest.mark.parametrize("page", PAGES)
def test_demo_figures_on_the_page_are_what_the_demo_produces(page: str, demo_figures: str) -> None:
    assert page_figures(page) == demo_figures, f"{page}: refresh its table from out/demo/figures.md"


def test_demo_figures_cover_every_job_of_the_demo(demo_figures: str) -> None:
    rows = demo_figures.splitlines()
    assert rows[0] == "| " + " | ".join(FIGURES_HEADER) + " |"
    assert [row.split(" | ")[0].strip("| `") for row in rows[2:]] == [
        job.id for job in load_scenario(DEMO_SCENARIO).jobs
    ]
