"""The Glue script of every pyspark job type: parse Glue's arguments, call the type's `run(spark, params)`,
print its summary and store it where the workflow reads it.

How a type reaches Glue: the construct makes one Glue job per pyspark type, with this file as its
script, the type's entry file (and the project's `pipeline` package, as a zip) in `--extra-py-files`,
which Glue puts on the script's `sys.path`, and the entry's module and function as default arguments.
Each run adds the job's params as JSON and where to write the summary:

    --job-module wordcount --job-function run --params '{"input": "s3://..."}' [--summary-path s3://...]

Outside Glue (argparse instead of `awsglue.utils.getResolvedOptions`) `--job-file path.py` loads the
entry from a file instead of importing its module:

    python -m longjobs.pipeline.glue_entry --job-file jobs/wordcount.py --job-function run --params '{...}'

The summary is what `run` returns, written as JSON the workflow can read (`summary_json`). A job that
calls `sys.exit()` or `os._exit()` while it is loaded or run returns none: the script fails (`JobExit`)
whatever the exit code, as the offline worker fails such a job (both run it in `exit_fails_the_job`).
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import math
import os
import sys
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

REQUIRED_ARGS = ("job-function", "params")
OPTIONAL_ARGS = ("job-module", "job-file", "summary-path")

EntryFunction = Callable[["SparkSession", Mapping[str, Any]], Mapping[str, Any]]


class EntryError(ValueError):
    """The arguments do not name a callable entry, or its params are not a JSON object."""


class JobExit(RuntimeError):
    """The job's code called `sys.exit()` or `os._exit()` while it was loaded or run, so it returned no summary.

    Raised in the exit's place, so the script ends with an error whatever the exit code. Glue ends a
    run FAILED when its script "terminated with an unknown exit code"
    (https://docs.aws.amazon.com/glue/latest/dg/job-run-statuses.html), so a script that exits 0 ends
    SUCCEEDED, with no summary written. The workflow takes a run that succeeded without a summary for the
    job's success (`longjobs.construct.workflow.glue_pyspark_step`) and deletes its message. Failed, the
    exit is the job's error, released and retried as any other, as the offline worker answers it
    (`longjobs.offline.worker`). Offline, an `os._exit()` would also end the runtime's process, and every
    job in flight with it."""


@dataclass(frozen=True)
class EntryArgs:
    function: str
    params: dict[str, Any]
    module: str | None = None
    file: str | None = None
    summary_path: str | None = None


def parse_args(argv: Sequence[str]) -> EntryArgs:
    resolved = _resolve(argv)
    try:
        params = json.loads(resolved["params"])
    except ValueError as exc:
        raise EntryError(f"--params is not JSON: {exc}") from None
    if not isinstance(params, dict):
        raise EntryError(f"--params must be a JSON object, got {type(params).__name__}")
    if not resolved.get("job_module") and not resolved.get("job_file"):
        raise EntryError("give --job-module (on Glue) or --job-file")
    return EntryArgs(
        function=resolved["job_function"],
        params=params,
        module=resolved.get("job_module"),
        file=resolved.get("job_file"),
        summary_path=resolved.get("summary_path"),
    )


def _resolve(argv: Sequence[str]) -> dict[str, str]:
    return resolve_arguments(
        argv, REQUIRED_ARGS, OPTIONAL_ARGS, prog="python -m longjobs.pipeline.glue_entry", about=__doc__
    )


def resolve_arguments(
    argv: Sequence[str], required: Sequence[str], optional: Sequence[str], *, prog: str, about: str | None
) -> dict[str, str]:
    """A Glue script's `--name value` arguments (`argv`: the script first) as a mapping with snake_case keys:
    on Glue by `getResolvedOptions`, Glue's own arguments left out; anywhere else by argparse, so the
    script runs locally too. `about` is the script's docstring, whose first paragraph the help shows."""
    try:
        from awsglue.utils import getResolvedOptions  # type: ignore[import-not-found]  # exists only on Glue
    except ImportError:
        parser = argparse.ArgumentParser(prog=prog, description=(about or "").split("\n\n")[0])
        for name in required:
            parser.add_argument(f"--{name}", required=True)
        for name in optional:
            parser.add_argument(f"--{name}")
        parsed = vars(parser.parse_args(list(argv[1:])))
        return {key: value for key, value in parsed.items() if value is not None}
    # getResolvedOptions fails on a listed option that is absent, so optional ones are listed when given.
    present = [name for name in optional if f"--{name}" in argv]
    resolved: dict[str, str] = getResolvedOptions(list(argv), [*required, *present])
    # It also returns Glue's own arguments (JOB_NAME, JOB_RUN_ID, ...): keep only the script's.
    wanted = {name.replace("-", "_") for name in (*required, *present)}
    return {key: value for key, value in resolved.items() if key in wanted}


def load_entry(function: str, *, module: str | None = None, file: str | Path | None = None) -> EntryFunction:
    """The entry function, from a file (loaded under its own name) or an importable module."""
    if file is not None:
        path = Path(file)
        spec = importlib.util.spec_from_file_location(path.stem, path)
        if spec is None or spec.loader is None:
            raise EntryError(f"cannot load {path}")
        loaded = importlib.util.module_from_spec(spec)
        sys.modules[path.stem] = loaded  # so the module's own pickled functions (UDFs) resolve
        spec.loader.exec_module(loaded)
    elif module is not None:
        loaded = importlib.import_module(module)
    else:
        raise EntryError("no module or file to load the entry from")
    entry = getattr(loaded, function, None)
    if not callable(entry):
        raise EntryError(f"{loaded.__name__} has no function {function!r}")
    return entry  # type: ignore[no-any-return]


def run_entry(entry: EntryFunction, spark: SparkSession, params: Mapping[str, Any]) -> dict[str, Any]:
    """Call the entry; its summary must be a JSON object (a mapping)."""
    summary = entry(spark, params)
    if not isinstance(summary, Mapping):
        raise EntryError(f"the job's run() returned {type(summary).__name__}, not a dict (its summary)")
    return dict(summary)


SUMMARY_MAX_BYTES = 65_536
"""The largest summary the workflow reads into its state. Step Functions keeps a state's data under 256 KiB,
and more fails the execution with `States.DataLimitExceeded`, which no `States.ALL` catch takes
(https://docs.aws.amazon.com/step-functions/latest/dg/concepts-error-handling.html): a job that succeeded
would be retried."""


def _json_numbers(value: Any) -> Any:
    """`value` with each float JSON has no form for (NaN, Infinity) as its name, a string."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, Mapping):
        return {key: _json_numbers(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_json_numbers(item) for item in value]
    return value


def summary_json(summary: Mapping[str, Any]) -> str:
    """The summary as JSON the workflow can read (`default=str` for dates and the like): a float JSON has
    no form for as its name, and a summary over `SUMMARY_MAX_BYTES` as its size and its keys."""
    text = json.dumps(_json_numbers(summary), sort_keys=True, default=str, allow_nan=False)
    size = len(text.encode())
    if size <= SUMMARY_MAX_BYTES:
        return text
    cut = {"summary_bytes": size, "summary_keys": sorted(str(key) for key in summary)[:100], "truncated": True}
    return json.dumps(cut, sort_keys=True)


def main(argv: Sequence[str] | None = None, session: Callable[[], SparkSession] | None = None) -> int:
    args = parse_args(sys.argv if argv is None else argv)
    with exit_fails_the_job():
        entry = load_entry(args.function, module=args.module, file=args.file)
    spark = (session or _default_session)()
    with exit_fails_the_job():
        summary = summary_json(run_entry(entry, spark, args.params))
    print(summary)
    if args.summary_path is not None:
        write_text(spark, args.summary_path, summary + "\n")
    return 0


def write_text(spark: SparkSession, path: str, text: str) -> None:
    """Write one small file through Hadoop's file system: S3 on Glue, the local disk elsewhere, same code."""
    jvm = spark.sparkContext._jvm
    assert jvm is not None, "a live SparkContext has a JVM"
    target = jvm.org.apache.hadoop.fs.Path(path)
    stream = target.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration()).create(target, True)
    try:
        stream.write(bytearray(text.encode("utf-8")))
    finally:
        stream.close()


