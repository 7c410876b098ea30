"""A pyspark type's shipped code and the check of its imports at synth (`longjobs.engine.jobs.code`,
`longjobs.construct.job_code.check_imports`, `longjobs.construct.glue_runtime`): pure, read from files."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

from longjobs.construct.glue_runtime import GLUE_RUNTIMES
from longjobs.construct.job_code import check_imports, wheel_modules
from longjobs.engine.jobs import JobType, JobTypeError
from longjobs.engine.jobs.code import imports_of, shipped_files, top_level_names

REPO_ROOT = Path(__file__).resolve().parents[2]
GLUE_5_0 = GLUE_RUNTIMES["5.0"]


def write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def pyspark(tmp_path: Path, entry: str, **fields: object) -> JobType:
    declared = {"name": "mine", "runner": "pyspark", "entry": f"{entry}:run", **fields}
    return JobType.model_validate(declared).with_base(tmp_path)


PACKAGE = {
    "jobs/sessions/__init__.py": "",
    "jobs/sessions/job.py": "from . import helpers\nfrom sessions.sql import query\nimport requests\n\ndef run(s, p):\n"
    "    return {}\n",
    "jobs/sessions/helpers.py": "import orjson\nfrom .deep import thing\n",
    "jobs/sessions/deep.py": "import json\nthing = 1\n",
    "jobs/sessions/sql.py": "from pyspark.sql import functions as F\nquery = 1\n",
    "jobs/sessions/unused.py": "import never_checked\n",
    "jobs/sessions/__pycache__/job.cpython-313.pyc": "",
    "jobs/README.md": "data that ships too\n",
}


def test_job_code_entry_alone_ships_its_file_under_its_name(tmp_path: Path) -> None:
    write(tmp_path, {"jobs/one.py": "def run(s, p):\n    return {}\n"})
    job_type = pyspark(tmp_path, "jobs/one.py")
    assert shipped_files(job_type) == [(tmp_path / "jobs/one.py", "one.py")]
    assert (job_type.entry_module, top_level_names(job_type)) == ("one", {"one"})


def test_job_code_folder_ships_every_file_but_caches_and_imports_the_entry_by_its_dotted_path(tmp_path: Path) -> None:
    write(tmp_path, PACKAGE)
    job_type = pyspark(tmp_path, "jobs/sessions/job.py", code="jobs")
    job_type.check_files()
    assert [inside for _, inside in shipped_files(job_type)] == [
        "README.md",
        "sessions/__init__.py",
        "sessions/deep.py",
        "sessions/helpers.py",
        "sessions/job.py",
        "sessions/sql.py",
        "sessions/unused.py",
    ]
    assert job_type.entry_module == "sessions.job"
    assert top_level_names(job_type) == {"sessions"}


def test_job_code_imports_follow_the_entry_through_its_own_modules_only(tmp_path: Path) -> None:
    write(tmp_path, PACKAGE)
    found = imports_of(pyspark(tmp_path, "jobs/sessions/job.py", code="jobs"))
    reached = {path.relative_to(tmp_path).as_posix() for path in found.files}
    assert reached == {
        "jobs/sessions/job.py",
        "jobs/sessions/__init__.py",
        "jobs/sessions/helpers.py",
        "jobs/sessions/deep.py",
        "jobs/sessions/sql.py",
    }, "relative and absolute imports of the package are followed; unused.py is never reached"
    assert sorted(item.top for item in found.external) == ["json", "orjson", "pyspark", "requests"]


def test_job_code_lone_entry_importing_a_sibling_module_is_refused_with_the_fix(tmp_path: Path) -> None:
    """The entry file ships alone: a helper beside it is not on Glue, and synth says so."""
    write(tmp_path, {"jobs/one.py": "import helpers\n\ndef run(s, p):\n    return {}\n", "jobs/helpers.py": ""})
    checked = check_imports(pyspark(tmp_path, "jobs/one.py"), GLUE_5_0)
    [problem] = checked.problems
    assert problem.startswith(f"{tmp_path / 'jobs/one.py'}:1 imports 'helpers'")
    assert "add its package to `requirements`, or set `code`" in problem


def test_job_code_unshipped_package_is_refused_and_a_requirement_provides_it(tmp_path: Path) -> None:
    write(tmp_path, PACKAGE)
    job_type = pyspark(tmp_path, "jobs/sessions/job.py", code="jobs")
    checked = check_imports(job_type, GLUE_5_0)
    assert [problem.split(" imports ")[1].split(",")[0] for problem in checked.problems] == ["'orjson'"]
    assert "jobs/sessions/helpers.py:1" in checked.problems[0], "the file and line of the import"
    assert check_imports(job_type, GLUE_5_0, frozenset({"orjson"})).problems == ()
    assert check_imports(job_type, GLUE_RUNTIMES["5.1"]).problems == (), "Glue 5.1 provides orjson"


def test_job_code_guarded_and_by_name_imports_are_warnings_not_refusals(tmp_path: Path) -> None:
    source = (
        "import importlib\ntry:\n    import ujson as json\nexcept ImportError:\n    import json\n\n"
        "def run(s, p):\n    importlib.import_module(p['plugin'])\n    __import__('x')\n    return {}\n"
    )
    write(tmp_path, {"jobs/one.py": source})
    checked = check_imports(pyspark(tmp_path, "jobs/one.py"), GLUE_5_0)
    assert checked.problems == ()
    assert len(checked.warnings) == 3
    assert "'ujson'" in checked.warnings[0] and "guarded by `except ImportError`" in checked.warnings[0]
    assert all("by name at run time" in warning for warning in checked.warnings[1:])


@pytest.mark.parametrize(
    ("module", "importable"),
    [
        ("imp", True),  # in Glue 5.x's Python 3.11, gone from 3.13
        ("distutils.util", True),
        ("json", True),
        ("pyspark.sql.functions", True),
        ("awsglue.context", True),
        ("dateutil.parser", True),  # python-dateutil, provided
        ("PIL.Image", True),  # pillow, provided
        ("longjobs.pipeline.params", True),  # shipped with every job
        ("longjobs", True),
        ("longjobs.engine.settings", False),  # the rest of the package is not on Glue
        ("unidecode", False),
        ("orjson", False),  # 5.1 only
    ],
)
def test_glue_runtime_5_0_provides_its_python_spark_and_listed_modules(module: str, importable: bool) -> None:
    assert GLUE_5_0.importable(module) is importable


def test_job_code_wheel_modules_are_its_top_level_names_without_metadata(tmp_path: Path) -> None:
    wheel = tmp_path / "demo-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for name in ("demo/__init__.py", "demo_single.py", "demo-1.0.dist-info/METADATA", "demo-1.0.data/x"):
            archive.writestr(name, "")
    assert wheel_modules(wheel) == {"demo", "demo_single"}


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"requirements": ["requests>=2"]}, "requirements[0]: 'requests>=2' is not pinned"),
        ({"requirements": ["requests"]}, "requirements[0]: 'requests' is not pinned"),
        ({"requirements": ["requests == 2.32.3"]}, "'requests == 2.32.3' has spaces: write 'requests==2.32.3'"),
        ({"runner": "wait", "code": "jobs"}, "only pyspark types ship code"),
    ],
)
def test_job_types_requirements_are_pinned_and_code_is_pyspark_only(fields: dict[str, object], message: str) -> None:
    declared = {"name": "mine", "runner": "pyspark", "entry": "jobs/one.py:run", **fields}
    if fields.get("runner") == "wait":
        declared = {
            "name": "mine",
            "runner": "wait",
            "params_schema": {"type": "object", "required": ["seconds"], "properties": {"seconds": {}}},
            **{key: value for key, value in fields.items() if key != "runner"},
        }
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
        JobType.model_validate(declared)
    assert JobType.model_validate(
        {"name": "ok", "runner": "pyspark", "entry": "a.py:run", "requirements": ["Unidecode==1.4.0", "w/x.whl"]}
    ).pinned == ["Unidecode==1.4.0"]


def test_job_types_entry_outside_its_code_folder_is_refused(tmp_path: Path) -> None:
    write(tmp_path, {"jobs/one.py": "def run(s, p):\n    return {}\n", "lib/x.py": ""})
    with pytest.raises(ValueError, match="is not inside the code folder"):
        pyspark(tmp_path, "jobs/one.py", code="lib").check_files()
    with pytest.raises(ValueError, match=r"code: .* is not a folder"):
        pyspark(tmp_path, "jobs/one.py", code="nowhere").check_files()
    with pytest.raises(ValueError, match="requirements: no wheel file"):
        pyspark(tmp_path, "jobs/one.py", requirements=["dist/mine-1.0-py3-none-any.whl"]).check_files()


def test_job_code_repository_example_imports_only_what_it_ships_or_requires() -> None:
    """The jobs page's textstats example: a helper module of its own and one third-party package."""
    from longjobs.engine.jobs import load_catalog_file

    textstats = load_catalog_file(REPO_ROOT / "jobs.json").get("textstats")
    assert textstats is not None and textstats.entry_module == "textstats.job"
    checked = check_imports(textstats, GLUE_5_0)
    assert [problem.split(" imports ")[1][:11] for problem in checked.problems] == ["'unidecode'"]
    assert check_imports(textstats, GLUE_5_0, frozenset({"unidecode"})).problems == ()


def test_job_code_module_the_entry_imports_that_is_not_python_is_refused_naming_it(tmp_path: Path) -> None:
    write(tmp_path, {"jobs/pkg/__init__.py": "", "jobs/pkg/job.py": "from pkg import helpers\n\ndef run(s, p):\n"
                     "    return {}\n", "jobs/pkg/helpers.py": "def broken(:\n"})  # fmt: skip
    with pytest.raises(JobTypeError) as refused:
        imports_of(pyspark(tmp_path, "jobs/pkg/job.py", code="jobs"))
    assert str(refused.value) == (
        f"job type 'mine': {tmp_path / 'jobs/pkg/helpers.py'} is not valid Python: invalid syntax (line 1)"
    )
