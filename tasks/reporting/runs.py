"""Reading back the runs of the stack's MLflow experiment: `passband runs`, and the run id a
failed `passband run` reports. Reading only: no experiment, database or folder is created.
A store that cannot be read (a damaged SQLite file, a server that does not answer) raises
StoreUnreadable with one line naming the store and what to do.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from passband.tasks.host.settings import StackSettings

PARENT_TAG = "mlflow.parentRunId"
# Metrics shown first when a run has them, in this order (names as logged: "@" -> "_at_");
# the rest follow alphabetically.
KEY_METRIC_HINTS = ("pass_at_1", "reward", "loss", "vllm_kl", "accuracy", "pass_rate")


class StoreUnreadable(RuntimeError):
    """The MLflow store cannot be read; the message is one line naming it and what to do."""


@dataclass(frozen=True)
class RunRow:
    """One MLflow run as `passband runs` shows it."""

    run_id: str
    name: str
    """Run name; a nested stage run is shown as "<parent name>/<name>"."""
    status: str
    """MLflow status: RUNNING, FINISHED, FAILED, KILLED."""
    start_ms: int
    end_ms: int | None
    """None while the run is still going."""
    metrics: dict[str, float]
    """The run's key metrics (at most `max_metrics`, see KEY_METRIC_HINTS)."""


def _experiment_id(settings: StackSettings) -> str | None:
    """Point MLflow at the stack and return its experiment's id; None when nothing was tracked yet
    (no SQLite file, or no experiment of that name), without creating either."""
    import mlflow

    sqlite_prefix = "sqlite:///"
    if settings.mlflow_uri.startswith(sqlite_prefix) and not Path(settings.mlflow_uri.removeprefix(sqlite_prefix)).is_file():
        return None
    mlflow.set_tracking_uri(settings.mlflow_uri)
    experiment = mlflow.get_experiment_by_name(settings.experiment)
    return None if experiment is None else experiment.experiment_id


def key_metrics(metrics: dict[str, float], max_metrics: int) -> dict[str, float]:
    """Up to `max_metrics` metrics, those matching KEY_METRIC_HINTS first."""
    def rank(name: str) -> tuple[int, str]:
        hits = [i for i, hint in enumerate(KEY_METRIC_HINTS) if hint in name]
        return (hits[0] if hits else len(KEY_METRIC_HINTS), name)

    return {name: metrics[name] for name in sorted(metrics, key=rank)[:max_metrics]}


def recent_runs(limit: int, max_metrics: int = 4, settings: StackSettings | None = None) -> list[RunRow]:
    """The `limit` most recently started runs of the experiment, newest first; StoreUnreadable
    when the store cannot be read."""
    from mlflow.exceptions import MlflowException
    from sqlalchemy.exc import SQLAlchemyError

    settings = settings or StackSettings.from_env()
    # MLflow wraps a failed HTTP request in MlflowException; a damaged SQLite file surfaces as
    # SQLAlchemy's error from the store's first query.
    try:
        return _recent_runs(limit, max_metrics, settings)
    except (MlflowException, SQLAlchemyError) as error:
        raise StoreUnreadable(unreadable_message(settings.mlflow_uri, error)) from error


def unreadable_message(uri: str, error: BaseException) -> str:
    """One line: which store, the root cause (e.g. "[Errno 111] Connection refused"), what to do."""
    cause = error
    while cause.__cause__ is not None or cause.__context__ is not None:
        cause = cause.__cause__ or cause.__context__
    reason = (str(cause).strip().splitlines() or [type(cause).__name__])[0][:300]
    if uri.startswith("sqlite:"):
        advice = ("if the file is damaged, move it aside (the next run starts a new one), "
                  "or point PASSBAND_MLFLOW_URI at your store")
    else:
        advice = "is the server up? (`passband up` starts the local one), or point PASSBAND_MLFLOW_URI at it"
    shown = re.sub(r"//[^/@]*@", "//***@", uri)  # a user:password in the URI stays off the screen
    return f"cannot read MLflow runs from {shown}: {reason}; {advice}"


def _recent_runs(limit: int, max_metrics: int, settings: StackSettings) -> list[RunRow]:
    from mlflow import MlflowClient

    experiment_id = _experiment_id(settings)
    if experiment_id is None:
        return []
    client = MlflowClient()
    runs = client.search_runs([experiment_id], max_results=limit, order_by=["attributes.start_time DESC"])
    names = {run.info.run_id: run.info.run_name for run in runs}
    rows = []
    for run in runs:
        parent = run.data.tags.get(PARENT_TAG)
        name = run.info.run_name
        if parent is not None:
            # a parent outside this page is fetched once, so every stage names its flow
            if parent not in names:
                names[parent] = client.get_run(parent).info.run_name
            name = f"{names[parent]}/{name}"
        rows.append(RunRow(run.info.run_id, name, run.info.status, run.info.start_time,
                           run.info.end_time, key_metrics(run.data.metrics, max_metrics)))
    return rows


def run_tag(run_id: str, tag: str, settings: StackSettings | None = None) -> str | None:
    """Tag `tag` of MLflow run `run_id` (None when the run lacks it); StoreUnreadable when the store
    cannot be read or has no such run."""
    from mlflow import MlflowClient
    from mlflow.exceptions import MlflowException
    from sqlalchemy.exc import SQLAlchemyError

    settings = settings or StackSettings.from_env()
    try:
        if _experiment_id(settings) is None:
            raise StoreUnreadable(f"no MLflow run {run_id}: nothing was tracked at {settings.mlflow_uri} yet")
        return MlflowClient().get_run(run_id).data.tags.get(tag)
    except (MlflowException, SQLAlchemyError) as error:
        raise StoreUnreadable(unreadable_message(settings.mlflow_uri, error)) from error


def failed_flow_run(since_ms: int, settings: StackSettings | None = None) -> str | None:
    """The id of the newest top-level FAILED run started at or after `since_ms` (epoch ms), i.e.
    the run of a flow that just failed in this process (home_lock keeps other runs of this home
    out meanwhile); None when the flow failed before opening its run."""
    from mlflow import MlflowClient

    settings = settings or StackSettings.from_env()
    experiment_id = _experiment_id(settings)
    if experiment_id is None:
        return None
    runs = MlflowClient().search_runs(
        [experiment_id], filter_string=f"attributes.status = 'FAILED' AND attributes.start_time >= {since_ms}",
        order_by=["attributes.start_time DESC"], max_results=100,
    )
    top_level = [run for run in runs if PARENT_TAG not in run.data.tags]
    return top_level[0].info.run_id if top_level else None
