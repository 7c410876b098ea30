"""A pyspark type's code and packages, staged at synth the way Glue takes them.

- **Its code**: the entry file alone, or its `code` folder whole, zipped as an asset and put on the job's
  `--extra-py-files` (Glue adds the zip to `sys.path`; the folder's top-level modules import by name).
- **Its requirements**: the pinned packages and wheel files, downloaded with their dependencies as wheels
  for Glue's platform and Python (`pip download --only-binary=:all:`), in one "zip of wheels" that the job
  installs from with `--no-index`: a job needs no internet at start
  (https://docs.aws.amazon.com/glue/latest/dg/aws-glue-programming-python-libraries.html, Glue 5.0 and later).
  Downloads are kept in a cache keyed by what was asked (`LONGJOBS_CACHE`, else `~/.cache/longjobs`), so a
  second synth reads no network.
- **Its imports**, checked: every module the entry reaches must be shipped, installed by the requirements or
  provided by the Glue version (`glue_runtime`), else synth fails naming the file, the line and the module.
  An import made by name at run time (`importlib.import_module`) or guarded by `except ImportError` is
  warned about instead.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from longjobs.construct.glue_runtime import GlueRuntime
from longjobs.engine.jobs.code import cache_dir, imports_of, pip_into, shipped_files, top_level_names
from longjobs.engine.jobs.types import JobType, JobTypeError

GLUE_PLATFORM = "manylinux2014_x86_64"
"""Glue's workers: x86-64 Amazon Linux (the platform of AWS's own zip-of-wheels recipe)."""
WHEELS_FOLDER = "wheels"
"""The folder of the zip of wheels that holds the wheels and `requirements.txt` (as AWS's recipe builds it)."""


@dataclass(frozen=True)
class StagedWheels:
    """A folder holding `wheels/` (every wheel and `requirements.txt`) and the modules the wheels install."""

    folder: Path
    modules: frozenset[str]


def stage_code(job_type: JobType) -> Path:
    """A new folder holding what ships with the type, at its paths inside the job's zip."""
    folder = Path(tempfile.mkdtemp(prefix="longjobs-code-"))
    for path, inside in shipped_files(job_type):
        target = folder / inside
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, target)
    return folder


def stage_wheels(job_type: JobType, runtime: GlueRuntime) -> StagedWheels | None:
    """The type's requirements as wheels for `runtime`, from the cache or downloaded; None without any."""
    if not job_type.requirements:
        return None
    wheel_files = job_type.wheel_files
    asked = {
        "requirements": list(job_type.pinned),
        "wheels": {path.name: hashlib.sha256(path.read_bytes()).hexdigest() for path in wheel_files},
        "python": runtime.python,
        "platform": GLUE_PLATFORM,
    }
    digest = hashlib.sha256(json.dumps(asked, sort_keys=True).encode()).hexdigest()[:32]
    folder = cache_dir() / "glue-wheels" / digest
    if not (folder / WHEELS_FOLDER / "requirements.txt").is_file():
        _download(job_type, runtime, wheel_files, folder)
    wheels = sorted((folder / WHEELS_FOLDER).glob("*.whl"))
    return StagedWheels(folder=folder, modules=frozenset(name for wheel in wheels for name in wheel_modules(wheel)))


def _download(job_type: JobType, runtime: GlueRuntime, wheel_files: list[Path], folder: Path) -> None:
    def arguments(target: Path) -> list[str]:
        return [
            "download", "--quiet", "--disable-pip-version-check", "--only-binary=:all:",
            "--platform", GLUE_PLATFORM, "--python-version", runtime.python_tag, "--implementation", "cp",
            "--dest", str(target / WHEELS_FOLDER), *job_type.pinned, *map(str, wheel_files),
        ]  # fmt: skip

    def finish(target: Path) -> None:
        lines = _requirement_lines(job_type)
        (target / WHEELS_FOLDER / "requirements.txt").write_text("".join(f"{line}\n" for line in lines))

    failed = pip_into(folder, arguments, finish)
    if failed:
        raise JobTypeError(
            f"job type {job_type.name!r}: cannot download its requirements as wheels for Glue {runtime.version} "
            f"(Python {runtime.python}, {GLUE_PLATFORM}): {failed} (ran: pip {' '.join(arguments(folder))})"
        )


def _requirement_lines(job_type: JobType) -> list[str]:
    """What pip installs from the zip: the pinned names, and each wheel file by its name and version."""
    lines = list(job_type.pinned)
    for wheel in job_type.wheel_files:
        name, version = wheel.name.split("-")[:2]
        lines.append(f"{name}=={version}")
    return lines


def wheel_modules(wheel: Path) -> set[str]:
    """The top-level modules and packages a wheel installs (its files outside `*.dist-info`/`*.data`)."""
    names = set()
    with zipfile.ZipFile(wheel) as archive:
        for member in archive.namelist():
            first = member.split("/")[0]
            if first.endswith((".dist-info", ".data")):
                continue
            name = first.split(".")[0] if "/" not in member else first
            if name.isidentifier():
                names.add(name)
    return names


@dataclass(frozen=True)
class ImportCheck:
    """What synth says of a type's imports: problems refuse it, warnings do not."""

    problems: tuple[str, ...]
    warnings: tuple[str, ...]


def check_imports(job_type: JobType, runtime: GlueRuntime, wheel_modules: frozenset[str] = frozenset()) -> ImportCheck:
    """Each module the type's code reaches that will not be there when Glue runs it."""
    found = imports_of(job_type)
    own = top_level_names(job_type)
    problems: list[str] = []
    warnings: list[str] = []
    for item in found.external:
        if item.top in own or item.top in wheel_modules or runtime.importable(item.module):
            continue
        message = (
            f"{item.where()} imports {item.named!r}, which {runtime.name} does not provide and the job "
            "does not ship: add its package to `requirements`"
            + (" or the module to the `code` folder" if job_type.code is not None else ", or set `code`")
        )
        (warnings if item.optional else problems).append(
            message + (" (the import is guarded by `except ImportError`)" if item.optional else "")
        )
    warnings += [
        f"{item.where()} imports a module by name at run time: synth cannot check that it ships"
        for item in found.dynamic
    ]
    return ImportCheck(problems=tuple(problems), warnings=tuple(warnings))
