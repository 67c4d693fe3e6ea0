"""The production stack for real, without Docker (infra/stack/postgres.py): PostgreSQL 15, a Prefect
server and an MLflow tracking server on it (artifacts proxied to S3), moto's S3 server over HTTP
standing in for MinIO, every setting from infra/stack.env.

The pipeline's smoke preset runs against it through the CLI; then MLflow (over its REST API),
the bucket (over S3) and the databases (over SQL) are read back as a user of the compose stack
would. Then transient outages mid-run: the MLflow server killed and restarted, the S3 server
frozen (SIGSTOP: moto keeps its objects in memory, so a killed one would come back empty).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlparse

import pytest
import yaml

from passband.stack.postgres import MLFLOW_ARTIFACTS_DESTINATION, PostgresStack, StackPorts, read_env_file

INFRA = Path(__file__).resolve().parent.parent / "infra"
BIN = Path(sys.executable).parent
ARTIFACTS = "artifacts"  # the prefix of PASSBAND_ARTIFACT_ROOT=s3://passband/artifacts in infra/stack.env
PIPELINE_STAGES = ["curate", "evaluate-base", "evaluate-rl", "evaluate-sft", "recurate", "rl", "sft"]
HASHED_UP_TO = 64 << 20  # files up to this size are re-hashed from the bucket; larger ones checked by size


def test_stack_gives_each_service_what_compose_gives_it(tmp_path) -> None:
    """The commands and settings of infra/stack/postgres.py are compose's, hosts and ports aside."""
    ports = StackPorts(postgres=15432, prefect=14200, mlflow=15000, s3=19000)
    stack = PostgresStack(tmp_path, ports)
    env = read_env_file(INFRA / "stack.env")
    # compose's `${VAR:-default}` filled from stack.env, as `docker compose --env-file infra/stack.env` does
    text = re.sub(r"(?<!\$)\$\{(\w+)(:-([^}]*))?\}", lambda m: env.get(m.group(1)) or m.group(3) or "",
                  (INFRA / "docker-compose.yaml").read_text())
    compose = yaml.safe_load(text)["services"]

    def as_compose(url: str) -> str:  # our 127.0.0.1:port -> compose's service:port
        return url.replace("127.0.0.1:15432", "postgres:5432").replace("127.0.0.1:19000", "minio:9000")

    prefect_argv, prefect_env = stack.command("prefect-server")
    assert as_compose(prefect_env["PREFECT_API_DATABASE_CONNECTION_URL"]) == \
        compose["prefect-server"]["environment"]["PREFECT_API_DATABASE_CONNECTION_URL"]
    assert prefect_argv[1:3] == compose["prefect-server"]["command"].split()[1:3]  # server start
    mlflow_argv, mlflow_env = stack.command("mlflow-server")
    compose_mlflow = compose["mlflow"]["command"].split()
    for option in ("--backend-store-uri", "--artifacts-destination"):
        ours = mlflow_argv[mlflow_argv.index(option) + 1]
        assert as_compose(ours) == compose_mlflow[compose_mlflow.index(option) + 1], option
    assert as_compose(mlflow_env["MLFLOW_S3_ENDPOINT_URL"]) == compose["mlflow"]["environment"]["MLFLOW_S3_ENDPOINT_URL"]
    assert set(stack.buckets()) == set(re.findall(r"stack/(\w+)", compose["create-buckets"]["entrypoint"][-1]))
    assert urlparse(MLFLOW_ARTIFACTS_DESTINATION).netloc == stack.buckets()[0]
    # a compose user's settings, ours with the ports swapped in
    client = stack.client_env()
    assert set(client) == {name for name in env if not name.startswith("POSTGRES_")}
    assert client["PASSBAND_ARTIFACT_ROOT"] == env["PASSBAND_ARTIFACT_ROOT"]
    assert (client["PREFECT_API_URL"], client["PASSBAND_MLFLOW_URI"], client["PASSBAND_S3_ENDPOINT_URL"]) == (
        "http://127.0.0.1:14200/api", "http://127.0.0.1:15000", "http://127.0.0.1:19000")


# -- the stack, started once for the slow tests below --------------------------------------------


