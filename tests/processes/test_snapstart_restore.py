"""SnapStart: containers resumed from one snapshot must not share what it held.

Lambda resumes every new container of a SnapStart version from one snapshot of an initialized one, so a
random stream built before the snapshot would draw the same jitter in all of them
(https://docs.aws.amazon.com/lambda/latest/dg/snapstart-uniqueness.html). A fresh interpreter stands in
for the initialized container: it loads the receiver's handler with Lambda's runtime-hook library
(`snapshot_restore_py`, https://docs.aws.amazon.com/lambda/latest/dg/snapstart-runtime-hooks-python.html)
replaced by a recorder, builds the receiver as a first invocation would, and forks twice, as two
restored containers. Each runs the registered after-restore hooks (or, for the control, does not) and
draws from its receiver's random stream."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests import REPO_ROOT

CONTAINER = r"""
import json, os, sys, types

hooks = []
runtime = types.ModuleType("snapshot_restore_py")
runtime.register_after_restore = lambda func, *args, **kwargs: hooks.append((func, args, kwargs))
runtime.register_before_snapshot = lambda func, *args, **kwargs: None
sys.modules["snapshot_restore_py"] = runtime

import longjobs.functions.receiver as handler

handler.receiver()  # built before the snapshot
restore = sys.argv[1] == "restore"
draws = []
for _ in range(2):  # two containers resumed from the snapshot
    read, write = os.pipe()
    if os.fork() == 0:
        if restore:
            for func, args, kwargs in hooks:
                func(*args, **kwargs)
        os.write(write, json.dumps([handler.receiver().rng.random(), len(hooks)]).encode())
        os._exit(0)
    os.close(write)
    draws.append(json.loads(os.read(read, 1000)))
    os.wait()
print(json.dumps(draws))
"""

ENVIRONMENT = {
    "TABLE_NAME": "leases",
    "QUEUE_URL": "https://sqs.us-east-1.amazonaws.com/123456789012/jobs",
    "DLQ_URL": "https://sqs.us-east-1.amazonaws.com/123456789012/jobs-dlq",
    "STATE_MACHINE_ARN": "arn:aws:states:us-east-1:123456789012:stateMachine:jobs",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
}


def restored_draws(mode: str) -> list[list[float]]:
    env = {**os.environ, **ENVIRONMENT}
    done = subprocess.run(
        [sys.executable, "-c", CONTAINER, mode], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return list(json.loads(done.stdout))


def test_snapstart_restored_containers_draw_their_own_jitter() -> None:
    first, second = restored_draws("restore")
    assert first[1] == 1, "the receiver's handler registers one after-restore hook"
    assert first[0] != second[0], "each restored container draws its own jitter"


def test_snapstart_containers_not_restored_share_the_snapshots_jitter() -> None:
    """The control: without the hook, both containers draw what the snapshot's stream draws next."""
    first, second = restored_draws("no-restore")
    assert first[0] == second[0]


def test_snapstart_every_handler_forgets_its_cached_services_after_a_restore() -> None:
    script = r"""
import json, sys, types
hooks = []
runtime = types.ModuleType("snapshot_restore_py")
runtime.register_after_restore = lambda func, *args, **kwargs: hooks.append((func.__name__, [a.__name__ for a in args]))
sys.modules["snapshot_restore_py"] = runtime
import longjobs.functions.receiver, longjobs.functions.extender, longjobs.functions.watcher
print(json.dumps(hooks))
"""
    env = {**os.environ, **ENVIRONMENT}
    done = subprocess.run([sys.executable, "-c", script], cwd=REPO_ROOT, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == [
        ["forget", ["receiver", "processor"]],
        ["forget", ["extender"]],
        ["forget", ["watcher", "clients", "admitter"]],
    ]
