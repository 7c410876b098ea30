"""Replay: one seed on one commit gives the same trace byte for byte, in two processes with different
hash seeds; no wall clock is read inside a seed; the command's outputs have the promised shape."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from longjobs.engine.extender import invocation as extender_invocation
from longjobs.sim.campaign import run_seed

ROOT = Path(__file__).resolve().parents[2]


def _sim(*args: str, hash_seed: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONHASHSEED": hash_seed}
    return subprocess.Popen(
        [sys.executable, "-m", "offline", "sim", *args], cwd=ROOT, env=env, text=True, stdout=subprocess.PIPE
    )


def test_replay_trace_is_byte_identical_across_processes(tmp_path: Path) -> None:
    runs = [_sim("--seed", "5", "--trace", str(tmp_path / f"{seed}.jsonl"), hash_seed=seed) for seed in ("1", "2")]
    assert [run.wait(timeout=300) for run in runs] == [0, 0]
    first, second = (tmp_path / "1.jsonl").read_bytes(), (tmp_path / "2.jsonl").read_bytes()
    assert len(first.splitlines()) > 500  # a whole seed: calls, deliveries, job runs (881 lines at 468cbdb)
    assert first == second


def test_replay_no_wall_clock_is_read_inside_a_seed() -> None:
    assert run_seed(3, keep_calls=False).real_clock_reads == {}


def test_replay_a_wall_clock_read_by_the_engine_is_counted(monkeypatch: pytest.MonkeyPatch) -> None:
    original = extender_invocation.renew_due

    def reads_the_wall_clock(*args: object, **kwargs: object) -> object:
        time.time()
        return original(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(extender_invocation, "renew_due", reads_the_wall_clock)
    reads = run_seed(3, keep_calls=False).real_clock_reads
    assert reads and all(caller.endswith(":reads_the_wall_clock") for caller in reads)


def test_replay_campaign_json_has_the_promised_keys() -> None:
    run = _sim("--seeds", "4", "--first", "20", "--json", hash_seed="0")
    out, _ = run.communicate(timeout=300)
    report = json.loads(out)
    assert {"seeds", "failed", "coverage", "never_reached", "wall_s", "virtual_h"} <= set(report)
    assert report["seeds"] == 4 and report["coverage"]["job_started"] > 0
    assert run.returncode == (1 if report["failed"] else 0)


def test_replay_command_refuses_bad_input_naming_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from longjobs.offline.__main__ import main

    assert main(["sim", "--seeds", "0"]) == 2
    assert "--seeds must be at least 1" in capsys.readouterr().err
    scenario = tmp_path / "bad.json"
    scenario.write_text(json.dumps({"settings": {}, "jobs": [{"id": "a", "type": "wait", "seconds": -1}]}))
    assert main(["sim", "--scenario", str(scenario)]) == 2
    assert "jobs[0].seconds" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--seed", "1", "--trace", "{missing}/trace.jsonl"], "--trace {missing}/trace.jsonl: not a file"),
        (["--seed", "1", "--shrink", "--out", "{tmp}"], "--out {tmp}: not a file"),
        (["--seeds", "2", "--trace", "{tmp}/trace.jsonl"], "--trace needs --seed or --scenario"),
        (["--seed", "1", "--shrink", "--trace", "{tmp}/trace.jsonl"], "without --shrink"),
        (["--seed", "1", "--out", "{tmp}/shrunk.json"], "--out needs --shrink"),
        (["--seeds", "2", "--no-s3"], "--no-s3 needs --seed"),
        (["--seeds", "2", "--fifo-no-operator"], "--fifo-no-operator needs --seed"),
        (["--seeds", "2", "--workers", "0"], "--workers must be at least 1"),
        (["--seed", "1", "--seeds", "5"], "--seeds and --first choose a campaign's seeds"),
        (["--scenario", "{tmp}/s.json", "--first", "3"], "--seeds and --first choose a campaign's seeds"),
        (["--seed", "1", "--scenario", "{tmp}/s.json"], "--seed and --scenario: give one"),
        (["--scenario", "{tmp}/s.json", "--profile", "fifo"], "--profile draws a seed's workload: not with --scenario"),
        (["--seed", "1", "--workers", "2"], "--workers runs a campaign's seeds in parallel: not with --seed"),
        (["--scenario", "{tmp}/s.json", "--workers", "2"], "--workers runs a campaign's seeds in parallel"),
        (["--seed", "1", "--shrink", "--json"], "--json: not with --shrink"),
    ],
    ids=[
        *("trace-no-dir", "out-a-dir", "trace-campaign", "trace-shrink", "out-no-shrink", "no-s3-campaign"),
        "fifo-no-operator-campaign",
        *("workers", "seeds-with-seed", "first-with-scenario", "seed-and-scenario"),
        *("profile-with-scenario", "workers-with-seed", "workers-with-scenario", "json-with-shrink"),
    ],
)
def test_replay_command_refuses_options_it_would_ignore_or_fail_on_after_the_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], named: str
) -> None:
    """Refused before anything runs: a trace or shrunk scenario that cannot be written would otherwise end the
    run with a traceback and exit 1 (a broken property), and an option of another mode would do nothing."""
    from longjobs.offline.__main__ import main

    values = {"tmp": str(tmp_path), "missing": str(tmp_path / "missing")}
    assert main(["sim", *(arg.format(**values) for arg in args)]) == 2
    assert named.format(**values) in capsys.readouterr().err


def test_replay_shrink_draws_the_seed_as_its_replay_does(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--no-s3`, `--s3-several` and `--fifo-no-operator` draw the seed's world for the shrink as for its replay."""
    from longjobs.offline.__main__ import main
    from longjobs.sim import shrink

    asked: list[tuple[bool, bool, bool]] = []

    def passing(
        seed: int, profile: str, *, notifications: bool = True, one_marker: bool = True, fifo_operator: bool = True
    ) -> None:
        asked.append((notifications, one_marker, fifo_operator))

    monkeypatch.setattr(shrink, "shrink_seed", passing)
    assert main(["sim", "--seed", "8", "--no-s3", "--shrink"]) == 0
    assert main(["sim", "--seed", "8", "--s3-several", "--shrink"]) == 0
    assert main(["sim", "--seed", "8", "--fifo-no-operator", "--shrink"]) == 0
    assert main(["sim", "--seed", "8", "--shrink"]) == 0
    assert asked == [(False, True, True), (True, False, True), (True, True, False), (True, True, True)]
    assert main(["sim", "--seeds", "2", "--s3-several"]) == 2
    assert "--s3-several needs --seed" in capsys.readouterr().err