@pytest.fixture(scope="module")
def stack() -> Iterator[PostgresStack]:
    # under /tmp and world-executable: as root, PostgreSQL runs as user postgres and must reach it
    root = Path(tempfile.mkdtemp(prefix="passband-stack-"))
    root.chmod(0o711)
    stack = PostgresStack(root, StackPorts(postgres=0, prefect=0, mlflow=0, s3=0))
    started = time.monotonic()
    try:
        stack.start()
        print(f"\nstack up in {time.monotonic() - started:.0f}s under {root}: {stack.ports.model_dump()}")
        yield stack
    finally:
        stack.stop()
        shutil.rmtree(root, ignore_errors=True)


def s3_client(stack: PostgresStack):
    import boto3

    env = stack.client_env()
    return boto3.client("s3", endpoint_url=env["PASSBAND_S3_ENDPOINT_URL"], region_name=env["AWS_DEFAULT_REGION"],
                        aws_access_key_id=env["AWS_ACCESS_KEY_ID"], aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"])


def list_objects(stack: PostgresStack, bucket: str, prefix: str) -> dict[str, int]:
    """{key: size} of every object under `prefix`."""
    pages = s3_client(stack).get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
    return {item["Key"]: item["Size"] for page in pages for item in page.get("Contents", [])}


def check_artifacts(stack: PostgresStack, prefix: str) -> dict[str, dict]:
    """Every object under s3://passband/<prefix>/ is a manifest or a file its manifest lists, in the
    manifest's one version folder, with the listed size (and sha256, up to HASHED_UP_TO bytes);
    every listed file is there. Returns {artifact key: manifest}."""
    client = s3_client(stack)
    bucket = stack.buckets()[1]
    objects = list_objects(stack, bucket, f"{prefix}/")
    manifests = {}
    for name in objects:
        if name.endswith("/manifest.json"):
            key = name.removeprefix(f"{prefix}/").removesuffix("/manifest.json")
            manifests[key] = json.loads(client.get_object(Bucket=bucket, Key=name)["Body"].read())
    expected = {f"{prefix}/{key}/manifest.json" for key in manifests}
    for key, manifest in manifests.items():
        assert manifest["key"] == key
        for relative, entry in manifest["files"].items():
            name = f"{prefix}/{key}/{manifest['version']}/{relative}"
            expected.add(name)
            assert objects.get(name) == entry["size"], f"{name}: listed {entry['size']} bytes, stored {objects.get(name)}"
            if entry["size"] <= HASHED_UP_TO:
                body = client.get_object(Bucket=bucket, Key=name)["Body"].read()
                assert hashlib.sha256(body).hexdigest() == entry["sha256"], name
    assert set(objects) == expected, f"objects no manifest accounts for: {sorted(set(objects) - expected)}"
    return manifests


def run_cli(stack: PostgresStack, home: Path, args: list[str], experiment: str, artifact_prefix: str,
            stderr_path: Path) -> subprocess.Popen:
    """`passband run ...` in the background, with a compose user's settings pointed at `stack`."""
    env = {**os.environ, **stack.client_env(), "PASSBAND_HOME": str(home), "PASSBAND_EXPERIMENT": experiment,
           "PASSBAND_ARTIFACT_ROOT": f"s3://{stack.buckets()[1]}/{artifact_prefix}"}
    env.pop("PASSBAND_MLFLOW_ARTIFACT_ROOT", None)
    home.mkdir(parents=True, exist_ok=True)
    return subprocess.Popen([str(BIN / "passband"), "run", *args], cwd=home, env=env, stdout=subprocess.PIPE,
                            stderr=stderr_path.open("w"), text=True)


def finish(proc: subprocess.Popen, stderr_path: Path, timeout: float) -> dict:
    stdout, _ = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, stderr_path.read_text()[-4000:]
    return json.loads(stdout)


def mlflow_client(stack: PostgresStack):
    from mlflow import MlflowClient

    return MlflowClient(tracking_uri=stack.url("mlflow"), registry_uri=stack.url("mlflow"))


def sql(stack: PostgresStack, database: str, query: str) -> list[tuple]:
    import psycopg

    with psycopg.connect(stack.database_url(database)) as connection:
        return connection.execute(query).fetchall()


# -- the pipeline on the stack ----------------------------------------------------------------------


@pytest.mark.slow
def test_pipeline_smoke_on_the_stack(stack, tmp_path) -> None:
    import mlflow

    mlflow.set_tracking_uri(stack.url("mlflow"))  # resolves the runs' mlflow-artifacts:/ URIs below

    started = time.monotonic()
    stderr_path = tmp_path / "pipeline.stderr"
    proc = run_cli(stack, tmp_path / "home", ["pipeline", "--preset", "smoke"], "stack-smoke", ARTIFACTS,
                   stderr_path)
    summary = finish(proc, stderr_path, timeout=5400)
    print(f"\npipeline smoke on the stack: {time.monotonic() - started:.0f}s, status {summary['status']}")
    assert summary["status"] == "completed"

    # MLflow, over its REST API: one parent run, a nested run per stage, each FINISHED with metrics
    client = mlflow_client(stack)
    parent = client.get_run(summary["mlflow_run_id"])
    experiment_id = parent.info.experiment_id
    children = client.search_runs([experiment_id], f"tags.mlflow.parentRunId = '{parent.info.run_id}'")
    assert (parent.info.run_name, parent.info.status) == ("pipeline", "FINISHED")
    assert sorted(run.info.run_name for run in children) == PIPELINE_STAGES
    every_run = client.search_runs([experiment_id])
    assert len(every_run) == 1 + len(PIPELINE_STAGES)  # nothing else in the experiment, no stray run
    print("\nMLflow run tree (from the tracking server):")
    print(f"  {parent.info.run_name} {parent.info.run_id} {parent.info.status} metrics={len(parent.data.metrics)}"
          f" artifacts={parent.info.artifact_uri}")
    for run in sorted(children, key=lambda r: r.info.start_time):
        inputs = [(d.dataset.name, d.dataset.source) for d in run.inputs.dataset_inputs]
        print(f"    {run.info.run_name:14s} {run.info.run_id} {run.info.status} metrics={len(run.data.metrics)}"
              f" params={len(run.data.params)} datasets={len(inputs)}")
        assert run.info.status == "FINISHED" and run.data.metrics and run.data.params, run.info.run_name
        # run artifacts go through the server's proxy (compose: --artifacts-destination s3://mlflow/)
        assert run.info.artifact_uri.startswith("mlflow-artifacts:/"), run.info.artifact_uri
        config = mlflow.artifacts.load_dict(f"{run.info.artifact_uri}/config.json")
        assert str(config["model"]) == run.data.params["model"]
        for _, source in inputs:  # every dataset input names an artifact in the bucket
            assert f"s3://passband/{ARTIFACTS}/" in source, source
    runs_by_name = {run.info.run_name: run for run in children}
    for name in ("curate", "recurate", "sft", "rl", "evaluate-base"):
        assert runs_by_name[name].inputs.dataset_inputs, f"{name} logged no dataset"

    # the registered model: the champion is the best stage's MLflow model, stored in the mlflow bucket
    champion = client.get_model_version_by_alias("passband-reasoner", "champion")
    assert champion.run_id in {runs_by_name["sft"].info.run_id, runs_by_name["rl"].info.run_id}
    assert champion.tags["checkpoint_uri"] == summary["outputs"]["best_checkpoint"]
    mlflow_bucket = stack.buckets()[0]
    mlflow_objects = list_objects(stack, mlflow_bucket, "")
    (mlmodel_key,) = [key for key in mlflow_objects if key.endswith(f"{champion.run_id}/artifacts/model/MLmodel")]
    proxied = Path(mlflow.artifacts.download_artifacts(f"runs:/{champion.run_id}/model/MLmodel",
                                                       dst_path=str(tmp_path / "proxied"),
                                                       tracking_uri=stack.url("mlflow")))
    stored = s3_client(stack).get_object(Bucket=mlflow_bucket, Key=mlmodel_key)["Body"].read()
    assert proxied.read_bytes() == stored  # the proxy serves what is in the bucket
    print(f"\nregistered: passband-reasoner version {champion.version} @champion <- run {champion.run_id}"
          f" ({mlmodel_key})")

    # the bucket, over S3: every artifact with its manifest, no object outside one, every output there
    manifests = check_artifacts(stack, ARTIFACTS)
    for name, uri in summary["outputs"].items():
        key = uri.removeprefix(f"s3://passband/{ARTIFACTS}/")
        assert key in manifests, f"output {name} = {uri} has no manifest in the bucket"
    stage_flows = sorted(m["flow"] for key, m in manifests.items() if key.startswith("stages/"))
    assert stage_flows == ["curate", "curate", "evaluate", "evaluate", "evaluate", "rl", "sft"]
    print(f"\nbucket s3://passband/{ARTIFACTS}/ ({len(manifests)} artifacts):")
    for key, manifest in sorted(manifests.items()):
        size = sum(entry["size"] for entry in manifest["files"].values())
        print(f"  {key}/  {manifest['version']}  {len(manifest['files'])} files  {size} bytes  flow={manifest['flow']}")
    print(f"bucket s3://{mlflow_bucket}/: {len(mlflow_objects)} objects, {sum(mlflow_objects.values())} bytes")

    # the databases behind the servers, over SQL: MLflow's runs and Prefect's flow runs are in PostgreSQL
    ((stored_runs,),) = sql(stack, "mlflow", f"SELECT count(*) FROM runs WHERE experiment_id = {int(experiment_id)}")
    assert stored_runs == len(every_run)
    states = dict(sql(stack, "prefect", "SELECT name, state_type FROM flow_run WHERE name = 'pipeline'"))
    assert states == {"pipeline": "COMPLETED"}


# -- transient outages mid-run ----------------------------------------------------------------------

EVALUATE = ["evaluate", "--preset", "smoke", "--set", "engine.kind=hf", "--set", "sampling.n=2",
            "--set", "sampling.max_tokens=16", "--set", "suites={math: {suite: math, num_problems: 3, seed: 9001}}",
            "--set", "baseline=null"]


def wait_for_running_run(stack: PostgresStack, experiment: str, proc: subprocess.Popen, timeout: float) -> str:
    """The id of the experiment's first RUNNING run, once the process has opened it."""
    client = mlflow_client(stack)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, "the run ended before it was interrupted"
        found = client.get_experiment_by_name(experiment)
        runs = client.search_runs([found.experiment_id], "attributes.status = 'RUNNING'") if found else []
        if runs:
            return runs[0].info.run_id
        time.sleep(1)
    raise TimeoutError(f"no RUNNING run in {experiment} after {timeout:.0f}s")


def wait_for(condition, timeout: float, what: str) -> float:
    started = time.monotonic()
    while not condition():
        assert time.monotonic() - started < timeout, f"{what} did not happen within {timeout:.0f}s"
        time.sleep(0.5)
    return time.monotonic() - started


def pending_requests(port: int) -> int:
    """Connections to 127.0.0.1:`port` whose bytes wait unread (a frozen server's clients)."""
    count = 0
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        local_port = int(fields[1].split(":")[1], 16)
        rx_queue = int(fields[4].split(":")[1], 16)
        if local_port == port and fields[3] == "01" and rx_queue > 0:  # 01: ESTABLISHED
            count += 1
    return count


def evaluate_twice_around(stack: PostgresStack, tmp_path: Path, model: Path, experiment: str, prefix: str,
                          outage) -> None:
    """Run the evaluate flow through `outage(proc, stderr_path)`, then again: the first completes, the
    second reuses it (stage cache), and the bucket holds the same objects after both."""
    args = [*EVALUATE, "--set", f"model={model}"]
    stderr_path = tmp_path / "first.stderr"
    proc = run_cli(stack, tmp_path / "home", args, experiment, prefix, stderr_path)
    try:
        outage(proc, stderr_path)
        first = finish(proc, stderr_path, timeout=1800)
    finally:
        if proc.poll() is None:  # a failed assertion above: do not leave the run behind
            proc.kill()
    assert first["status"] == "completed"
    client = mlflow_client(stack)
    run = client.get_run(first["mlflow_run_id"])
    assert run.info.status == "FINISHED" and run.data.metrics
    for name in run.data.metrics:  # each metric once per step: no request applied twice by a retry
        steps = [metric.step for metric in client.get_metric_history(run.info.run_id, name)]
        assert len(steps) == len(set(steps)), (name, steps)
    objects = list_objects(stack, stack.buckets()[1], f"{prefix}/")
    manifests = check_artifacts(stack, prefix)

    second_stderr = tmp_path / "second.stderr"
    second = finish(run_cli(stack, tmp_path / "home", args, experiment, prefix, second_stderr), second_stderr,
                    timeout=1800)
    assert second == first  # a cache hit returns the first run's summary, its MLflow run included
    (rerun,) = [r for r in client.search_runs([run.info.experiment_id]) if r.info.run_id != run.info.run_id]
    assert rerun.info.status == "FINISHED" and rerun.data.tags["passband.cache_hit"] == "true"
    assert rerun.data.tags["passband.cached_from_run"] == first["mlflow_run_id"]
    assert list_objects(stack, stack.buckets()[1], f"{prefix}/") == objects  # nothing lost, nothing duplicated
    print(f"\n{experiment}: first run {first['mlflow_run_id']} completed, rerun {rerun.info.run_id} reused it;"
          f" s3://passband/{prefix}/ holds the same {len(objects)} objects ({len(manifests)} artifacts) after both")


@pytest.mark.slow
def test_mlflow_server_killed_mid_run(stack, smollm2_dir, tmp_path) -> None:
    port = stack.ports.mlflow

    def outage(proc: subprocess.Popen, stderr_path: Path) -> None:
        run_id = wait_for_running_run(stack, "outage-mlflow", proc, timeout=900)
        stack.kill("mlflow-server")
        # the run's next MLflow request meets a closed port and urllib3 retries it (MLflow's client:
        # 7 retries with exponential backoff, ~4 minutes in all)
        # (urllib3's warning; boto3 retries without it and Prefect's client is httpx)
        waited = wait_for(lambda: "Retrying (Retry(" in stderr_path.read_text(), timeout=900,
                          what="a retried MLflow request")
        down = time.monotonic()
        stack.start_service("mlflow-server")
        retried = next(line for line in stderr_path.read_text().splitlines() if "Retrying (Retry(" in line)
        print(f"\nMLflow server (port {port}) killed while run {run_id} was RUNNING; {waited:.0f}s later the run"
              f" retried:\n  {retried[:400]}\nserver back {time.monotonic() - down:.0f}s after that")

    evaluate_twice_around(stack, tmp_path, smollm2_dir, "outage-mlflow", "outage-mlflow", outage)


@pytest.mark.slow
def test_s3_server_frozen_mid_run(stack, smollm2_dir, tmp_path) -> None:
    pid = stack.pid("s3")

    def outage(proc: subprocess.Popen, stderr_path: Path) -> None:
        wait_for_running_run(stack, "outage-s3", proc, timeout=900)
        os.killpg(pid, signal.SIGSTOP)
        try:
            waited = wait_for(lambda: pending_requests(stack.ports.s3) > 0, timeout=900,
                              what="a request to the frozen S3 server")
            # past botocore's 60 s read timeout: the request times out and is sent again
            time.sleep(75)
        finally:
            os.killpg(pid, signal.SIGCONT)
        print(f"\nS3 server frozen (SIGSTOP) while the run was RUNNING; a request waited on it {waited:.0f}s"
              f" later; thawed 75s after that")

    evaluate_twice_around(stack, tmp_path, smollm2_dir, "outage-s3", "outage-s3", outage)


def test_up_postgres_refuses_the_local_stacks_workers(tmp_path, monkeypatch) -> None:
    from click.testing import CliRunner

    from passband.cli.main import main

    monkeypatch.setenv("PASSBAND_HOME", str(tmp_path / "home"))
    result = CliRunner().invoke(main, ["up", "--stack", "postgres", "--worker"])
    assert result.exit_code == 2
    assert "--worker, --task-workers and --rollout-workers start workers for the local stack only" in result.output
    assert not (tmp_path / "home" / "stack").exists()  # refused before anything started
