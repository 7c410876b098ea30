"""After a SnapStart restore: what one container built must not be shared by every container resumed from
its snapshot.

With the `snapstart` setting, Lambda initializes a function once per published version, snapshots the
container, and resumes each new container from that snapshot. State built before the snapshot would then
be the same in all of them: a random stream (the jitter of every backoff would be drawn alike), clients
and the credentials they cached. AWS's guidance is to regenerate such state in an after-restore hook
(https://docs.aws.amazon.com/lambda/latest/dg/snapstart-uniqueness.html). Each handler module registers
`forget` with its cached builders: after a restore the random module is re-seeded from the OS, and the
services are built afresh, with new clients and new random streams, at their first use.

The hooks come from Lambda's Python runtime (`snapshot_restore_py`, in every managed Python runtime that
supports SnapStart). Elsewhere (offline, the tests) there is no snapshot to restore, and nothing is
registered.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any, Protocol

__all__ = ["forget", "on_restore"]


class Cached(Protocol):
    """A builder cached per container (`functools.cache`)."""

    def cache_clear(self) -> None: ...


def forget(*cached: Cached) -> None:
    """Re-seed the random module from the OS and drop what each builder cached, so it builds anew."""
    random.seed()
    for builder in cached:
        builder.cache_clear()


def on_restore(*cached: Cached, register: Callable[..., Any] | None = None) -> bool:
    """Register `forget` of these builders as an after-restore hook; False where SnapStart's runtime hooks
    are not available (not in Lambda)."""
    if register is None:
        try:
            from snapshot_restore_py import register_after_restore  # type: ignore[import-not-found]
        except ImportError:
            return False
        register = register_after_restore
    register(forget, *cached)
    return True
