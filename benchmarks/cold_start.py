"""Cold start of each Lambda handler as deployed: its import, and its first invocation.

    python -m benchmarks.cold_start [--runs 9] [--tracing service xray-sdk] [--json]

"As deployed" means what Lambda runs, rebuilt offline:

- the code: the functions' asset of the default stack, synthesized in-process (`LongJobsStack` with the
  context of cdk.json, no cdk-nag), taken from the cloud assembly (`asset.<hash>/`), with the bytecode it
  ships and no other: `PYTHONDONTWRITEBYTECODE=1`, since Lambda's code folder (/var/task) is read-only, so
  a module the asset does not ship compiled is compiled again at every cold start;
- the path Lambda gives it: the asset first, then the Powertools layer's packages (`/opt/python`), then
  the runtime's boto3 and botocore, each a folder mirroring the installed packages here and compiled
  there (the layer and the runtime ship compiled modules, whether or not the installed packages have
  theirs), and the standard library; no site-packages (`python -S`);
- the environment the template gives each function (its `Environment.Variables`; references resolved to
  placeholders, the resource names to the benchmark's own) and the variables Lambda itself sets.

Each case is measured in a fresh interpreter `--runs` times after one untimed run: the handler module's
cumulative import time from `-X importtime` (and the import's CPU time, which a loaded machine does not
inflate as it does the wall time: on an idle one they agree), and then the wall time of its first
invocation on a representative event (the receiver: one `wait` job's SQS record; the extender: its
scheduled event; the watcher: a failed execution's status change), against a local moto server standing in for SQS,
DynamoDB and Step Functions, so that work moved out of the import into the first call is still counted
(building the clients, loading their service models, the job catalog). Each is also measured with the
asset's bytecode removed, the gain of shipping it. The five heaviest imports under each (the last run's)
name the cause of a regression.

The tracing setting changes only the tracing variables (`tracing_environment`); `opentelemetry` runs
under the ADOT layer's wrapper, which is not available offline, so it is not measured here.
"""

from __future__ import annotations

import argparse
import compileall
import json
import logging
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from importlib.util import find_spec
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
HANDLERS = {
    "receiver": "longjobs.functions.receiver",
    "extender": "longjobs.functions.extender",
    "watcher": "longjobs.functions.watcher",
}
REGION = "us-east-1"
LAYER_PACKAGES = (
    "aws_lambda_powertools",
    "pydantic",
    "pydantic_core",
    "annotated_types",
    "typing_inspection",
    "typing_extensions",
    "fastjsonschema",
    "aws_xray_sdk",
    "wrapt",
)
"""What the Powertools layer (`[all]` extras) holds, apart from boto3's packages, which it leaves to the runtime."""
RUNTIME_PACKAGES = ("boto3", "botocore", "s3transfer", "dateutil", "urllib3", "six", "jmespath")
"""boto3 and its dependencies, from the Lambda runtime."""
LAMBDA_ENV = {
    "AWS_REGION": REGION,
    "AWS_DEFAULT_REGION": REGION,
    "AWS_EXECUTION_ENV": "AWS_Lambda_python3.13",
    "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": "256",
    "LAMBDA_TASK_ROOT": "/var/task",
    "AWS_ACCESS_KEY_ID": "benchmark",  # moto's server takes any credentials
    "AWS_SECRET_ACCESS_KEY": "benchmark",
    "PYTHONDONTWRITEBYTECODE": "1",  # /var/task is read-only: nothing compiled at a cold start is kept
}
"""What Lambda sets in every function's environment (`AWS_LAMBDA_FUNCTION_NAME` is set per function)."""
_LINE = re.compile(r"^import time:\s+(\d+) \|\s+(\d+) \|(\s*)(\S+)$")
TOP = 5
TRACE_HEADER = "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1"


@dataclass(frozen=True)
class Function:
    """One function as the template deploys it: its handler's module, code folder and environment."""

    name: str
    module: str
    code: Path
    environment: dict[str, str]


@dataclass(frozen=True)
class Run:
    """One cold start: the handler's import (ms, `-X importtime`) and its first invocation (ms, wall)."""

    import_ms: float
    invoke_ms: float
    heaviest_imports: list[tuple[str, float]] = field(default_factory=list)
    heaviest_in_invocation: list[tuple[str, float]] = field(default_factory=list)
    import_cpu_ms: float | None = None
    """The import's CPU time (the process's, user and system): what the wall time is when the machine is idle."""


