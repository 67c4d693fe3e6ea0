"""A deployment registered by `passband deploy` runs to completion on a real local Prefect server.

The user's path, end to end, as subprocesses: `passband up --worker` (Prefect server, MLflow UI
and a process worker, on free ports, state in a temp PASSBAND_HOME), `passband deploy` of the
sample entry of infra/prefect.yaml, a flow run created from the deployment through the server's
REST API as the UI does, with a tiny config (the real model, 2 prompts x 1 sample of 8 tokens,
transformers engine), picked up by the worker; `passband down` at the end.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

REPO = Path(__file__).resolve().parent.parent
PASSBAND = str(Path(sys.executable).parent / "passband")
TERMINAL_STATES = {"COMPLETED", "FAILED", "CRASHED", "CANCELLED"}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def api(base: str, path: str, body: dict | None = None) -> dict:
    """GET (body None) or POST JSON to the Prefect REST API."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(f"{base}{path}", data=data, headers={"content-type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())


def sample_only_prefect_file(tmp_path: Path) -> Path:
    """infra/prefect.yaml cut down to the sample/demo deployment (the other flows' modules and the GPU
    pool's deployments are not this test's subject), with the template path made absolute as the
    copy lives elsewhere."""
    spec = yaml.safe_load((REPO / "infra" / "prefect.yaml").read_text())
    spec["deployments"] = [d for d in spec["deployments"]
                           if d["entrypoint"] == "flows/sample.py:sample" and d["name"] == "demo"]
    for pool in spec["work_pools"]:
        if "base_job_template" in pool:
            pool["base_job_template"] = str(REPO / "infra" / pool["base_job_template"])
    path = tmp_path / "prefect.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


@pytest.fixture
def local_stack(tmp_path: Path):
    """`passband up --worker` in a temp home; yields (env, Prefect API URL); `passband down` after."""
    home = tmp_path / "home"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "PASSBAND_"))}
    env.update(PASSBAND_HOME=str(home), PASSBAND_PREFECT_PORT=str(free_port()),
               PASSBAND_MLFLOW_PORT=str(free_port()), PREFECT_UI_ENABLED="false",
               PREFECT_WORKER_QUERY_SECONDS="2")  # default 15 s between polls for scheduled runs
    try:
        up = subprocess.run([PASSBAND, "up", "--worker"], env=env, cwd=tmp_path, capture_output=True,
                            text=True, timeout=660)  # stack.py waits up to 300 s per service
        assert up.returncode == 0, up.stderr[-3000:]
        assert "worker: pool passband-process" in up.stdout
        yield env, f"http://127.0.0.1:{env['PASSBAND_PREFECT_PORT']}/api"
    finally:
        pids = [int(p.read_text()) for p in (home / "run").glob("*.pid")]
        subprocess.run([PASSBAND, "down"], env=env, cwd=tmp_path, capture_output=True, timeout=60)
        stop_process_groups(pids, timeout_s=30)


def stop_process_groups(pids: list[int], timeout_s: float) -> None:
    """Wait for the groups `passband down` signalled to exit; SIGKILL what is left at the deadline."""
    deadline = time.monotonic() + timeout_s
    for pid in pids:
        while time.monotonic() < deadline and _group_alive(pid):
            time.sleep(0.5)
        if _group_alive(pid):
            os.killpg(pid, signal.SIGKILL)


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False


# measured 5-9 min of wall time here, where other jobs share the 2 cores (server start-up and
# migrations, the GGUF conversion and the flow run dominate)
@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_deployment_from_passband_deploy_runs_on_the_worker(local_stack, tmp_path: Path):
    env, base = local_stack
    deploy = subprocess.run([PASSBAND, "deploy", "--file", str(sample_only_prefect_file(tmp_path))],
                            env=env, cwd=tmp_path, capture_output=True, text=True, timeout=180)
    assert deploy.returncode == 0, deploy.stderr[-3000:]
    assert deploy.stdout.split() == ["registered", "sample/demo"]

    # the pools and the deployment as the server holds them
    gpu_pool = api(base, "/work_pools/passband-gpu")
    assert gpu_pool["type"] == "kubernetes"
    container = gpu_pool["base_job_template"]["job_configuration"]["job_manifest"]["spec"]["template"]["spec"]["containers"][0]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "{{ gpus }}"
    assert api(base, "/work_pools/passband-process")["type"] == "process"
    deployment = api(base, "/deployments/name/sample/demo")
    assert deployment["work_pool_name"] == "passband-process"
    assert deployment["entrypoint"] == "flows/sample.py:sample"
    assert deployment["pull_steps"] == [
        {"prefect.deployments.steps.set_working_directory": {"directory": str(REPO)}}]
    # flows/presets/sample/demo.yaml: 32 problems x 8 samples of 160 tokens, kl_subsample 64
    config = deployment["parameters"]["config"]
    assert (config["problems"]["num_problems"], config["sampling"]["n"], config["sampling"]["max_tokens"],
            config["kl_subsample"]) == (32, 8, 160, 64)

    # a run with a tiny config, as from the UI's "custom run" form; the worker's flow run converts
    # the shipped GGUF model into the stack's artifact store first (~30 s), as a user's first run does
    tiny = {"problems": {"num_problems": 2}, "sampling": {"n": 1, "max_tokens": 8},
            "engine": {"kind": "hf"}, "kl_subsample": 0}
    flow_run = api(base, f"/deployments/{deployment['id']}/create_flow_run", {"parameters": {"config": tiny}})
    deadline = time.monotonic() + 600
    state = flow_run["state"]["type"]
    while state not in TERMINAL_STATES and time.monotonic() < deadline:
        time.sleep(2)
        state = api(base, f"/flow_runs/{flow_run['id']}")["state"]["type"]
    worker_log = (Path(env["PASSBAND_HOME"]) / "logs" / "prefect-worker.log").read_text()
    assert state == "COMPLETED", worker_log[-4000:]

    # the worker's flow run wrote into the stack's home (not the checkout's): 2 prompts x n=1
    manifests = list((Path(env["PASSBAND_HOME"]) / "artifacts" / "samples").glob("*/manifest.json"))
    assert len(manifests) == 1
    assert json.loads(manifests[0].read_text())["config"]["problems"]["num_problems"] == 2
    (data,) = manifests[0].parent.glob("_v-*/data.parquet")
    assert pq.read_table(data).num_rows == 2
