"""Every name the code uses is defined: pyflakes over the package's folders.

A name missing from a module's imports fails only when its line runs, and some lines run only on
paths the default test run does not take (the torchrun ranks' checkpoint commit, a slow flow);
this catches them all at once, with file and line.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FOLDERS = ["flows", "tasks", "curation", "training", "infra", "scripts"]
# pyflakes' other reports (unused imports, redefinitions) are style, not failures
FAILING = ("undefined name", "undefined local", "may be undefined")


def test_no_undefined_names():
    result = subprocess.run([sys.executable, "-m", "pyflakes", *FOLDERS], cwd=REPO, capture_output=True, text=True)
    undefined = [line for line in result.stdout.splitlines() if any(kind in line for kind in FAILING)]
    assert not undefined, "names used but never defined:\n" + "\n".join(undefined)


def test_the_check_sees_an_undefined_name(tmp_path):
    (tmp_path / "broken.py").write_text("import os\n\n\ndef f(path):\n    shutil.rmtree(path)\n")
    result = subprocess.run([sys.executable, "-m", "pyflakes", str(tmp_path)], capture_output=True, text=True)
    assert "broken.py:5:5: undefined name 'shutil'" in result.stdout
