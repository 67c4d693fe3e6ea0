"""The layering is checked, not hoped for: pyproject.toml's import-linter contracts hold.

`lint-imports` (this venv's) reads [tool.importlinter] from the repo root: the floors
flows -> stack -> tasks -> training -> curation, no Prefect/MLflow/boto3 below tasks, tasks/'s
sub-packages in their order, no threads in flows, and no import cycles. A broken contract fails here with the import
chain that breaks it (docs/architecture.md draws the same picture).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_import_contracts_hold() -> None:
    # --no-cache: the check writes nothing into the checkout
    result = subprocess.run([str(Path(sys.executable).parent / "lint-imports"), "--no-cache"], cwd=REPO,
                            capture_output=True, text=True)
    report = result.stdout + result.stderr
    assert result.returncode == 0, f"import-linter contracts broken:\n{report[report.find('Contracts'):]}"
    assert "Contracts: 7 kept, 0 broken." in report