@dataclass(frozen=True)
class Case:
    handler: str
    tracing: str
    bytecode: bool
    """The asset's bytecode shipped (as the construct builds it), or removed."""
    runs: int
    import_median_ms: float
    import_min_ms: float
    import_max_ms: float
    invoke_median_ms: float
    heaviest_imports: list[tuple[str, float]]
    heaviest_in_invocation: list[tuple[str, float]]
    import_cpu_median_ms: float | None = None
    """On a loaded machine the wall time (`import_median_ms`) waits for the CPU too; this does not."""


def importtime_tree(stderr: str, module: str) -> tuple[float, list[tuple[str, float]], list[tuple[str, float]]]:
    """From `-X importtime` output: `module`'s cumulative import time (ms), the heaviest imports under it,
    and the heaviest made after it (during the first invocation), TOP of each (see `heaviest`)."""
    total: float | None = None
    lines: list[tuple[int, str, float, float]] = []  # depth, name, self ms, cumulative ms
    under: list[tuple[int, str, float, float]] = []
    for line in stderr.splitlines():
        match = _LINE.match(line)
        if match is None:
            continue
        depth, name = len(match.group(3)) // 2, match.group(4)
        entry = (depth, name, int(match.group(1)) / 1000, int(match.group(2)) / 1000)
        if total is None and depth == 0:
            if name == module:  # importtime prints a module after its children
                total, under, lines = entry[3], [(d - 1, *rest) for d, *rest in lines], []  # type: ignore[misc]
                continue
            lines = []  # another top-level import, finished before the handler's
            continue
        lines.append(entry)
    if total is None:
        raise RuntimeError(f"no import time reported for {module}")
    return total, heaviest(under), heaviest([entry for entry in lines if entry[0] >= 0])


def heaviest(lines: Sequence[tuple[int, str, float, float]]) -> list[tuple[str, float]]:
    """The TOP costliest parts of a stretch of importtime lines (depth 0 = imported by our own code): each
    other package's module that our code imports (its cumulative time: the package and what it pulls in)
    and each of our own modules (its own time: running its body). They name what a cold start pays for."""
    parts: dict[str, float] = {}
    for index, (depth, name, self_ms, cumulative_ms) in enumerate(lines):
        if name.startswith("longjobs."):
            parts[name] = max(parts.get(name, 0.0), self_ms)
            continue
        # importtime prints a module after its children: the parent is the next line one level up
        parent = next((other for d, other, *_ in lines[index + 1 :] if d == depth - 1), None) if depth else None
        if depth == 0 or (parent is not None and parent.startswith("longjobs.")):
            parts[name] = max(parts.get(name, 0.0), cumulative_ms)
    ranked = sorted(parts.items(), key=lambda item: item[1], reverse=True)[:TOP]
    return [(name, round(ms, 1)) for name, ms in ranked]


def layer_folders(root: Path) -> list[Path]:
    """The Powertools layer (/opt/python) and the runtime's boto3, each a folder mirroring the packages
    installed here (its files links to theirs), compiled into the folder's own `__pycache__`: the layer and
    the runtime ship compiled modules, whatever bytecode the installed packages happen to have (an
    installer that does not compile, such as uv, leaves none; a single-file module such as
    `typing_extensions` linked on its own would leave its bytecode behind)."""
    folders = []
    for name, packages in (("opt-python", LAYER_PACKAGES), ("runtime", RUNTIME_PACKAGES)):
        folder = root / name
        folder.mkdir()
        for package in packages:
            spec = find_spec(package)
            if spec is None or spec.origin is None:
                continue
            origin = Path(spec.origin)
            if spec.submodule_search_locations:
                shutil.copytree(
                    origin.parent,
                    folder / origin.parent.name,
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"),
                    copy_function=os.symlink,
                )
            else:
                (folder / origin.name).symlink_to(origin)
        compileall.compile_dir(folder, quiet=1, workers=0)  # timestamps of the linked sources: valid as they are
        folders.append(folder)
    return folders


def without_bytecode(code: Path, root: Path) -> Path:
    """A copy of the asset without its `__pycache__` folders: the asset as it would ship uncompiled."""
    copy = root / "asset-source-only"
    shutil.copytree(code, copy, ignore=shutil.ignore_patterns("__pycache__"))
    return copy


