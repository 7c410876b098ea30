"""A pyspark type's code and requirements on the local Spark's path, as Glue puts them on its own.

Offline, every type runs in the runtime's one Python process and one SparkSession, so:

- its `code` folder goes on `sys.path` for the driver (an entry file without one is loaded from its file),
  and its shipped files, zipped, to the session (`addPyFile`) for the executors, where its UDFs run;
- its `requirements` are installed once into an environment of the type's own (`pip install --target`, in
  the cache beside synth's wheels, keyed by what is asked), put on the driver's `sys.path` after the
  runtime's own packages, and zipped to the executors. A zip imports pure-Python packages only: a package
  with compiled modules works in the driver offline, and everywhere on Glue. When pip cannot install them
  (no network, a version that does not exist), the job fails with pip's reason and the command to run;
- two types may not put the same top-level module on the path from two folders: the second is refused
  with both folders named, rather than one type silently running the other's module;
- `load_entry_file` loads an entry file that ships alone under a private module name, never its bare
  stem: `jobs/json.py` or `jobs/numpy.py` registered as `json` or `numpy` would replace that module for
  every type and for the runtime itself, in the one process they share.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import json
import sys
import tempfile
import threading
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from longjobs.engine.jobs.code import cache_dir, pip_into, shipped_files, top_level_names
from longjobs.engine.jobs.types import JobType

if TYPE_CHECKING:
    from collections.abc import Callable

    from pyspark.sql import SparkSession

ENTRY_MODULE_PREFIX = "_longjobs_entry_"
"""`load_entry_file` names an entry file's module `_longjobs_entry_<type>`: a name no real module has."""


class JobCodeError(RuntimeError):
    """A type's code or requirements cannot be put on the path; the message says why and what to run."""


_lock = threading.Lock()
_prepared: dict[str, tuple[Path, ...]] = {}
_owners: dict[str, Path] = {}


def env_dir(job_type: JobType) -> Path:
    """Where the type's requirements are installed for this Python."""
    asked = {
        "requirements": list(job_type.pinned),
        "wheels": {path.name: hashlib.sha256(path.read_bytes()).hexdigest() for path in job_type.wheel_files},
        "python": f"{sys.version_info.major}.{sys.version_info.minor}",
    }
    digest = hashlib.sha256(json.dumps(asked, sort_keys=True).encode()).hexdigest()[:32]
    return cache_dir() / "job-envs" / digest


def install_arguments(job_type: JobType, target: Path) -> list[str]:
    return [
        "install", "--quiet", "--disable-pip-version-check", "--target", str(target),
        *job_type.pinned, *map(str, job_type.wheel_files),
    ]  # fmt: skip


def ensure_env(job_type: JobType) -> Path | None:
    """The type's installed requirements (installed now when missing); None when it has none."""
    if not job_type.requirements:
        return None
    folder = env_dir(job_type)
    if not folder.is_dir():
        failed = pip_into(folder, functools.partial(install_arguments, job_type))
        if failed:
            command = [sys.executable, "-m", "pip", *install_arguments(job_type, folder)]
            raise JobCodeError(
                f"job type {job_type.name!r}: cannot install its requirements: {failed}; "
                f"install them with: {' '.join(command)}"
            )
    return folder


def prepare(job_type: JobType, spark: SparkSession | None = None) -> None:
    """Put the type's code and requirements on the driver's path and, given `spark`, the executors'.
    Once per type and process; safe from several worker threads."""
    with _lock:
        if job_type.name in _prepared:
            return
        root = job_type.code_root
        if root is not None:
            for name in top_level_names(job_type):
                owner = _owners.setdefault(name, root)
                if owner.resolve() != root.resolve():
                    raise JobCodeError(
                        f"job type {job_type.name!r}: its module {name!r} (in {root}) is also in {owner}, another "
                        "type's code; offline, all types share one Python process: rename one"
                    )
        env = ensure_env(job_type)
        if root is not None and str(root) not in sys.path:
            sys.path.insert(0, str(root))
        if env is not None and str(env) not in sys.path:
            sys.path.append(str(env))
        zips = (_code_zip(job_type), *((_folder_zip(env),) if env is not None else ()))
        if spark is not None:
            for path in zips:
                spark.sparkContext.addPyFile(str(path))
        _prepared[job_type.name] = zips


def entry_module_name(job_type: JobType) -> str:
    """The private module name of a type's entry file, offline: one per type, never a real module's."""
    return ENTRY_MODULE_PREFIX + job_type.name


def load_entry_file(job_type: JobType) -> Callable[..., Any]:
    """The entry function of a type whose entry file ships alone, loaded from the file as
    `entry_module_name(job_type)` (afresh on each call, as a run on Glue imports it afresh).

    The module is in `sys.modules` under that name, so its own classes and functions resolve by their
    module (pickle, dataclasses). No executor can import that name, so its functions are pickled by value
    (cloudpickle's `register_pickle_by_value`): a UDF travels with its code."""
    path = job_type.entry_file
    name = entry_module_name(job_type)
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise JobCodeError(f"job type {job_type.name!r}: cannot load its entry {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    from pyspark import cloudpickle  # the offline worker runs Spark: loaded with it

    cloudpickle.register_pickle_by_value(module)  # type: ignore[no-untyped-call]
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    entry = getattr(module, job_type.entry_function, None)
    if not callable(entry):
        raise JobCodeError(f"job type {job_type.name!r}: {path} has no function {job_type.entry_function!r}")
    return entry  # type: ignore[no-any-return]


def _code_zip(job_type: JobType) -> Path:
    target = Path(tempfile.mkdtemp(prefix="longjobs-code-")) / f"{job_type.name}.zip"
    with zipfile.ZipFile(target, "w") as archive:
        for path, inside in shipped_files(job_type):
            archive.write(path, inside)
    return target


def _folder_zip(folder: Path) -> Path:
    target = Path(tempfile.mkdtemp(prefix="longjobs-env-")) / f"{folder.name}.zip"
    with zipfile.ZipFile(target, "w") as archive:
        for path in sorted(folder.rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts:
                archive.write(path, path.relative_to(folder).as_posix())
    return target
