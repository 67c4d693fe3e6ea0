"""What a user sees in the two UIs, checked in a real browser (Debian's headless Chromium).

`passband up` starts the Prefect server and the MLflow UI; a real `passband run evaluate` reports
to both; a tiny checkpoint is logged and registered as the champion. Then Chromium renders the
Prefect flow run's artifacts tab, the MLflow run and the registered model, and the rendered DOM
must show the run, the pass@k results table, its metrics and the model. Screenshots are kept under
$PASSBAND_BROWSER_SHOTS (default: the test's tmp dir) for a person to look at.

Needs `chromium` on PATH (`apt-get install chromium`); marked slow (minutes).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

BIN = Path(sys.executable).parent
CHROMIUM = shutil.which("chromium")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def render(url: str, screenshot: Path) -> str:
    """The DOM after the page's scripts ran (virtual time lets the single-page apps fetch and draw),
    and a screenshot of the same page."""
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             "--virtual-time-budget=20000", "--window-size=1600,1200"]
    subprocess.run([CHROMIUM, *flags, f"--screenshot={screenshot}", url], capture_output=True, timeout=180,
                   check=True)
    return subprocess.run([CHROMIUM, *flags, "--dump-dom", url], capture_output=True, text=True, timeout=180,
                          check=True).stdout


def prefect_artifacts(prefect_url: str, flow_run_id: str, kind: str) -> list[dict]:
    """The flow run's artifacts of one type, from the Prefect server's REST API."""
    body = json.dumps({"artifacts": {"flow_run_id": {"any_": [flow_run_id]}, "type": {"any_": [kind]}}}).encode()
    request = urllib.request.Request(f"{prefect_url}/api/artifacts/filter", data=body,
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())


@pytest.mark.slow
@pytest.mark.skipif(CHROMIUM is None, reason="needs Debian's chromium (apt-get install chromium)")
def test_results_are_on_the_prefect_and_mlflow_pages(tmp_path, smollm2_dir):
    shots = Path(os.environ.get("PASSBAND_BROWSER_SHOTS", tmp_path / "shots"))
    shots.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PASSBAND_HOME": str(tmp_path / "home"), "PASSBAND_PREFECT_PORT": str(free_port()),
           "PASSBAND_MLFLOW_PORT": str(free_port())}
    up = subprocess.run([str(BIN / "passband"), "up"], cwd=tmp_path, env=env, capture_output=True, text=True,
                        timeout=600)
    assert up.returncode == 0, up.stderr[-3000:]
    urls = dict(line.split(": ", 1) for line in up.stdout.splitlines())
    try:
        run = subprocess.run(
            [str(BIN / "passband"), "run", "evaluate", "--preset", "smoke", "--set", f"model={smollm2_dir}",
             "--set", "engine.kind=hf", "--set", "sampling.n=2", "--set", "sampling.max_tokens=16",
             "--set", "suites={math: {suite: math, num_problems: 2, seed: 9001}}"],
            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=1200)
        assert run.returncode == 0, run.stderr[-3000:]
        summary = json.loads(run.stdout)
        register = subprocess.run(
            [sys.executable, "-c", REGISTER, str(smollm2_dir), summary["mlflow_run_id"]],
            cwd=tmp_path, env=env, capture_output=True, text=True,
            timeout=600)
        assert register.returncode == 0, register.stderr[-3000:]
        experiment_id, flow_run_id = register.stdout.split()

        run_dom = render(f"{urls['prefect']}/runs/flow-run/{flow_run_id}", shots / "prefect_flow_run.png")
        assert "evaluate" in run_dom and f"mlflow-run:{summary['mlflow_run_id']}" in run_dom  # name, tag
        (table,) = prefect_artifacts(urls["prefect"], flow_run_id, "table")
        table_dom = render(f"{urls['prefect']}/artifacts/artifact/{table['id']}", shots / "prefect_results_table.png")
        assert "pass@k per checkpoint" in table_dom  # the results table's description ...
        assert "pass_at_k" in table_dom and "ci_low" in table_dom  # ... and its columns
        mlflow_dom = render(f"{urls['mlflow']}/#/experiments/{experiment_id}/runs/{summary['mlflow_run_id']}",
                            shots / "mlflow_run.png")
        assert "evaluate" in mlflow_dom and "math/pass_at_1" in mlflow_dom
        model_dom = render(f"{urls['mlflow']}/#/models/passband-reasoner", shots / "mlflow_registered_model.png")
        assert "passband-reasoner" in model_dom and "champion" in model_dom
    finally:
        subprocess.run([str(BIN / "passband"), "down"], cwd=tmp_path, env=env, capture_output=True, timeout=180)
    for name in ("prefect_flow_run.png", "prefect_results_table.png", "mlflow_run.png", "mlflow_registered_model.png"):
        assert (shots / name).stat().st_size > 10_000, name


# Log the shipped model as the evaluate run's MLflow model and register it as the champion, as the
# pipeline does with its best checkpoint; print the experiment and the Prefect flow run of that run.
REGISTER = """
import sys

import mlflow

from passband.tasks.artifacts.checkpoints import commit_checkpoint
from passband.tasks.reporting import tracking
from passband.tasks.reporting.registry import log_model, register_checkpoint

model_dir, run_id = sys.argv[1], sys.argv[2]
tracking.configure()
uri = commit_checkpoint.fn(model_dir, "models/browser-test", "test", {}, {})
log_model.fn(uri, run_id, "# browser test model")
register_checkpoint.fn("passband-reasoner", run_id, {"checkpoint_uri": uri})
run = mlflow.get_run(run_id)
print(run.info.experiment_id, run.data.tags["prefect.flow_run_id"])
"""
