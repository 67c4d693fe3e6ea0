"""`passband runs`: the experiment's recent runs as a table (or JSON lines) for a terminal."""

from __future__ import annotations

import json
import os
from dataclasses import asdict
from datetime import datetime

from passband.tasks.reporting.runs import RunRow

COLUMNS = ("status", "name", "started", "duration", "metrics", "mlflow_run_id")
# A listing must fail in seconds when the server does not answer: MLflow's defaults (7 retries,
# exponential backoff, 120 s per request) took 4 minutes against a closed port. Worst case here:
# 2 tries of 5 s each (a listing answers in well under a second). Set only where the user has not.
FAIL_FAST_HTTP_ENV = {
    "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "1",
    "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
    "MLFLOW_HTTP_REQUEST_TIMEOUT": "5",
}


def fail_fast_http() -> None:
    """FAIL_FAST_HTTP_ENV in this process's environment, each variable only where the user has not set it."""
    for name, value in FAIL_FAST_HTTP_ENV.items():
        os.environ.setdefault(name, value)


def duration(row: RunRow) -> str:
    """"1h02m", "3m07s", "12s"; "running" while the run has no end time."""
    if row.end_ms is None:
        return "running"
    seconds = max(0, (row.end_ms - row.start_ms) // 1000)
    hours, rest = divmod(seconds, 3600)
    minutes, seconds = divmod(rest, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{seconds:02d}s" if minutes else f"{seconds}s"


def cells(row: RunRow) -> tuple[str, ...]:
    started = datetime.fromtimestamp(row.start_ms / 1000).strftime("%Y-%m-%d %H:%M:%S")
    metrics = " ".join(f"{name}={value:.4g}" for name, value in row.metrics.items()) or "-"
    return (row.status, row.name, started, duration(row), metrics, row.run_id)


def render_table(rows: list[RunRow]) -> str:
    """Aligned columns, newest run first; a line saying so when there is none."""
    if not rows:
        return "no runs yet (passband run FLOW ... records them)"
    table = [COLUMNS, *(cells(row) for row in rows)]
    widths = [max(len(line[i]) for line in table) for i in range(len(COLUMNS))]
    return "\n".join("  ".join(cell.ljust(width) for cell, width in zip(line, widths)).rstrip() for line in table)


def render_json(rows: list[RunRow]) -> str:
    """One JSON object per run, for scripts."""
    return "\n".join(json.dumps(asdict(row)) for row in rows)
