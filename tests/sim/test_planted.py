"""Planted bugs prove the harness has teeth: each test plants one bug of `longjobs.sim.planted` (a patch of
the engine's own code, in this process) and runs the unmodified campaign (`--seeds 200`, the default
profile), which must report a broken property. The campaign begins a few seeds before the seed a campaign from
0 first reports it at (`Plant.search_from`), and must first fail there. It stops at its first failed seed, so a
planted bug costs the seeds it takes to be found."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from longjobs.sim.campaign import campaign, offline_command, replay_command, run_seed
from longjobs.sim.planted import PLANTS, planted
from tests import REPO_ROOT

PAGE = REPO_ROOT / "docs" / "simulation.md"


def _seeds_the_page_names() -> list[tuple[str, int]]:
    """Each (plant, seed) docs/simulation.md names: its table of plants, and every sentence that gives a
    plant's seed (`PLANT` ... at seed N)."""
    page = PAGE.read_text(encoding="utf-8")
    table = re.findall(r"^\| `(\w+)` \| `\w+` \| (\d+) \|$", page, re.MULTILINE)
    prose = re.findall(r"`(\w+)`[^|.;`]*?\bat (?:seed )?(\d+)\b", " ".join(page.split()))
    return sorted({(name, int(seed)) for name, seed in [*table, *prose] if name in PLANTS})


@pytest.mark.parametrize("bug", sorted(PLANTS))
def test_planted_bug_is_reported_by_the_campaign(bug: str, monkeypatch: pytest.MonkeyPatch) -> None:
    PLANTS[bug].apply(monkeypatch.setattr)
    first = PLANTS[bug].search_from
    report = campaign(200, first=first, workers=1, stop_on_failure=True)
    assert report.failed, f"the campaign missed the planted bug {bug!r} in 200 seeds from {first}"
    failure = report.failed[0]
    assert failure["property"] == PLANTS[bug].reported_as
    assert failure["seed"] == PLANTS[bug].first_seed, "the seeds before the plant's first seed pass"
    assert failure["replay"].startswith(f"python -m offline sim --seed {failure['seed']}")


def test_planted_seeds_the_docs_name_are_each_plants_first_seed() -> None:
    """docs/simulation.md's table of plants gives each plant's property and first seed, and every sentence that
    names a plant's seed, or where its test searches from, says the same."""
    page = PAGE.read_text(encoding="utf-8")
    table = {
        name: (reported_as, int(seed))
        for name, reported_as, seed in re.findall(r"^\| `(\w+)` \| `(\w+)` \| (\d+) \|$", page, re.MULTILINE)
    }
    assert table == {name: (plant.reported_as, plant.first_seed) for name, plant in PLANTS.items()}
    assert all(seed == PLANTS[name].first_seed for name, seed in _seeds_the_page_names())
    prose = " ".join(page.split())
    searched = re.findall(r"`(\w+)`[^|.;`]*?\bat seed \d+[^|.;`]*?searches from (?:seed )?(\d+)", prose)
    assert searched, "the page says where some plants' tests search from"
    assert all(int(seed) == PLANTS[name].search_from for name, seed in searched), searched
    assert all(plant.search_from <= plant.first_seed for plant in PLANTS.values())


@pytest.mark.parametrize(("bug", "seed"), _seeds_the_page_names(), ids=lambda value: str(value))
def test_planted_seed_the_docs_name_reports_the_plant(bug: str, seed: int) -> None:
    """Each seed docs/simulation.md names for a plant breaks the plant's property: `sim --seed N --plant NAME`
    replays what the page says."""
    with planted(bug):
        violation = run_seed(seed, keep_calls=False).violation
    assert violation is not None, f"seed {seed} reports nothing with {bug!r} planted"
    assert violation.property == PLANTS[bug].reported_as


def test_planted_context_undoes_its_patches() -> None:
    from longjobs.engine.extender import service

    before = service.still_as_read
    with planted("handle_check"):
        assert service.still_as_read is not before
    assert service.still_as_read is before


def test_planted_campaign_names_the_plant_in_each_replay_command() -> None:
    assert (
        replay_command(7, "mixed", plant="job_lock")
        == "python -m offline sim --seed 7 --profile mixed --plant job_lock"
    )
    assert "--plant" not in replay_command(7, "mixed")


def test_planted_bug_found_replayed_and_shrunk_through_the_command_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """docs/simulation.md's walk-through: the seed that breaks, replayed, shrunk; the shrunk scenario fails
    with the plant and passes without it."""
    from longjobs.offline.__main__ import main

    out = tmp_path / "job-lock.json"
    assert main(["sim", "--seed", "0", "--plant", "job_lock", "--json"]) == 1
    replayed = json.loads(capsys.readouterr().out)
    assert replayed["property"] == PLANTS["job_lock"].reported_as
    assert replayed["replay"].endswith("--plant job_lock")
    assert main(["sim", "--seed", "0", "--plant", "job_lock", "--shrink", "--out", str(out)]) == 1
    assert f"--scenario {out} --plant job_lock" in capsys.readouterr().out
    assert len(json.loads(out.read_text())["jobs"]) <= 3
    assert main(["sim", "--scenario", str(out), "--plant", "job_lock"]) == 1
    capsys.readouterr()
    assert main(["sim", "--scenario", str(out)]) == 0, "the failure is the plant's"


def test_planted_unknown_name_is_one_usage_error_with_a_short_usage(capsys: pytest.CaptureFixture[str]) -> None:
    """A mistyped plant is refused (exit code 2) naming it; the usage above the error shows `--plant NAME`,
    not every plant's name, so the error is not lost under the list (`--help` lists them)."""
    from longjobs.offline.__main__ import main

    with pytest.raises(SystemExit) as exited:
        main(["sim", "--plant", "job_lok"])
    err = capsys.readouterr().err
    assert exited.value.code == 2
    usage, error = err.rsplit("\n", 2)[0], err.strip().splitlines()[-1]
    assert "--plant NAME" in usage and "job_lock" not in usage, usage
    assert "argument --plant: invalid choice: 'job_lok'" in error, error
    with pytest.raises(SystemExit):
        main(["sim", "--help"])  # the names are in --help
    shown = capsys.readouterr().out
    assert [name for name in PLANTS if name not in shown] == [], shown


@pytest.mark.parametrize(
    ("argv0", "command"),
    [
        ("/home/me/.venv/bin/longjobs-offline", "longjobs-offline"),  # installed: the console script
        ("/home/me/sqs-long-jobs/offline/__main__.py", "python -m offline"),  # this repository's front
        ("/home/me/.venv/lib/python3.13/site-packages/longjobs/offline/__main__.py", "python -m longjobs.offline"),
    ],
)
def test_planted_replay_command_is_the_one_its_reader_ran(argv0: str, command: str) -> None:
    """A replay line printed by the installed command works outside this repository, where `offline` (the
    repository's front package) does not exist."""
    assert offline_command(argv0) == command
