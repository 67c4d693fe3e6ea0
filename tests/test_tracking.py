"""The MLflow layer against a real MLflow on a temporary SQLite file, read back via MlflowClient."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import matplotlib
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from passband.tasks.host.settings import StackSettings
from passband.tasks.reporting import tracking

matplotlib.use("Agg")

CONFIG = {
    "flow": "sft",
    "model": {"name": "smollm2-135m-instruct", "dtype": "float32"},
    "sft": {"lr": 1e-4, "stages": [{"len": 256}, {"len": 512}], "extra": {}},
    "notes": "x" * 7000,  # over MLflow's 6000-character param limit
}


@pytest.fixture(scope="module")
def settings(tmp_path_factory: pytest.TempPathFactory) -> StackSettings:
    # One database for the file: creating an MLflow SQLite schema takes seconds.
    home = tmp_path_factory.mktemp("passband-home")
    settings = StackSettings.from_env({"PASSBAND_HOME": str(home),
                                       "PASSBAND_EXPERIMENT": "passband-test"})
    tracking.configure(settings)
    return settings


def test_flatten_params_by_hand() -> None:
    assert tracking.flatten_params(CONFIG, max_value_length=10) == {
        "flow": "sft",
        "model.name": "smollm2-13",
        "model.dtype": "float32",
        "sft.lr": "0.0001",
        "sft.stages": '[{"len": 2',
        "sft.extra": "{}",
        "notes": "x" * 10,
    }


def test_parent_and_nested_runs_with_config_metrics_dataset_and_figure(
        settings: StackSettings, tmp_path: Path) -> None:
    from matplotlib.figure import Figure
    from mlflow import MlflowClient

    samples = pa.table({"prompt_id": [0, 0, 1], "text": ["a", "bb", "ccc"],
                        "token_ids": [[1], [2, 3], [4, 5, 6]]})
    pq.write_table(samples, tmp_path / "samples.parquet")
    figure = Figure()
    figure.add_subplot().plot([0, 1], [1, 0])

    with tracking.start_run("pipeline", tags={"preset": "smoke"}) as parent_id:
        tracking.log_config(CONFIG)
        with tracking.start_run("sft", nested=True) as child_id:
            tracking.log_metrics({"train/loss": 2.5, "train/lr": 1e-4}, step=1)
            tracking.log_metrics({"train/loss": 1.5}, step=2)
            tracking.log_dataset("file:///data/samples", "samples", "training", samples)
            tracking.log_figure(figure, "plots/loss.png")
        tracking.log_dataset("s3://bucket/eval", "eval", "eval", tmp_path / "samples.parquet")
        tracking.log_artifact_file(tmp_path / "samples.parquet", "outputs")

    client = MlflowClient()
    parent, child = client.get_run(parent_id), client.get_run(child_id)
    experiment = client.get_experiment(parent.info.experiment_id)
    assert experiment.name == "passband-test"
    assert experiment.artifact_location == (settings.home / "mlflow-artifacts").as_uri()
    assert child.data.tags["mlflow.parentRunId"] == parent_id
    assert parent.data.tags["preset"] == "smoke"
    assert (parent.info.status, child.info.status) == ("FINISHED", "FINISHED")

    params = parent.data.params
    assert params["model.name"] == "smollm2-135m-instruct"
    assert params["sft.stages"] == '[{"len": 256}, {"len": 512}]'
    assert params["sft.lr"] == "0.0001"
    assert params["notes"] == "x" * 6000
    config_file = client.download_artifacts(parent_id, "config.json", str(tmp_path / "dl"))
    assert json.loads(Path(config_file).read_text()) == CONFIG

    history = client.get_metric_history(child_id, "train/loss")
    assert [(m.step, m.value) for m in history] == [(1, 2.5), (2, 1.5)]
    assert client.get_metric_history(child_id, "train/lr")[0].step == 1

    (child_input,) = child.inputs.dataset_inputs
    assert child_input.dataset.name == "samples"
    assert json.loads(child_input.dataset.source) == {"uri": "file:///data/samples"}
    assert json.loads(child_input.dataset.profile)["num_rows"] == 3
    assert {tag.key: tag.value for tag in child_input.tags} == {"mlflow.data.context": "training"}
    (parent_input,) = parent.inputs.dataset_inputs
    assert json.loads(parent_input.dataset.source) == {"uri": "s3://bucket/eval"}

    child_artifacts = [a.path for a in client.list_artifacts(child_id, "plots")]
    assert child_artifacts == ["plots/loss.png"]
    assert [a.path for a in client.list_artifacts(parent_id, "outputs")] == ["outputs/samples.parquet"]


def test_failed_run_is_marked_failed(settings: StackSettings) -> None:
    from mlflow import MlflowClient

    with pytest.raises(ZeroDivisionError):
        with tracking.start_run("broken") as run_id:
            1 / 0
    assert MlflowClient().get_run(run_id).info.status == "FAILED"


def test_worker_thread_needs_run_id_and_can_nest_under_parent(settings: StackSettings) -> None:
    """Prefect runs tasks in threads, which do not see the flow thread's active run."""
    from mlflow import MlflowClient

    errors: list[Exception] = []
    child_ids: list[str] = []

    def task(parent_id: str) -> None:
        try:
            tracking.log_metrics({"x": 1.0}, step=0)
        except RuntimeError as error:
            errors.append(error)
        tracking.log_metrics({"x": 2.0}, step=3, run_id=parent_id)
        with tracking.start_run("stage", parent_run_id=parent_id) as child_id:
            child_ids.append(child_id)

    with tracking.start_run("flow") as parent_id:
        worker = threading.Thread(target=task, args=(parent_id,))
        worker.start()
        worker.join()

    assert "no active MLflow run in this thread" in str(errors[0])
    client = MlflowClient()
    assert [(m.step, m.value) for m in client.get_metric_history(parent_id, "x")] == [(3, 2.0)]
    assert client.get_run(child_ids[0]).data.tags["mlflow.parentRunId"] == parent_id


