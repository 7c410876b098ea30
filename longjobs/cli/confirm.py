"""Confirmation of the commands that change something (every write but `submit`): `cancel`, `dlq redrive`.

With `--yes` the command goes ahead. Otherwise it asks on the terminal (the question on stderr, so a
`--json` output stays clean) and goes ahead only on `y` or `yes`. With no terminal to ask on (stdin is a
pipe or a file: a script, CI) and no `--yes`, it refuses before it changes anything: a script must say
what it means.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

from longjobs.cli.errors import CliError

YES = ("y", "yes")


def stdin_is_terminal() -> bool:
    """Whether a person can be asked: stdin is a terminal (a closed or replaced stdin is not)."""
    try:
        return sys.stdin is not None and sys.stdin.isatty()
    except (AttributeError, ValueError, OSError):
        return False


def ask_on_terminal(question: str) -> str:
    """Ask on stderr, read one line from stdin ('' at end of input)."""
    print(question, end="", file=sys.stderr, flush=True)
    return sys.stdin.readline()


is_terminal: Callable[[], bool] = stdin_is_terminal
"""Whether there is a terminal to ask on (tests replace it)."""
ask: Callable[[str], str] = ask_on_terminal
"""How the question is asked and answered (tests replace it)."""


def require_terminal_or_yes(action: str, *, assume_yes: bool) -> None:
    """Refuse at once, before any change, when confirmation is needed and nobody can give it."""
    if not assume_yes and not is_terminal():
        raise CliError(f"{action} asks for confirmation, and stdin is not a terminal: pass --yes to confirm")


def confirm(question: str, *, action: str, assume_yes: bool) -> None:
    """Go ahead only when confirmed (`--yes`, or `y` on the terminal); else raise `CliError`."""
    if assume_yes:
        return
    require_terminal_or_yes(action, assume_yes=assume_yes)
    answer = ask(f"{question} [y/N] ")
    if answer.strip().lower() not in YES:
        raise CliError(f"{action} not confirmed: nothing was changed")