class _ClosedPipe(io.StringIO):
    """Standard output whose reader has gone (`sim ... | head`): every write and flush meets a closed pipe."""

    def write(self, text: str) -> int:
        raise BrokenPipeError(32, "Broken pipe")

    def flush(self) -> None:
        raise BrokenPipeError(32, "Broken pipe")


@pytest.mark.parametrize("args", [["--seeds", "2", "--workers", "2"], ["--seed", "1"]], ids=["campaign", "seed"])
def test_replay_command_interrupted_says_so_in_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], args: list[str]
) -> None:
    """Ctrl-C during a campaign or a seed: one line, no traceback, and the exit code a shell reports for an
    interrupted command (130)."""
    from longjobs.offline.__main__ import main
    from longjobs.sim import campaign

    def interrupted(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(campaign, "campaign", interrupted)
    monkeypatch.setattr(campaign, "run_seed", interrupted)

    try:
        code = main(["sim", *args])
    except KeyboardInterrupt:
        pytest.fail("the interrupt left the command: a traceback")
    assert code == 130
    assert capsys.readouterr().err.splitlines() == [
        "interrupted: the simulation stopped before its end, and printed or wrote no result"
    ]


def test_replay_command_whose_reader_closed_the_pipe_ends_quietly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A report piped into `head`, which exits early: exit 1, no traceback."""
    from longjobs.offline.__main__ import main

    scenario = tmp_path / "one.json"
    scenario.write_text(json.dumps({"jobs": [{"id": "a", "type": "wait", "seconds": 5}]}), encoding="utf-8")
    monkeypatch.setattr(sys, "stdout", _ClosedPipe())
    assert main(["sim", "--scenario", str(scenario)]) == 1


def test_replay_campaign_table_lists_a_failed_seed_in_two_lines_as_the_docs_say(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Below the table, a failed seed's property and detail, then its replay command on a line of its own."""
    from longjobs.sim.campaign import CampaignReport
    from longjobs.sim.cli import _table

    replay = "python -m offline sim --seed 7 --profile mixed"
    failure = {"seed": 7, "property": "no_lapse", "detail": "m1 received again", "t": 1.0, "step": 2, "replay": replay}
    _table(CampaignReport(seeds=1, first=7, profile="mixed", failed=[failure]))
    lines = capsys.readouterr().out.splitlines()
    at = lines.index("seed 7: no_lapse m1 received again")
    assert lines[at + 1].strip() == replay
    page = " ".join((ROOT / "docs" / "simulation.md").read_text(encoding="utf-8").split())
    assert "A failed seed is two lines: the seed, the property it broke and what broke it, then the command" in page
