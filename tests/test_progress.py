"""Progress reaches the Prefect UI as a progress artifact, and the log with rate and ETA."""

from __future__ import annotations

import logging

from prefect import flow
from prefect.client.orchestration import get_client
from prefect.testing.utilities import prefect_test_harness

from passband.tasks.reporting.progress import Progress


def test_progress_artifact_follows_the_updates():
    @flow
    def three_steps() -> str:
        progress = Progress("demo work", 3, "steps")
        for done in (1, 2):
            progress.update(done)
        return str(progress.artifact_id)

    with prefect_test_harness(server_startup_timeout=300):
        artifact_id = three_steps()
        with get_client(sync_client=True) as client:
            (artifact,) = [a for a in client.read_artifacts() if str(a.id) == artifact_id]
    assert artifact.type == "progress" and abs(float(artifact.data) - 200 / 3) < 1e-9


def test_outside_a_run_only_the_log_line(caplog):
    with caplog.at_level(logging.INFO):
        progress = Progress("offline", 4, "shards")
        progress.update(2)
    assert progress.artifact_id is None
    assert "offline: 2/4 shards" in caplog.text and "ETA" in caplog.text
