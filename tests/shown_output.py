"""What a page's `console` block shows after each `$ command`, and the rule by which a test compares it
with what the command prints (docs/operate.md states the rule to its reader).

Titles, column headings, notes and error lines must read as the page shows them. What differs from run
to run is masked: message ids, job ids, times, durations and counts; a table's rows (its data) are left
out, and so are its borders. Runs of spaces count as one, so a column's width does not matter."""

from __future__ import annotations

import re

MASKS = (
    (re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"), "<id>"),
    (re.compile(r"\b[a-z][a-z0-9-]*-\d{8}T\d{6}Z-[0-9a-f]{6}\b"), "<job id>"),
    (re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z"), "<time>"),
    (re.compile(r"\b\d+(\.\d+)?(d|h|m|s|ms)?\b"), "<n>"),
)
BORDERS = tuple("┏┡└┌├╭╰┗")


def shown_outputs(body: str) -> dict[str, str]:
    """Each `$ command` of a console block with the lines the page shows after it."""
    outputs: dict[str, str] = {}
    command: str | None = None
    for line in body.splitlines():
        if line.startswith("$ "):
            command = line[2:].strip()
            outputs[command] = ""
        elif command is not None:
            outputs[command] += line + "\n"
    return outputs


def skeleton(text: str) -> list[str]:
    """The lines of `text` that must match, masked (see the module's docstring)."""
    kept: list[str] = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith(BORDERS) or line.startswith("│"):
            continue
        for pattern, mask in MASKS:
            line = pattern.sub(mask, line)
        kept.append(" ".join(line.split()))
    return kept
