"""The events pipeline's command line: parse its arguments, run the pipeline, print and store its summary.

The stack's Glue jobs run `longjobs.pipeline.glue_entry`, which calls the `spark` type's entry
(`longjobs.pipeline.events.run`) with the job's params; this script takes the same values as named
arguments, for a run by hand, locally or as a Glue job of one's own.

Arguments (Glue passes each as `--name value`): `--input`, `--date`, `--output`, `--quarantine`, and
optionally `--lateness-minutes` and `--summary-path` (where the summary JSON is also written, since a Glue
job run returns no output of its own). On Glue they are read with `awsglue.utils.getResolvedOptions`;
anywhere else with argparse, so the script also runs locally:
`python -m longjobs.pipeline.glue_job --input DIR --date 2024-05-01 --output OUT --quarantine Q`.

The arguments are validated before a SparkSession is created, so a bad job fails in seconds. Run by
hand, a bad one is a one-line message and exit code 2. On Glue the error is raised, so the job run fails
with it.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from longjobs.pipeline.glue_entry import resolve_arguments, write_text
from longjobs.pipeline.params import ParamProblem, PipelineParamError, PipelineParams, path_problem

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

REQUIRED_ARGS = ("input", "date", "output", "quarantine")
OPTIONAL_ARGS = ("lateness-minutes", "summary-path")


@dataclass(frozen=True)
class GlueArgs:
    params: PipelineParams
    summary_path: str | None


def parse_args(argv: Sequence[str]) -> GlueArgs:
    """The job's arguments from `argv` (`sys.argv`: the script first), validated."""
    resolved = _resolve(argv)
    summary_path = resolved.pop("summary_path", None)
    if summary_path is not None and (rule := path_problem(summary_path)):
        raise PipelineParamError([ParamProblem("summary_path", rule)])
    return GlueArgs(PipelineParams.from_mapping(resolved), summary_path)


def _resolve(argv: Sequence[str]) -> dict[str, str]:
    return resolve_arguments(
        argv, REQUIRED_ARGS, OPTIONAL_ARGS, prog="python -m longjobs.pipeline.glue_job", about=__doc__
    )


def main(argv: Sequence[str] | None = None, session: Callable[[], SparkSession] | None = None) -> int:
    """Validate the arguments, then run the pipeline on `session()` (by default the Glue/local session)."""
    args = parse_args(sys.argv if argv is None else argv)
    spark = (session or _default_session)()
    from longjobs.pipeline.job import run  # imports Spark: only once the arguments are known to be good

    summary = json.dumps(run(spark, args.params), sort_keys=True)
    print(summary)
    if args.summary_path is not None:
        write_text(spark, args.summary_path, summary + "\n")
    return 0


def command(argv: Sequence[str] | None = None) -> int:
    """`main` as the script's command: off Glue, bad parameters are one line on stderr and exit code 2.

    On Glue the error is raised, so the job run fails with the exception and its message: an exit code
    would fail it too, but with no word of the cause."""
    try:
        return main(argv)
    except PipelineParamError as exc:
        if importlib.util.find_spec("awsglue") is not None:  # on Glue (`resolve_arguments` tells it the same way)
            raise
        print(exc, file=sys.stderr)
        return 2


def _default_session() -> SparkSession:
    from pyspark.sql import SparkSession

    from longjobs.pipeline.job import SESSION_CONF

    builder = SparkSession.builder.appName("events-pipeline")
    for key, value in SESSION_CONF.items():
        builder = builder.config(key, value)
    return builder.getOrCreate()


if __name__ == "__main__":
    raise SystemExit(command())
