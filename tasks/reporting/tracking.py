"""Thin MLflow layer for flows: one parent run per `passband run`, nested runs per stage.

Every logging function takes an optional `run_id`. Without it, it logs to this thread's active
run and raises if there is none. MLflow keeps the active run per thread and Prefect runs tasks in
worker threads, so inside a task pass `run_id=` explicitly; otherwise MLflow would silently start
a stray run of its own.

Defaults (tasks/host/settings.py): tracking URI `PASSBAND_MLFLOW_URI`, else
`sqlite:///<PASSBAND_HOME>/mlflow.db` with run artifacts under `<PASSBAND_HOME>/mlflow-artifacts`
(PASSBAND_HOME defaults to ./.passband); experiment `PASSBAND_EXPERIMENT`, else "passband".
"""

from __future__ import annotations

import json
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from passband.tasks.host.settings import StackSettings

if TYPE_CHECKING:
    import pyarrow
    from matplotlib.figure import Figure

EXPERIMENT_KIND_TAG = "mlflow.experimentKind"
PARAMS_PER_REQUEST = 100  # MLflow's log_batch limit on params
METRICS_PER_REQUEST = 1000  # and on metrics


def configure(settings: StackSettings | None = None) -> str:
    """Point MLflow at the stack's tracking URI and experiment; return the experiment id."""
    import mlflow

    settings = settings or StackSettings.from_env()
    if settings.mlflow_uri.startswith("sqlite:///"):
        settings.home.mkdir(parents=True, exist_ok=True)  # SQLite creates the file, not its folder
    mlflow.set_tracking_uri(settings.mlflow_uri)
    experiment = mlflow.get_experiment_by_name(settings.experiment)
    if experiment is None:
        # The kind tag makes MLflow 3's UI open it as model training (not its GenAI view).
        experiment_id = mlflow.create_experiment(settings.experiment,
                                                 artifact_location=settings.mlflow_artifact_root,
                                                 tags={EXPERIMENT_KIND_TAG: "custom_model_development"})
    else:
        experiment_id = experiment.experiment_id
        if EXPERIMENT_KIND_TAG not in experiment.tags:  # made before passband tagged its experiments
            mlflow.MlflowClient().set_experiment_tag(experiment_id, EXPERIMENT_KIND_TAG, "custom_model_development")
    mlflow.set_experiment(experiment_id=experiment_id)
    return experiment_id


@contextmanager
def start_run(name: str, nested: bool = False, tags: dict[str, str] | None = None,
              parent_run_id: str | None = None, system_metrics: bool = False) -> Iterator[str]:
    """Run `name` as this thread's active run and yield its id; it ends FAILED on an exception.

    `nested=True` nests it under this thread's active run; `parent_run_id` nests it under a run
    started elsewhere (e.g. the flow's parent run, from inside a Prefect task's thread).
    """
    import mlflow

    # A sub-flow runs in its parent flow's thread, where the parent's run is active: MLflow then
    # insists on nested=True (and checks that parent_run_id is that active run).
    nested = nested or (parent_run_id is not None and mlflow.active_run() is not None)
    # A child opens in its parent's experiment, even from another process whose default differs
    # (a pipeline stage placed on a work pool runs in a worker with the worker's settings).
    experiment_id = None if parent_run_id is None else mlflow.MlflowClient().get_run(parent_run_id).info.experiment_id
    # system_metrics: CPU, memory (and GPU where present) sampled by MLflow while the run is open.
    with mlflow.start_run(run_name=name, nested=nested, tags=tags, parent_run_id=parent_run_id,
                          experiment_id=experiment_id, log_system_metrics=system_metrics) as run:
        yield run.info.run_id


def flatten_params(config: dict[str, Any], max_value_length: int) -> dict[str, str]:
    """{"a.b.c": "value"} from nested dicts; lists as JSON; values cut to `max_value_length`.

    An empty dict stays visible as "{}" rather than vanishing from the params.
    """
    flat: dict[str, str] = {}
    for name, value in config.items():
        if isinstance(value, dict) and value:
            for sub_name, sub_value in flatten_params(value, max_value_length).items():
                flat[f"{name}.{sub_name}"] = sub_value
            continue
        text = json.dumps(value) if isinstance(value, list | tuple | dict) else str(value)
        flat[str(name)] = text[:max_value_length]
    return flat


def log_config(config: dict[str, Any], run_id: str | None = None) -> None:
    """Log the resolved config as params (flattened, dotted keys) and as artifact config.json."""
    from mlflow import MlflowClient
    from mlflow.entities import Param
    from mlflow.utils.validation import MAX_PARAM_VAL_LENGTH

    run_id = _run_id(run_id)
    flat = flatten_params(config, MAX_PARAM_VAL_LENGTH)
    params = [Param(key, value) for key, value in flat.items()]
    client = MlflowClient()
    for start in range(0, len(params), PARAMS_PER_REQUEST):
        client.log_batch(run_id, params=params[start : start + PARAMS_PER_REQUEST])
    client.log_dict(run_id, config, "config.json")


