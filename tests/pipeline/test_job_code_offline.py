"""A job of several modules with a third-party package, on the local Spark as the offline worker runs it
(`longjobs.offline.job_code`): the repository's `textstats` type, whose UDF runs on Spark's executors."""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from longjobs.engine.jobs import JobType, load_catalog_file
from longjobs.offline.job_code import JobCodeError, ensure_env, env_dir, prepare
from longjobs.pipeline.glue_entry import load_entry, run_entry
from tests import REPO_ROOT


@pytest.mark.filterwarnings("error::UserWarning")  # the job's run warns nothing on the user's terminal
def test_job_code_offline_runs_a_package_type_with_its_requirement_on_the_executors(
    spark: SparkSession, tmp_path: Path
) -> None:
    textstats = load_catalog_file(REPO_ROOT / "jobs.json", strict=True).get("textstats")
    assert textstats is not None
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "part-0.txt").write_text("Café au lait\ncafe CAFÉ crème\nCrème brûlée\n")
    prepare(textstats, spark)
    assert env_dir(textstats).is_dir(), "its requirements installed in an environment of its own"
    entry = load_entry(textstats.entry_function, module=textstats.entry_module)
    summary = run_entry(entry, spark, {"input": str(tmp_path / "in"), "min_length": 3})
    assert summary["top"] == [["cafe", 3], ["creme", 2], ["brulee", 1], ["lait", 1]], (
        "accents folded by unidecode inside the UDF: the executors import textstats.words and unidecode"
    )
    assert (summary["lines"], summary["words"], summary["distinct_words"]) == (3, 7, 4)


def test_job_code_offline_requirement_pip_cannot_install_fails_with_the_command_to_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LONGJOBS_CACHE", str(tmp_path / "cache"))
    (tmp_path / "one.py").write_text("def run(spark, params):\n    return {}\n")
    job_type = JobType.model_validate(
        {"name": "broken", "runner": "pyspark", "entry": "one.py:run", "requirements": ["unidecode==0.0.404"]}
    ).with_base(tmp_path)
    with pytest.raises(JobCodeError) as refused:
        ensure_env(job_type)
    message = str(refused.value)
    assert message.startswith("job type 'broken': cannot install its requirements: ")
    assert "unidecode==0.0.404" in message and "-m pip install" in message and str(env_dir(job_type)) in message
    assert not env_dir(job_type).exists(), "nothing half-installed is left where the next run would trust it"
    assert list((tmp_path / "cache" / "job-envs").iterdir()) == []