class _OsExit(SystemExit):
    """A guarded thread's `os._exit(code)`, raised where the call was. A SystemExit, as `sys.exit()` raises, so
    the job's own `except Exception` does not take it for an error it may handle and go on."""


class _Guarded(threading.local):
    """Per thread: how many `exit_fails_the_job` blocks are open, and in which process they opened."""

    depth = 0
    pid = 0


_guarded = _Guarded()
_os_exit = os._exit
"""The process's own `os._exit`, called for every thread not in a guarded block."""
_install_lock = threading.Lock()


def _exit_unless_guarded(status: int) -> NoReturn:
    """`os._exit` for the whole process: a thread in a guarded block raises instead (`_OsExit`), any other
    thread exits. A process forked inside a block (its child inherits the thread's depth) exits too."""
    if _guarded.depth > 0 and _guarded.pid == os.getpid():
        raise _OsExit(status)
    _os_exit(status)


def _install_exit_guard() -> None:
    """Put `_exit_unless_guarded` in `os._exit`'s place, once: again is a no-op."""
    with _install_lock:
        if os._exit is not _exit_unless_guarded:
            os._exit = _exit_unless_guarded


@contextmanager
def exit_fails_the_job() -> Iterator[None]:
    """The job's `sys.exit()` or `os._exit()` inside, whatever its code, as `JobExit`: the job returned no
    summary, and the process goes on. Both runtimes run a job's code in it: `main` on Glue, the worker offline.

    `os._exit()` ends the process at once, with no exception to catch. Offline that process is the runtime,
    with every job in flight; on Glue, `os._exit(0)` ends the run SUCCEEDED with no summary. So `os._exit` is
    replaced, process-wide, by a wrapper that raises on a thread inside this block and exits on any other.
    The offline runtime runs several jobs at once, one per thread, and its own threads must still exit for
    real: hence a depth per thread, not one flag. Python offers no hook on `os._exit` (it raises no audit
    event), and no library guards it, so the wrapper is written here.

    Its limits: only a call through `os._exit`, on the thread that entered the block, is caught. These
    still end their process: a thread the job starts, an `_exit` imported before the wrapper was in place,
    native code that calls `_exit()`, and the job's own child processes."""
    _install_exit_guard()
    depth, pid = _guarded.depth, _guarded.pid
    _guarded.depth, _guarded.pid = depth + 1, os.getpid()
    try:
        yield
    except SystemExit as exc:
        call = "os._exit" if isinstance(exc, _OsExit) else "sys.exit"
        raise JobExit(f"the job called {call}({exc.code!r}): it returned no summary") from exc
    finally:
        _guarded.depth, _guarded.pid = depth, pid


def _default_session() -> SparkSession:
    """On Glue, the session of a `GlueContext`; elsewhere a plain one. Glue writes a run's job metrics
    (`glue.driver.*`, the dashboard's Glue graphs) only once the script has made a `GlueContext`
    (https://repost.aws/knowledge-center/glue-job-metrics-cloudwatch): a script of DataFrames alone,
    as a type's `run(spark, params)` is, would leave those graphs empty."""
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    try:
        from awsglue.context import GlueContext  # type: ignore[import-not-found]  # exists only on Glue
    except ImportError:
        return SparkSession.builder.appName("long-job").getOrCreate()
    session: SparkSession = GlueContext(SparkContext.getOrCreate()).spark_session
    return session


if __name__ == "__main__":
    raise SystemExit(main())