def resolved(value: Any, name: str) -> str:
    """A template value as a string: CloudFormation references become placeholders of the same shape."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and "Fn::Join" in value:
        separator, parts = value["Fn::Join"]
        return str(separator).join(resolved(part, name) for part in parts)
    if isinstance(value, dict) and "Ref" in value:
        return {"AWS::Region": REGION, "AWS::AccountId": "123456789012", "AWS::Partition": "aws"}.get(
            value["Ref"], f"benchmark-{value['Ref'].lower()}"
        )
    if isinstance(value, dict) and "Fn::GetAtt" in value:
        return f"arn:aws:sqs:{REGION}:123456789012:benchmark-{str(value['Fn::GetAtt'][0]).lower()}"
    return f"benchmark-{name.lower()}"


def synthesized_functions(outdir: Path) -> list[Function]:
    """The three functions of the default stack (cdk.json's context), synthesized into `outdir`."""
    import aws_cdk as cdk

    from app import JOBS_FILE
    from infra.stack import LongJobsStack, stack_name
    from longjobs.construct.config import context_keys, load_config
    from longjobs.construct.constants import LAMBDA_RUNTIME
    from longjobs.engine.jobs import load_catalog_file

    running = f"python{sys.version_info.major}.{sys.version_info.minor}"
    if LAMBDA_RUNTIME.name != running or f"AWS_Lambda_{running}" != LAMBDA_ENV["AWS_EXECUTION_ENV"]:
        # the construct compiles the asset only on the runtime's Python, and the handlers would run on another
        raise SystemExit(f"the functions run on {LAMBDA_RUNTIME.name}: run the benchmark on it, not on {running}")

    context = json.loads((REPO_ROOT / "cdk.json").read_text())["context"]
    app = cdk.App(outdir=str(outdir), context=context)
    config = load_config({key: app.node.try_get_context(key) for key in context_keys()})
    stack = LongJobsStack(app, stack_name(config), config=config, catalog=load_catalog_file(JOBS_FILE, strict=True))
    assembly = app.synth()
    template = assembly.get_stack_by_name(stack.stack_name).template
    functions = []
    for resource in template["Resources"].values():
        properties = resource.get("Properties", {})
        handler = str(properties.get("Handler", ""))
        module = handler.rpartition(".")[0]
        if resource["Type"] != "AWS::Lambda::Function" or module not in HANDLERS.values():
            continue
        asset_hash = str(properties["Code"]["S3Key"]).removesuffix(".zip")
        variables = properties.get("Environment", {}).get("Variables", {})
        functions.append(
            Function(
                name=next(name for name, path in HANDLERS.items() if path == module),
                module=module,
                code=outdir / f"asset.{asset_hash}",
                environment={key: resolved(value, key) for key, value in variables.items()},
            )
        )
    return sorted(functions, key=lambda function: list(HANDLERS).index(function.name))


def with_tracing(environment: Mapping[str, str], tracing: str) -> dict[str, str]:
    """`environment` (the default stack's) as the `tracing` setting would give it."""
    from longjobs.construct.config import InfraSettings
    from longjobs.construct.functions import tracing_environment

    default = tracing_environment(InfraSettings().tracing)
    rest = {key: value for key, value in environment.items() if key not in default}
    return rest | tracing_environment(tracing)  # type: ignore[arg-type]


@dataclass
class LocalAws:
    """A moto server with the stack's queue, DLQ, lease table and state machine, for first invocations."""

    endpoint: str
    names: dict[str, str]
    sqs: Any
    state_machine_arn: str


@contextmanager
def local_aws() -> Iterator[LocalAws]:
    from moto.server import ThreadedMotoServer

    from longjobs.engine import aws
    from longjobs.engine.settings import Settings
    from longjobs.offline.resources import create_resources

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one line a request otherwise
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    saved = {key: os.environ.get(key) for key in ("AWS_ENDPOINT_URL", *LAMBDA_ENV)}
    os.environ.update({"AWS_ENDPOINT_URL": endpoint, **LAMBDA_ENV})
    try:
        sqs, dynamodb, stepfunctions = aws.sqs(), aws.dynamodb(), aws.stepfunctions()
        created = create_resources(sqs, dynamodb, stepfunctions, Settings(), spark_heartbeat_s=60)
        yield LocalAws(
            endpoint=endpoint,
            names={
                "TABLE_NAME": created.table_name,
                "QUEUE_URL": created.queue_url,
                "DLQ_URL": created.dlq_url,
                "STATE_MACHINE_ARN": created.state_machine_arn,
            },
            sqs=sqs,
            state_machine_arn=created.state_machine_arn,
        )
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        server.stop()


def representative_event(function: str, local: LocalAws) -> dict[str, Any]:
    """A first event of each handler's usual kind; the receiver's is a real message, received from the
    local queue, so its visibility changes and its execution starts as in the cloud."""
    if function == "extender":
        return {"version": "0", "source": "aws.scheduler", "detail-type": "Scheduled Event", "detail": {}}
    if function == "watcher":
        execution = f"{local.state_machine_arn.replace(':stateMachine:', ':execution:')}:{uuid.uuid4()}-1"
        return {
            "version": "0",
            "id": str(uuid.uuid4()),
            "detail-type": "Step Functions Execution Status Change",
            "source": "aws.states",
            "account": "123456789012",
            "time": "2026-11-25T00:00:00Z",
            "region": REGION,
            "resources": [execution],
            "detail": {
                "executionArn": execution,
                "stateMachineArn": local.state_machine_arn,
                "name": execution.rpartition(":")[2],
                "status": "FAILED",
                "startDate": 1_764_028_800_000,
                "stopDate": 1_764_028_860_000,
                "input": "{}",
                "output": None,
            },
        }
    queue_url = local.names["QUEUE_URL"]
    body = json.dumps({"job_id": f"bench-{uuid.uuid4()}", "type": "wait", "params": {"seconds": 60}})
    local.sqs.send_message(QueueUrl=queue_url, MessageBody=body)
    [message] = local.sqs.receive_message(
        QueueUrl=queue_url, MaxNumberOfMessages=1, AttributeNames=["All"], MessageAttributeNames=["All"]
    )["Messages"]
    queue_name = queue_url.rsplit("/", 1)[1]
    return {
        "Records": [
            {
                "messageId": message["MessageId"],
                "receiptHandle": message["ReceiptHandle"],
                "body": message["Body"],
                "attributes": message["Attributes"],
                "messageAttributes": {},
                "md5OfBody": message["MD5OfBody"],
                "eventSource": "aws:sqs",
                "eventSourceARN": f"arn:aws:sqs:{REGION}:123456789012:{queue_name}",
                "awsRegion": REGION,
            }
        ]
    }


COLD_START = """
import json, sys, time
event = json.loads(sys.argv[1])
class Context:
    function_name = sys.argv[3]
    function_version = "$LATEST"
    invoked_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:" + sys.argv[3]
    memory_limit_in_mb = 256
    aws_request_id = "00000000-0000-0000-0000-000000000001"
    log_group_name = "/aws/lambda/" + sys.argv[3]
    log_stream_name = "benchmark"
    def get_remaining_time_in_millis(self):
        return 25_000
cpu = time.process_time()
__import__(sys.argv[2])  # the import statement's path, which -X importtime times (importlib's is not)
import_cpu_ms = (time.process_time() - cpu) * 1000
module = sys.modules[sys.argv[2]]
started = time.perf_counter()
module.handler(event, Context())
print(json.dumps({"invoke_ms": (time.perf_counter() - started) * 1000, "import_cpu_ms": import_cpu_ms}))
"""
"""The child: imports the handler (timed by `-X importtime`, and its CPU time here), then calls it once (timed here)."""


def cold_start(function: Function, code: Path, path: Sequence[Path], environment: Mapping[str, str], event: Any) -> Run:
    """One cold start in a fresh interpreter: the handler's import and its first invocation."""
    env = {key: value for key, value in os.environ.items() if key in ("PATH", "HOME", "LANG", "TMPDIR")}
    env.update(environment)
    env["PYTHONPATH"] = os.pathsep.join(str(folder) for folder in (code, *path))
    env["_X_AMZN_TRACE_ID"] = TRACE_HEADER
    result = subprocess.run(
        [sys.executable, "-S", "-X", "importtime", "-c", COLD_START, json.dumps(event), function.module, function.name],
        cwd=code,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        errors = [line for line in result.stderr.splitlines() if not line.startswith("import time:")]
        raise RuntimeError(f"{function.name} failed:\n" + "\n".join(errors[-30:]))
    import_ms, heaviest, in_invocation = importtime_tree(result.stderr, function.module)
    timed = json.loads(result.stdout.strip().splitlines()[-1])
    return Run(
        round(import_ms, 1),
        round(float(timed["invoke_ms"]), 1),
        heaviest,
        in_invocation,
        round(timed["import_cpu_ms"], 1),
    )


def measure(runs: int, tracings: Sequence[str], *, compare_bytecode: bool = True) -> list[Case]:
    cases = []
    with tempfile.TemporaryDirectory(prefix="cold-start-") as folder:
        root = Path(folder)
        functions = synthesized_functions(root / "cdk.out")
        path = layer_folders(root)
        with local_aws() as local:
            for function in functions:
                codes = {True: function.code}
                if compare_bytecode:
                    codes[False] = without_bytecode(function.code, root / function.name)
                for tracing in tracings:
                    environment = {
                        **with_tracing(function.environment, tracing),
                        **LAMBDA_ENV,
                        **local.names,
                        "AWS_ENDPOINT_URL": local.endpoint,
                        "AWS_LAMBDA_FUNCTION_NAME": f"LongJobs-{function.name}",
                    }
                    for bytecode, code in codes.items():
                        cold_start(function, code, path, environment, representative_event(function.name, local))
                        samples = [
                            cold_start(function, code, path, environment, representative_event(function.name, local))
                            for _ in range(runs)
                        ]
                        imports = [sample.import_ms for sample in samples]
                        cases.append(
                            Case(
                                handler=function.name,
                                tracing=tracing,
                                bytecode=bytecode,
                                runs=runs,
                                import_median_ms=round(statistics.median(imports), 1),
                                import_min_ms=min(imports),
                                import_max_ms=max(imports),
                                invoke_median_ms=round(statistics.median(sample.invoke_ms for sample in samples), 1),
                                heaviest_imports=samples[-1].heaviest_imports,
                                heaviest_in_invocation=samples[-1].heaviest_in_invocation,
                                import_cpu_median_ms=round(
                                    statistics.median(sample.import_cpu_ms or 0.0 for sample in samples), 1
                                ),
                            )
                        )
    return cases


def table(cases: Sequence[Case]) -> str:
    lines = [
        f"{'handler':<9} {'tracing':<9} {'bytecode':<9} {'import ms':>9} {'min':>6} {'max':>6} {'cpu ms':>6} "
        f"{'1st call ms':>11}  heaviest imports (ms, last run) | in the first call",
        "-" * 130,
    ]
    for case in cases:
        heaviest = ", ".join(f"{module} {ms:g}" for module, ms in case.heaviest_imports)
        in_call = ", ".join(f"{module} {ms:g}" for module, ms in case.heaviest_in_invocation[:3])
        lines.append(
            f"{case.handler:<9} {case.tracing:<9} {'shipped' if case.bytecode else 'removed':<9} "
            f"{case.import_median_ms:>9.1f} {case.import_min_ms:>6.1f} {case.import_max_ms:>6.1f} "
            f"{case.import_cpu_median_ms if case.import_cpu_median_ms is not None else float('nan'):>6.1f} "
            f"{case.invoke_median_ms:>11.1f}  {heaviest} | {in_call}"
        )
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    """The command line (apart from the run: docs/benchmarks.md's commands are parsed by a test)."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.cold_start", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--runs", type=int, default=9, help="fresh interpreters per case, after one untimed (default 9)"
    )
    parser.add_argument(
        "--tracing",
        nargs="+",
        default=["service"],
        choices=["off", "service", "xray-sdk"],
        help="tracing settings to measure (the default stack's is service)",
    )
    parser.add_argument(
        "--shipped-only", action="store_true", help="skip the comparison with the asset's bytecode removed"
    )
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    cases = measure(args.runs, args.tracing, compare_bytecode=not args.shipped_only)
    if args.json:
        print(json.dumps([asdict(case) for case in cases], indent=2))
    else:
        print(
            f"Python {sys.version.split()[0]}, {args.runs} runs per case, medians; import: -X importtime (wall), "
            f"cpu: its CPU time; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs"
        )
        print(table(cases))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
