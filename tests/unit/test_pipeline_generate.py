"""The test-data generator: deterministic, dirty in the stated proportions, and its manifest adds up."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from longjobs.pipeline.generate import generate, main, read_manifest
from tests import REPO_ROOT


def test_generate_same_arguments_give_identical_files(tmp_path: Path) -> None:
    first = generate("2024-05-01", 5_000, tmp_path / "a", seed=4, files=3)
    second = generate("2024-05-01", 5_000, tmp_path / "b", seed=4, files=3)
    assert first == second
    for name in first.file_names:
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
    other = generate("2024-05-01", 5_000, tmp_path / "c", seed=5, files=3)
    assert (tmp_path / "c" / "part-00000.jsonl").read_bytes() != (tmp_path / "a" / "part-00000.jsonl").read_bytes()
    assert other != first


def test_generate_manifest_accounts_for_every_line(tmp_path: Path) -> None:
    manifest = generate("2024-05-01", 50_000, tmp_path, seed=2)
    lines = sum(len((tmp_path / name).read_text().splitlines()) for name in manifest.file_names)
    rejects = (
        manifest.malformed
        + manifest.missing_id
        + manifest.missing_field
        + manifest.negative_amount
        + manifest.out_of_window
    )
    assert lines == manifest.events == 50_000
    assert rejects + manifest.duplicates + manifest.unique_valid == manifest.events
    assert sum(manifest.by_type.values()) == manifest.unique_valid
    # about 1% malformed and 2% duplicates, as documented
    assert 0.008 < manifest.malformed / manifest.events < 0.012
    assert 0.017 < manifest.duplicates / manifest.events < 0.023
    assert 0 < manifest.late_accepted < manifest.unique_valid
    assert read_manifest(tmp_path) == manifest


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--date", "2024-05-01", "--events", "0"], "events must be at least 1"),
        (["--date", "2024-05-01", "--events", "10", "--files", "11"], "files must be 1..events"),
        (["--date", "2024-05-01", "--events", "10", "--late-minutes", "2000"], "late_minutes must be 0..1440"),
        (["--date", "2024-05-32", "--events", "10"], "day is out of range"),
    ],
)
def test_generate_command_refuses_bad_arguments(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    with pytest.raises(SystemExit) as exited:
        main([*argv, "--out", str(tmp_path)])
    assert exited.value.code == 2
    assert message in capsys.readouterr().err
    assert not list(tmp_path.iterdir())


def test_generate_seed_3_gives_the_summary_pipeline_md_shows(tmp_path: Path) -> None:
    """docs/pipeline.md's summary of 3,000 events of `--seed 3` holds the figures its manifest says a run finds."""
    page = (REPO_ROOT / "docs" / "pipeline.md").read_text(encoding="utf-8")
    block = re.search(r"```json\n(\{\"date\": \"2024-05-01\", \"rows_read\": 3000,.*?)```", page, re.DOTALL)
    assert block is not None, "pipeline.md shows a run's summary"
    summary = json.loads(block.group(1))
    manifest = generate("2024-05-01", 3_000, tmp_path, seed=3)
    assert summary["rows_read"] == manifest.events
    assert summary["duplicates_dropped"] == manifest.duplicates
    assert summary["late_accepted"] == manifest.late_accepted
    assert summary["quarantined"] == {
        "malformed": manifest.malformed,
        "missing_id": manifest.missing_id,
        "missing_field": manifest.missing_field,
        "negative_amount": manifest.negative_amount,
        "ts_out_of_window": manifest.out_of_window,
    }
    assert summary["rows_written"]["events"] == manifest.unique_valid
    assert summary["rows_written"]["quarantine"] == sum(summary["quarantined"].values())
    assert summary["rows_written"]["type_daily"] == len(manifest.by_type)
