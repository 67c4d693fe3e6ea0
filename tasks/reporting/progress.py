"""Progress that reaches the Prefect UI: a progress artifact on the current run, plus a log line
with the rate and an ETA (the terminal and the run's log show it too).

Outside a Prefect run (a script, a unit test) only the log line is written.
"""

from __future__ import annotations

import time

from passband.tasks.reporting.logs import run_logger


class Progress:
    """`update(done)` after each unit of `total` (shards, iterations, steps)."""

    def __init__(self, description: str, total: int, unit: str) -> None:
        from prefect.artifacts import create_progress_artifact
        from prefect.context import FlowRunContext, TaskRunContext

        self.description, self.total, self.unit = description, max(total, 1), unit
        self.start = time.perf_counter()
        in_run = FlowRunContext.get() is not None or TaskRunContext.get() is not None
        self.artifact_id = create_progress_artifact(0.0, description=description) if in_run else None

    def update(self, done: int) -> None:
        from prefect.artifacts import update_progress_artifact

        if self.artifact_id is not None:
            update_progress_artifact(self.artifact_id, 100.0 * done / self.total)
        elapsed = time.perf_counter() - self.start
        rate = done / elapsed if elapsed > 0 else 0.0
        eta = (self.total - done) / rate if rate > 0 else float("nan")
        run_logger().info("%s: %d/%d %s, %.2f %s/min, ETA %.0f s", self.description, done, self.total, self.unit,
                          60 * rate, self.unit, eta)
