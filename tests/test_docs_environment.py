"""docs/install.md's settings table (linked from the README) lists every PASSBAND_* variable the code reads from the environment."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# Set by passband itself for the processes it starts, never by a user.
INTERNAL = {
    "PASSBAND_MLFLOW_UI_URL",       # infra/stack/local.py: the UI `passband up` serves, for run links
    "PASSBAND_WORKER_NAME",         # infra/stack/task_workers.py: names each task worker it starts
}


def test_settings_table_lists_every_variable_the_code_reads() -> None:
    read = {name for folder in ("flows", "tasks", "training", "curation", "infra/cli", "infra/stack") for path in (ROOT / folder).rglob("*.py")
            for name in re.findall(r"\"(PASSBAND_[A-Z_]+)\"", path.read_text())}
    page = (ROOT / "docs" / "install.md").read_text()
    table = page[page.index("## Settings (environment)"):page.index("## Troubleshooting")]
    listed = set(re.findall(r"^\| `(PASSBAND_[A-Z_]+)` \|", table, re.MULTILINE))
    assert {"PASSBAND_HOME", "PASSBAND_PREFECT_PORT", "PASSBAND_MLFLOW_ARTIFACT_ROOT"} <= read
    assert read - INTERNAL == listed
