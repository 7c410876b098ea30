"""CDK constructs and the stack; the workflow builder shared with the offline runtime.

`from infra import LongJobProcessor` gives the embeddable construct (imported on first use, so that
the offline runtime's `longjobs.construct.workflow` does not load every construct library).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from longjobs.construct.processor import LongJobProcessor

__all__ = ["LongJobProcessor"]


def __getattr__(name: str) -> Any:
    if name == "LongJobProcessor":
        from longjobs.construct.processor import LongJobProcessor

        return LongJobProcessor
    raise AttributeError(f"module 'infra' has no attribute {name!r}")
