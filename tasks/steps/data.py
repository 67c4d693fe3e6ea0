"""Load problems (suite or user file) as a Prefect task; quarantined rows become an artifact."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

from prefect import task

from passband.curation.suites.source import ProblemSource


@task(name="load-problems", retries=2, retry_delay_seconds=2)
def load_problems_task(source: ProblemSource, run_id: str | None = None) -> list[dict[str, Any]]:
    """Rows of the source; bad rows of a file or a benchmark are logged as `quarantine/quarantined.jsonl`
    (the flow's warning names the source and counts them)."""
    from prefect.logging import get_run_logger

    result = source.load()
    if result.quarantined:
        get_run_logger().warning(
            "%d bad rows quarantined from %s (first: row %s: %s)", len(result.quarantined),
            source.path or source.suite, result.quarantined[0]["row_number"], result.quarantined[0]["reason"])
        if run_id:
            from passband.tasks.reporting import tracking

            with tempfile.TemporaryDirectory() as tmp:
                path = Path(tmp) / "quarantined.jsonl"
                path.write_text("".join(json.dumps(q, default=str) + "\n" for q in result.quarantined))
                tracking.log_artifact_file(path, "quarantine", run_id)
    if not result.rows:
        raise ValueError(f"no usable problems in {source}")
    return result.rows