def log_metrics(metrics: dict[str, float], step: int, run_id: str | None = None) -> None:
    """Log metrics at `step` (required: every metric has one). Names kept as given, "/" too,
    except "@", which MLflow refuses in names: `math/pass@1` is logged as `math/pass_at_1`."""
    from mlflow import MlflowClient
    from mlflow.entities import Metric

    run_id = _run_id(run_id)
    timestamp_ms = int(time.time() * 1000)
    entries = [Metric(name.replace("@", "_at_"), float(value), timestamp_ms, step)
               for name, value in metrics.items()]
    for start in range(0, len(entries), METRICS_PER_REQUEST):
        MlflowClient().log_batch(run_id, metrics=entries[start : start + METRICS_PER_REQUEST])


def set_tags(tags: dict[str, str], run_id: str | None = None) -> None:
    """Set string tags on the run (stage boundaries, lineage, pointers to artifacts)."""
    from mlflow import MlflowClient
    from mlflow.entities import RunTag

    MlflowClient().log_batch(_run_id(run_id), tags=[RunTag(k, str(v)) for k, v in tags.items()])


def log_artifact_file(path: Path | str, artifact_path: str | None = None,
                      run_id: str | None = None) -> None:
    """Copy one local file into the run's artifacts, under the folder `artifact_path`."""
    from mlflow import MlflowClient

    MlflowClient().log_artifact(_run_id(run_id), str(path), artifact_path)


def log_dataset(uri: str, name: str, context: str, table: pyarrow.Table | Path | str,
                run_id: str | None = None) -> None:
    """Record a dataset as an input of the run: its source `uri` (where the artifact lives), a
    digest, schema and row count from `table` (a pyarrow Table or a Parquet file path), and
    `context` ("training", "eval", ...) as the input's tag.
    """
    import mlflow
    import pyarrow.parquet as pq
    from mlflow import MlflowClient
    from mlflow.entities import Dataset as DatasetEntity
    from mlflow.entities import DatasetInput, InputTag
    from mlflow.utils.mlflow_tags import MLFLOW_DATASET_CONTEXT

    if isinstance(table, Path | str):
        table = pq.read_table(table)
    with warnings.catch_warnings():
        # MLflow registers two equivalent sources for file:// URIs and warns that it picked one,
        # and warns on every integer column that pandas cannot hold missing values: noise here.
        warnings.filterwarnings("ignore", message="The specified dataset source can be interpreted")
        warnings.filterwarnings("ignore", message="Hint: Inferred schema contains integer column")
        frame = table.to_pandas()
        if frame.empty:
            # MLflow's digest compares `frame.map(type) == str`, which Arrow-backed string columns
            # of an empty frame cannot evaluate; object columns can.
            frame = frame.astype(object)
        dataset = mlflow.data.from_pandas(frame, source=uri, name=name)
        # The public route to the entity that MlflowClient.log_inputs takes (mlflow.log_input
        # builds it too, but only logs to this thread's active run). Schema is inferred here.
        entity = DatasetEntity(**dataset.to_dict())
    dataset_input = DatasetInput(entity, tags=[InputTag(MLFLOW_DATASET_CONTEXT, context)])
    MlflowClient().log_inputs(_run_id(run_id), datasets=[dataset_input])


def log_figure(figure: Figure, name: str, run_id: str | None = None) -> None:
    """Save a matplotlib figure as the run artifact `name` (e.g. "plots/pass_rate.png")."""
    from mlflow import MlflowClient

    MlflowClient().log_figure(_run_id(run_id), figure, name)


def _run_id(run_id: str | None) -> str:
    import mlflow

    if run_id is not None:
        return run_id
    active = mlflow.active_run()
    if active is None:
        raise RuntimeError(
            "no active MLflow run in this thread: log inside tracking.start_run(...), or pass"
            " run_id= (Prefect runs tasks in worker threads, which do not see the flow's run)"
        )
    return active.info.run_id


def run_url(run_id: str) -> str | None:
    """The MLflow UI page of a run: on the tracking server when it is reached over HTTP, else on
    the UI `passband up` serves for this home (PASSBAND_MLFLOW_UI_URL); None when there is none."""
    import os

    import mlflow

    uri = mlflow.get_tracking_uri()
    if not uri.startswith(("http://", "https://")):
        uri = os.environ.get("PASSBAND_MLFLOW_UI_URL", "")
    if not uri:
        return None
    experiment_id = mlflow.get_run(run_id).info.experiment_id
    return f"{uri.rstrip('/')}/#/experiments/{experiment_id}/runs/{run_id}"
