"""The infra files agree with each other and with the code: compose services, healthchecks and
buckets, the env wiring of stack.env (read through tasks/host/settings.py), the deployments of every
flow, and the GPU job template. No Docker engine here: the compose file is parsed, not run."""

from __future__ import annotations

import json
import re
from pathlib import Path
from urllib.parse import urlparse

import pytest
import yaml

from passband.cli.main import FLOWS
from passband.tasks.host.settings import StackSettings

INFRA = Path(__file__).resolve().parent.parent / "infra"


def read_env_file(path: Path) -> dict[str, str]:
    pairs = (line.split("=", 1) for line in path.read_text().splitlines() if line.strip() and not line.startswith("#"))
    return {key.strip(): value.strip() for key, value in pairs}


def interpolate(text: str, env: dict[str, str]) -> str:
    """Compose's `${VAR:-default}` / `${VAR}` substitution; `$$` is a literal `$` for the container."""
    def one(match: re.Match) -> str:
        name, default = match.group(1), match.group(3) or ""
        return env.get(name) or default
    return re.sub(r"(?<!\$)\$\{(\w+)(:-([^}]*))?\}", one, text)


@pytest.fixture(scope="module")
def stack_env() -> dict[str, str]:
    return read_env_file(INFRA / "stack.env")


@pytest.fixture(scope="module")
def compose(stack_env) -> dict:
    return yaml.safe_load(interpolate((INFRA / "docker-compose.yaml").read_text(), stack_env))


def published_ports(service: dict) -> set[int]:
    return {int(str(p).split(":")[0]) for p in service.get("ports", [])}


def test_compose_defaults_equal_stack_env(stack_env):
    # `docker compose up` without --env-file must build the same stack the flows are pointed at
    text = (INFRA / "docker-compose.yaml").read_text()
    assert yaml.safe_load(interpolate(text, {})) == yaml.safe_load(interpolate(text, stack_env))


def test_compose_services_health_and_order(compose):
    services = compose["services"]
    assert set(services) == {"postgres", "minio", "create-buckets", "prefect-server", "mlflow", "task-worker"}
    for name, service in services.items():
        for target in service.get("depends_on", {}):
            assert target in services, f"{name} depends on missing {target}"
        if name != "create-buckets":  # the one-shot exits; the others must report healthy
            assert service["healthcheck"]["test"][0] in ("CMD", "CMD-SHELL"), name
    assert services["prefect-server"]["depends_on"] == {"postgres": {"condition": "service_healthy"}}
    assert services["mlflow"]["depends_on"] == {"postgres": {"condition": "service_healthy"},
                                                "create-buckets": {"condition": "service_completed_successfully"}}
    assert services["create-buckets"]["depends_on"] == {"minio": {"condition": "service_healthy"}}
    assert services["create-buckets"]["restart"] == "no"
    assert {"postgres-data", "minio-data"} <= set(compose["volumes"])


def test_compose_databases_and_buckets(compose, stack_env):
    services = compose["services"]
    prefect_db = urlparse(services["prefect-server"]["environment"]["PREFECT_API_DATABASE_CONNECTION_URL"])
    assert (prefect_db.scheme, prefect_db.hostname, prefect_db.path) == ("postgresql+asyncpg", "postgres", "/prefect")
    assert services["postgres"]["environment"]["POSTGRES_DB"] == "prefect"
    mlflow_args = services["mlflow"]["command"].split()
    mlflow_db = urlparse(mlflow_args[mlflow_args.index("--backend-store-uri") + 1])
    assert (mlflow_db.scheme, mlflow_db.hostname, mlflow_db.path) == ("postgresql+psycopg", "postgres", "/mlflow")
    assert "CREATE DATABASE mlflow;" in (INFRA / "postgres-init.sql").read_text()
    # both buckets written to exist after the one-shot: MLflow's destination and passband's root
    created = set(re.findall(r"stack/(\w+)", services["create-buckets"]["entrypoint"][-1]))
    mlflow_bucket = urlparse(mlflow_args[mlflow_args.index("--artifacts-destination") + 1]).netloc
    passband_bucket = urlparse(stack_env["PASSBAND_ARTIFACT_ROOT"]).netloc
    assert created == {mlflow_bucket, passband_bucket} == {"mlflow", "passband"}
    assert services["mlflow"]["environment"]["MLFLOW_S3_ENDPOINT_URL"] == "http://minio:9000"
    # MinIO's root user is the pair the flows (and MLflow) sign S3 requests with
    minio_env = services["minio"]["environment"]
    assert (minio_env["MINIO_ROOT_USER"], minio_env["MINIO_ROOT_PASSWORD"]) == (
        stack_env["AWS_ACCESS_KEY_ID"], stack_env["AWS_SECRET_ACCESS_KEY"])
    assert services["mlflow"]["environment"]["AWS_ACCESS_KEY_ID"] == stack_env["AWS_ACCESS_KEY_ID"]


