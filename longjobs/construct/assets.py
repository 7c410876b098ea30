"""Folders cut from the installed `longjobs` package for the Lambda and Glue assets.

The construct deploys the code of the package it is imported from (a user's site-packages, or this
repository's editable install), never a folder of the application beside it. Each asset holds
`longjobs/__init__.py` and the subpackages it needs, so its modules import under their real names.
"""

from __future__ import annotations

import atexit
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path

from longjobs.construct.constants import PACKAGE_ROOT

SKIPPED = shutil.ignore_patterns("__pycache__", "*.pyc")


def staged_package(*subpackages: str, extra_files: Mapping[str, str] | None = None) -> Path:
    """A new folder holding `longjobs/` with only `subpackages` (and `extra_files`, paths relative
    to the package folder, with their text). CDK hashes the folder's content, so an unchanged package
    gives the same asset. The folder goes when the process ends: the synth has copied it into its output
    by then."""
    stage = Path(tempfile.mkdtemp(prefix="longjobs-asset-"))
    atexit.register(shutil.rmtree, stage, ignore_errors=True)
    package = stage / PACKAGE_ROOT.name
    package.mkdir()
    shutil.copyfile(PACKAGE_ROOT / "__init__.py", package / "__init__.py")
    for name in subpackages:
        shutil.copytree(PACKAGE_ROOT / name, package / name, ignore=SKIPPED)
    for relative, text in (extra_files or {}).items():
        (package / relative).write_text(text, encoding="utf-8")
    return stage
