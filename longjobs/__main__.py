"""`python -m longjobs` and the `longjobs` console script: the operator command (`longjobs.cli`).

The console script is installed without the `cli` extra too, so a missing module of that extra is named,
with the extra to install, in one line instead of an import's traceback."""

from __future__ import annotations

import importlib.util
import sys

CLI_EXTRA = ("rich",)
"""The modules of the distribution's `cli` extra: the tables and live views draw with rich."""


def main() -> int:
    """Run the command, or say which extra it needs (exit code 2, as a usage error)."""
    missing = [name for name in CLI_EXTRA if importlib.util.find_spec(name) is None]
    if missing:
        print(
            f"longjobs needs the distribution's `cli` extra ({', '.join(missing)} not installed): "
            "pip install 'sqs-long-jobs[cli]'",
            file=sys.stderr,
        )
        return 2
    from longjobs.cli.__main__ import main as command

    return command()


if __name__ == "__main__":
    sys.exit(main())
