"""CDK constructs and the stack; the workflow builder shared with the offline runtime.

`from longjobs.construct import LongJobProcessor, LongJobProcessorProps` gives the embeddable construct and
its props (imported on first use, so that the offline runtime's `longjobs.construct.workflow` does not load
every construct library).

`quiet_node_notices()`, called before the first `aws_cdk` import starts jsii's Node process, keeps
jsii's notices about the Node.js version out of the output (this repository's app, tests and offline
runtime call it).
"""

from __future__ import annotations

import os
import subprocess
from typing import TYPE_CHECKING, Any

NODE_NOTICES = ("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION")


def quiet_node_notices(environ: Any = os.environ) -> None:
    """Silence jsii's 11-line notice that the Node.js in use is past its end of life or deprecated (on
    Node 20 every synth, `serve` and demo prints it, as Python byte strings). jsii's own switches: the
    end-of-life one lists the major versions to keep quiet about, the deprecated one is on when set. A
    value the user set is kept. `make tools` says which Node versions are supported."""
    if NODE_NOTICES[0] not in environ:
        major = _node_major()
        if major is not None:
            environ[NODE_NOTICES[0]] = major
    environ.setdefault(NODE_NOTICES[1], "1")


def _node_major() -> str | None:
    try:
        version = subprocess.run(["node", "--version"], capture_output=True, text=True, timeout=10, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None  # no Node: jsii will say so itself
    return version.strip().lstrip("v").split(".")[0] or None


if TYPE_CHECKING:
    from longjobs.construct.processor import LongJobProcessor
    from longjobs.construct.props import LongJobProcessorProps

__all__ = ["LongJobProcessor", "LongJobProcessorProps"]


def __getattr__(name: str) -> Any:
    if name == "LongJobProcessor":
        from longjobs.construct.processor import LongJobProcessor

        return LongJobProcessor
    if name == "LongJobProcessorProps":
        from longjobs.construct.props import LongJobProcessorProps

        return LongJobProcessorProps
    raise AttributeError(f"module 'longjobs.construct' has no attribute {name!r}")
