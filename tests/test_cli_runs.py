"""`passband runs` reads the experiment's runs back; a failed `passband run` reports its MLflow run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from passband.cli.main import main
from passband.tasks.reporting import tracking

BIN = Path(sys.executable).parent / "passband"


def test_runs_lists_runs_of_a_fresh_mlflow(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PASSBAND_HOME", str(tmp_path / "home"))
    for name in ("PASSBAND_MLFLOW_URI", "PASSBAND_EXPERIMENT"):
        monkeypatch.delenv(name, raising=False)
    empty = CliRunner().invoke(main, ["runs"])
    assert empty.exit_code == 0 and "no runs yet" in empty.output
    assert not (tmp_path / "home").exists()  # reading only: nothing created

    tracking.configure()
    with tracking.start_run("pipeline") as parent_id:
        time.sleep(0.01)  # distinct start times (milliseconds) keep the newest-first order exact
        with tracking.start_run("curate", nested=True) as stage_id:
            tracking.log_metrics({"math/pass@1": 0.25, "kept": 12, "a_metric": 1, "b_metric": 2, "c_metric": 3},
                                 step=0)
    time.sleep(0.01)
    with pytest.raises(RuntimeError), tracking.start_run("rl") as failed_id:
        raise RuntimeError("boom")

    result = CliRunner().invoke(main, ["runs", "--limit", "5"])
    assert result.exit_code == 0, result.output
    header, *lines = result.output.splitlines()
    assert header.split() == ["status", "name", "started", "duration", "metrics", "mlflow_run_id"]
    assert [line.split()[0] for line in lines] == ["FAILED", "FINISHED", "FINISHED"]  # newest first
    rl, curate, pipeline = lines
    assert rl.split()[1] == "rl" and rl.endswith(failed_id)
    assert curate.split()[1] == "pipeline/curate" and curate.endswith(stage_id)
    assert pipeline.endswith(parent_id)
    # four metrics at most, pass@1 first; the rest alphabetically
    assert "math/pass_at_1=0.25 a_metric=1 b_metric=2 c_metric=3 " in curate

    rows = [json.loads(line) for line in CliRunner().invoke(main, ["runs", "-n", "1", "--json"]).output.splitlines()]
    assert [(row["run_id"], row["status"]) for row in rows] == [(failed_id, "FAILED")]


def test_failed_run_prints_its_mlflow_run_id(tmp_path: Path) -> None:
    """A model directory without config.json: the flow opens its run, then fails."""
    (tmp_path / "empty-model").mkdir()
    env = {**os.environ, "PASSBAND_HOME": str(tmp_path / "home")}
    result = subprocess.run(
        [str(BIN), "run", "sample", "--preset", "smoke", "--set", f"model={tmp_path / 'empty-model'}"],
        cwd=tmp_path, capture_output=True, text=True, timeout=600, env=env,
    )
    assert result.returncode == 1, result.stderr[-3000:]
    (line,) = result.stdout.splitlines()
    summary = json.loads(line)
    assert summary["flow"] == "sample" and summary["status"] == "failed"
    assert "has no config.json" in summary["error"]
    listed = subprocess.run([str(BIN), "runs", "--json"], cwd=tmp_path, capture_output=True, text=True,
                            timeout=300, env=env)
    rows = [json.loads(row) for row in listed.stdout.splitlines()]
    assert [(row["run_id"], row["name"], row["status"]) for row in rows] == [
        (summary["mlflow_run_id"], "sample", "FAILED")]
