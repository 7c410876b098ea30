"""The folders the construct cuts its assets from go when the process that made them ends: a synth has
copied them into its output by then, and each synth made new ones in the system's temporary folder."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests import REPO_ROOT

MAKE_ONE = "from longjobs.construct.assets import staged_package; print(staged_package('pipeline'))"


def test_construct_assets_staged_folder_goes_with_its_process() -> None:
    made = subprocess.run(
        [sys.executable, "-c", MAKE_ONE], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120, check=True
    )
    stage = Path(made.stdout.strip().splitlines()[-1])
    assert stage.name.startswith("longjobs-asset-"), made.stdout
    assert not stage.exists(), f"{stage} outlived the process that staged it"
