"""The pipeline with its stages placed on a work pool: each stage is its own flow run, executed by
the pool's worker, and the pipeline ends where the in-process pipeline does.

The user's path as subprocesses: `passband up --worker` (a real Prefect server and a process
worker on the passband-process pool), `passband deploy` (infra/prefect.yaml as shipped), then
`passband run pipeline` with the tiny config of tests/test_flow_pipeline.py and
`placement: {every stage: passband-process}`. The Prefect API then shows what ran where; the
in-process pipeline with the same config, run after it in the same home, must give the same
outputs and table and hand every stage the same config, wired to the same upstream outputs.
A placed stage whose run fails fails the pipeline, naming that run and its state.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError

from passband.flows.pipeline.flow import PipelineConfig
from test_deploy import PASSBAND, api, local_stack  # noqa: F401  (local_stack is a fixture)
from test_flow_pipeline import tiny_config
from tiny_chat_model import tiny_llama, tiny_tokenizer

POOL = "passband-process"
PLACEMENT = {stage: POOL for stage in ("curate", "sft", "recurate", "rl", "evaluate")}
# flow run name -> flow name, of the stage runs one pipeline makes
STAGE_RUNS = {"curate": "curate", "sft": "sft", "recurate": "curate", "rl": "rl",
              "evaluate-base": "evaluate", "evaluate-sft": "evaluate", "evaluate-rl": "evaluate"}


def test_placement_is_checked_when_the_config_is_read() -> None:
    assert PipelineConfig(placement={"sft": "gpu-pool"}).placement == {"sft": "gpu-pool"}
    with pytest.raises(ValidationError, match="placement"):
        PipelineConfig.model_validate({"placement": {"sfft": "gpu-pool"}})
    with pytest.raises(ValidationError, match="work pool names"):
        PipelineConfig(placement={"rl": "a/b"})
    assert PipelineConfig().placement == {}  # in-process stays the default


def _run_pipeline(env: dict, cwd: Path, config: dict) -> tuple[int, dict, str]:
    path = cwd / f"pipeline-{len(list(cwd.glob('pipeline-*.yaml')))}.yaml"
    path.write_text(yaml.safe_dump(config))
    done = subprocess.run([PASSBAND, "run", "pipeline", "--config", str(path)], env=env, cwd=cwd,
                          capture_output=True, text=True, timeout=1500)
    return done.returncode, json.loads(done.stdout.strip().splitlines()[-1]), done.stderr


def _by_output_name(value, names: dict[str, str]):
    """`value` with every URI of a pipeline output replaced by that output's name; other artifact
    URIs (an evaluation's samples) by a placeholder."""
    if isinstance(value, dict):
        return {_by_output_name(k, names): _by_output_name(v, names) for k, v in value.items()}
    if isinstance(value, list):
        return [_by_output_name(v, names) for v in value]
    if isinstance(value, str) and value.startswith("file://"):
        return names.get(value, "<artifact>")
    return value


def _stage_configs(client, summary: dict) -> dict[str, dict]:
    """Each stage run's logged config (its MLflow run's config.json), URIs named by pipeline output."""
    names = {}  # one name per URI, the same in both runs (best_checkpoint may name another checkpoint)
    for name, uri in sorted(summary["outputs"].items(), reverse=True):
        if name != "best_checkpoint":
            names[uri] = name
    parent = client.get_run(summary["mlflow_run_id"])
    children = client.search_runs([parent.info.experiment_id], f"tags.mlflow.parentRunId = '{parent.info.run_id}'")
    return {run.info.run_name: _by_output_name(mlflow_dict(client, run.info.run_id), names) for run in children}


def mlflow_dict(client, run_id: str) -> dict:
    import mlflow.artifacts

    return mlflow.artifacts.load_dict(f"runs:/{run_id}/config.json")


def _flow_runs(base: str) -> list[dict]:
    return api(base, "/flow_runs/filter", {"limit": 200})


# measured: see docs/scaling.md ("Stages on work pools")
@pytest.mark.slow
@pytest.mark.timeout(3600)
def test_pipeline_stages_run_as_flow_runs_on_the_worker(local_stack, tmp_path: Path, monkeypatch) -> None:
    env, base = local_stack
    deploy = subprocess.run([PASSBAND, "deploy"], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert deploy.returncode == 0, deploy.stderr[-3000:]
    model_dir = tmp_path / "tiny"
    tiny_llama(seed=0).save_pretrained(model_dir)
    tiny_tokenizer().save_pretrained(model_dir)
    config = tiny_config(model_dir, lr=1e-4).model_dump(mode="json")
    env = {**env, "PASSBAND_EXPERIMENT": "test-placement"}

    rc, placed, stderr = _run_pipeline(env, tmp_path, {**config, "placement": PLACEMENT})
    worker_log = (Path(env["PASSBAND_HOME"]) / "logs" / "prefect-worker.log").read_text()
    assert rc == 0, stderr[-3000:] + worker_log[-3000:]

    runs = _flow_runs(base)
    (pipeline_run,) = [r for r in runs if r["name"] == "pipeline"]
    assert pipeline_run["deployment_id"] is None and pipeline_run["state"]["type"] == "COMPLETED"  # run here
    stage_runs = {r["name"]: r for r in runs if r["id"] != pipeline_run["id"]}
    assert sorted(stage_runs) == sorted(STAGE_RUNS)
    for name, flow_name in STAGE_RUNS.items():
        run = stage_runs[name]
        # a run of that flow's deployment on the pool, picked up and executed by the worker
        deployment = api(base, f"/deployments/{run['deployment_id']}")
        assert (api(base, f"/flows/{deployment['flow_id']}")["name"], deployment["work_pool_name"]) == (flow_name, POOL)
        assert run["state"]["type"] == "COMPLETED" and run["work_pool_name"] == POOL
        assert run["infrastructure_pid"], name  # the worker's subprocess
        # linked to the pipeline as a subflow: its parent task run belongs to the pipeline's flow run
        assert api(base, f"/task_runs/{run['parent_task_run_id']}")["flow_run_id"] == pipeline_run["id"]

    # every output resolves, and the stages' MLflow runs are nested under the pipeline's
    monkeypatch.setenv("PASSBAND_HOME", env["PASSBAND_HOME"])
    from mlflow import MlflowClient

    from passband.tasks.artifacts.store import fetch_artifact
    from passband.tasks.reporting import tracking

    for name, uri in placed["outputs"].items():
        if uri.startswith("file://"):
            assert fetch_artifact(uri).is_dir(), name
    tracking.configure()
    client = MlflowClient()
    parent = client.get_run(placed["mlflow_run_id"])
    children = client.search_runs([parent.info.experiment_id], f"tags.mlflow.parentRunId = '{parent.info.run_id}'")
    assert sorted(r.info.run_name for r in children) == sorted(STAGE_RUNS)
    by_flow_run = {r.data.tags["prefect.flow_run_id"]: r.info.run_name for r in children}
    assert by_flow_run == {run["id"]: name for name, run in stage_runs.items()}

    # the same pipeline in process: the same outputs and table, and every stage given the same
    # config wired to the same upstream outputs (compared by output name, not URI: the URIs carry
    # the code version, which other work on a shared checkout may change between the two runs)
    rc, in_process, stderr = _run_pipeline(env, tmp_path, config)
    assert rc == 0, stderr[-3000:]
    assert sorted(in_process["outputs"]) == sorted(placed["outputs"])
    assert sorted(in_process["metrics"]) == sorted(placed["metrics"])
    assert _stage_configs(client, in_process) == _stage_configs(client, placed)

    # a placed stage that fails (a model directory that does not exist) fails the pipeline with its id
    rc, failed, _ = _run_pipeline(env, tmp_path, {**config, "model": str(tmp_path / "missing"), "placement": PLACEMENT})
    assert rc == 1
    (curate_run,) = [r for r in _flow_runs(base) if r["name"] == "curate" and r["state"]["type"] != "COMPLETED"]
    assert curate_run["state"]["type"] == "FAILED"
    assert f"flow run {curate_run['id']}" in failed["error"] and "ended FAILED" in failed["error"], failed["error"]
