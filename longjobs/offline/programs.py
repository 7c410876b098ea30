"""The programs the offline runtime starts besides Python (Node.js and Java), and how a user types its own.

Node.js runs the AWS CDK, through jsii, which renders the workflow for every command. Java 17 runs a local
Spark for PySpark job types. Each is looked for before a command starts anything, as the tool that starts
it would look. A missing one is then one line naming it and how to install it. Otherwise it would be a
traceback from deep inside jsii or PySpark, printed after the run has begun.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

JAVA_INSTALL = (
    "install a JDK or JRE 17 (Debian/Ubuntu: sudo apt-get install openjdk-17-jre-headless; "
    "macOS: brew install openjdk@17)"
)
NODE_INSTALL = (
    "install Node.js 22 or 24 (https://nodejs.org; Debian/Ubuntu: sudo apt-get install nodejs; "
    "macOS: brew install node)"
)


def java_missing() -> str | None:
    """Why a local Spark could not start its JVM here, or None when it can.

    PySpark's launcher (`spark-class`) runs `$JAVA_HOME/bin/java` when JAVA_HOME is set, else `java` from the
    PATH. The same one is looked for here."""
    home = os.environ.get("JAVA_HOME")
    if home:
        java = Path(home) / "bin" / "java"
        if java.is_file() and os.access(java, os.X_OK):
            return None
        return (
            f"java not found: JAVA_HOME is {home}, which has no bin/java, and Spark runs that one; "
            f"point JAVA_HOME at a Java 17 or unset it, or {JAVA_INSTALL}"
        )
    if shutil.which("java") is not None:
        return None
    return f"java not found: PySpark job types run on a local Spark, which needs Java 17; {JAVA_INSTALL}"


def node_missing() -> str | None:
    """Why the CDK could not render the workflow here, or None when it can.

    jsii, the CDK's bridge from Python, runs `$JSII_NODE`, by default `node` from the PATH."""
    node = os.environ.get("JSII_NODE", "node")
    if shutil.which(node) is not None:
        return None
    named = "node" if node == "node" else f"JSII_NODE's {node}"
    return (
        f"{named} not found: the offline runtime renders its workflow with the AWS CDK, which runs on Node.js; "
        f"{NODE_INSTALL}"
    )


def quiet_stopped_node() -> None:
    """Drop the traceback jsii's exit hook prints when its Node.js process has already ended.

    Ctrl-C at a terminal reaches every process of the command, Node.js too, and Node.js ends on it whatever
    signals its parent ignores. At the interpreter's exit, jsii's hook (`_NodeProcess.stop`) then writes to
    the closed pipe. Its BrokenPipeError would follow the command's one-line message with a traceback.
    Only that error from that hook is dropped; every other unraisable error reaches the previous hook.
    Installing it again changes nothing."""
    previous = sys.unraisablehook
    if getattr(previous, "quiets_stopped_node", False):
        return

    def hook(unraisable: sys.UnraisableHookArgs) -> None:
        # Python 3.13 names the callback in the message; earlier ones passed it as the object.
        where = f"{unraisable.err_msg} {getattr(unraisable.object, '__qualname__', '')}"
        stopping_node = "_NodeProcess.stop" in where
        if not (stopping_node and isinstance(unraisable.exc_value, BrokenPipeError)):
            previous(unraisable)

    hook.quiets_stopped_node = True  # type: ignore[attr-defined]
    sys.unraisablehook = hook


def as_typed(program: str) -> str:
    """How to type `program` (`python`, or a command this install put beside it) in the user's shell: its
    name when the shell's PATH finds this install's own, else its path, relative when under the working
    directory (`.venv/bin/longjobs` in a checkout whose virtual environment is not activated)."""
    installed = Path(sys.executable).parent / program
    found = shutil.which(program)
    if found is not None and Path(found).resolve() == installed.resolve():
        return program
    return os.path.relpath(installed) if installed.is_relative_to(Path.cwd()) else str(installed)