def test_empty_dataset_and_subflow_nesting(settings: StackSettings) -> None:
    """An empty table (a curation split that filtered everything) still logs as an input, and a
    sub-flow that starts its run with parent_run_id in the parent's own thread nests under it."""
    from mlflow import MlflowClient

    with tracking.start_run("parent") as parent_id:
        with tracking.start_run("stage", parent_run_id=parent_id) as child_id:
            tracking.log_dataset("file:///data/removed", "removed", "removed",
                                 pa.table({"id": pa.array([], type=pa.string())}), child_id)
    client = MlflowClient()
    child = client.get_run(child_id)
    assert child.data.tags["mlflow.parentRunId"] == parent_id
    assert [d.dataset.name for d in child.inputs.dataset_inputs] == ["removed"]


def test_the_experiment_is_a_model_training_one_and_runs_say_what_produced_them(tmp_path, monkeypatch):
    """MLflow 3's UI opens an experiment tagged custom_model_development as model training, not in its
    GenAI view; every stage run carries the code version and config hash."""
    import mlflow
    from prefect import flow

    from passband.flows.config import Config
    from passband.tasks.artifacts.provenance import code_version, config_hash
    from passband.tasks.stages.stage import stage_run

    monkeypatch.setenv("PASSBAND_HOME", str(tmp_path))
    monkeypatch.setenv("PASSBAND_EXPERIMENT", "kind-test")

    class Tiny(Config):
        x: int = 1

    @flow
    def tiny_flow() -> str:
        with stage_run("tiny", Tiny(), cache=False) as run:
            return run.run_id

    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=300):
        state = tiny_flow(return_state=True)
        run_id = state.result()
        from prefect.client.orchestration import get_client

        with get_client(sync_client=True) as client:
            flow_run_tags = client.read_flow_run(state.state_details.flow_run_id).tags
    assert f"mlflow-run:{run_id}" in flow_run_tags
    experiment = mlflow.get_experiment_by_name("kind-test")
    assert experiment.tags["mlflow.experimentKind"] == "custom_model_development"
    tags = mlflow.get_run(run_id).data.tags
    assert tags["passband.code_version"] == code_version()
    assert tags["passband.config_hash"] == config_hash({"x": 1})
    assert tags["prefect.flow_run_id"]


def test_run_in_stage_runs_the_work_once_and_then_returns_the_cached_summary(tmp_path, monkeypatch):
    """The stage preamble every cached flow shares: a second identical run reuses the first's summary
    without running its work (tasks/stages/stage.py: run_in_stage)."""
    from prefect import flow

    from passband.flows.config import Config
    from passband.tasks.stages.stage import run_in_stage

    monkeypatch.setenv("PASSBAND_HOME", str(tmp_path))

    class Tiny(Config):
        x: int = 1

    calls = []

    def work(stage):
        calls.append(stage.run_id)
        return stage.finish({"out": "file:///x"}, {"m": 1.0})

    @flow
    def tiny_flow():
        return run_in_stage("tiny", Tiny(), work)

    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=300):
        first = tiny_flow()
        second = tiny_flow()
    assert len(calls) == 1
    assert second.mlflow_run_id == first.mlflow_run_id == calls[0]
    assert second.outputs == {"out": "file:///x"} and second.metrics == {"m": 1.0}
