"""An entry file that ships alone, as the offline runtime loads it (`longjobs.offline.job_code.load_entry_file`):
under a private module name, so it replaces no module of the one process every type shares."""

from __future__ import annotations

import json
import pickle
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from longjobs.engine.jobs import JobType
from longjobs.offline.job_code import entry_module_name, load_entry_file

ENTRY = """
from dataclasses import dataclass


@dataclass
class Count:
    words: int


def double(value):
    return value * 2


def run(spark, params):
    return {"count": Count(words=double(params["n"])).words}
"""


@pytest.fixture(autouse=True)
def _forget_the_entry() -> Iterator[None]:
    yield
    sys.modules.pop(ENTRY_NAME, None)


ENTRY_NAME = "_longjobs_entry_count-words"


def entry_type(tmp_path: Path, file_name: str) -> JobType:
    (tmp_path / file_name).write_text(ENTRY)
    declared = {"name": "count-words", "runner": "pyspark", "entry": f"{file_name}:run"}
    return JobType.model_validate(declared).with_base(tmp_path)


def test_jobs_offline_entry_file_is_loaded_under_a_private_name_and_replaces_no_module(tmp_path: Path) -> None:
    real_json = sys.modules["json"]
    job_type = entry_type(tmp_path, "json.py")
    run = load_entry_file(job_type)
    assert run(None, {"n": 21}) == {"count": 42}
    assert sys.modules["json"] is real_json and json.dumps([1]) == "[1]", "the standard library's json is untouched"
    name = entry_module_name(job_type)
    assert name == ENTRY_NAME and sys.modules[name].__file__ == str(tmp_path / "json.py")
    assert run.__module__ == name


def test_jobs_offline_entry_functions_are_pickled_by_value_for_the_executors(tmp_path: Path) -> None:
    """No executor can import the private name: a UDF of the entry travels with its code."""
    from pyspark import cloudpickle

    job_type = entry_type(tmp_path, "wordcount.py")
    load_entry_file(job_type)
    module = sys.modules[entry_module_name(job_type)]
    pickled = cloudpickle.dumps(module.double)
    del sys.modules[entry_module_name(job_type)]  # as on an executor, where nothing has that name
    assert pickle.loads(pickled)(4) == 8