def test_stack_env_points_the_settings_at_the_compose_ports(compose, stack_env):
    settings = StackSettings.from_env(stack_env)
    assert settings.artifact_root == "s3://passband/artifacts"
    assert settings.mlflow_artifact_root is None  # the tracking server proxies artifacts to MinIO
    services = compose["services"]
    assert urlparse(settings.prefect_api_url).port in published_ports(services["prefect-server"])
    assert urlparse(settings.mlflow_uri).port in published_ports(services["mlflow"])
    assert urlparse(settings.s3_endpoint_url).port in published_ports(services["minio"])


def test_every_flow_has_a_demo_deployment_on_the_process_pool_and_a_gpu_one_on_the_gpu_pool():
    spec = yaml.safe_load((INFRA / "prefect.yaml").read_text())
    placed = {(d["entrypoint"], d["work_pool"]["name"], d["config_preset"]) for d in spec["deployments"]}
    expected = set()
    for module, fn, _ in FLOWS.values():
        entrypoint = f"{module.removeprefix('passband.').replace('.', '/')}.py:{fn}"
        expected |= {(entrypoint, "passband-process", "demo"), (entrypoint, "passband-gpu", "gpu")}
    assert placed == expected
    # a pipeline stage placed on a pool needs exactly one deployment of its flow there (tasks/stages/placement.py)
    assert len(spec["deployments"]) == len(placed)
    (pipeline,) = [d for d in spec["deployments"] if d["entrypoint"] == "flows/pipeline/flow.py:pipeline" and d["name"] == "demo"]
    assert pipeline["schedules"] == [{"cron": "0 3 * * 1", "timezone": "UTC", "active": False}]
    assert [p["type"] for p in spec["work_pools"]] == ["process", "kubernetes"]


def test_gpu_job_template_requests_gpus_and_declares_every_placeholder():
    template = json.loads((INFRA / "k8s-gpu-job-template.json").read_text())
    pod = template["job_configuration"]["job_manifest"]["spec"]["template"]["spec"]
    resources = pod["containers"][0]["resources"]
    assert resources["limits"]["nvidia.com/gpu"] == resources["requests"]["nvidia.com/gpu"] == "{{ gpus }}"
    variables = template["variables"]["properties"]
    assert variables["gpus"]["default"] == 1
    used = set(re.findall(r"\{\{\s*(\w+)\s*\}\}", json.dumps(template["job_configuration"])))
    assert used - set(variables) == set()


def test_deployment_entry_resolves_preset_schedule_and_pull_step(monkeypatch):
    from passband.cli.deploy import REPO_ROOT, load_deployment_file, resolve_deployment

    monkeypatch.setenv("PASSBAND_REPO", "/srv/passband")
    spec = load_deployment_file(INFRA / "prefect.yaml")
    (entry,) = [d for d in spec["deployments"] if d["entrypoint"] == "flows/sample.py:sample" and d["name"] == "demo"]
    deployment = resolve_deployment(entry, 0)
    assert deployment.full_name == "sample/demo" and deployment.work_pool == "passband-process"
    assert deployment.runner.entrypoint == "flows/sample.py:sample"
    assert deployment.runner.storage.to_pull_step() == {
        "prefect.deployments.steps.set_working_directory": {"directory": "/srv/passband"}}
    # flows/presets/sample/demo.yaml: 32 problems x 8 samples of 160 tokens, kl_subsample 64
    config = deployment.runner.parameters["config"]
    assert (config["problems"]["num_problems"], config["sampling"]["n"], config["sampling"]["max_tokens"],
            config["kl_subsample"]) == (32, 8, 160, 64)
    assert REPO_ROOT.joinpath(entry["entrypoint"].split(":")[0]).is_file()

    bad = {**entry, "pull": []}
    with pytest.raises(ValueError, match=r"deployments\[3\] \('demo', 'flows/sample.py:sample'\): `pull` must be"):
        resolve_deployment(bad, 3)


def test_gpu_deployment_carries_the_gpu_preset_and_runs_from_the_image():
    from passband.cli.deploy import load_deployment_file, resolve_deployment

    spec = load_deployment_file(INFRA / "prefect.yaml")
    (entry,) = [d for d in spec["deployments"] if d["entrypoint"] == "flows/sample.py:sample" and d["name"] == "gpu"]
    deployment = resolve_deployment(entry, 0)
    assert deployment.full_name == "sample/gpu" and deployment.work_pool == "passband-gpu"
    assert deployment.runner.job_variables == {"gpus": 1}
    assert deployment.runner.storage.to_pull_step() == {
        "prefect.deployments.steps.set_working_directory": {"directory": "/opt/passband"}}
    # flows/presets/sample/gpu.yaml: a hub model, 256 problems x 8 samples of 1024 tokens, CUDA graphs on
    config = deployment.runner.parameters["config"]
    assert (config["model"], config["problems"]["num_problems"], config["sampling"]["n"],
            config["sampling"]["max_tokens"]) == ("Qwen/Qwen2.5-1.5B-Instruct", 256, 8, 1024)
    assert (config["engine"]["enforce_eager"], config["engine"]["memory_fraction"]) == (False, 0.85)
