"""Reading back the runs of the stack's MLflow experiment: `passband runs`, and the run id a
failed `passband run` reports. Reading only: no experiment, database or folder is created.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from passband.tasks.host.settings import StackSettings

PARENT_TAG = "mlflow.parentRunId"
# Metrics shown first when a run has them, in this order (names as logged: "@" -> "_at_");
# the rest follow alphabetically.
KEY_METRIC_HINTS = ("pass_at_1", "reward", "loss", "vllm_kl", "accuracy", "pass_rate")


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
    """The `limit` most recently started runs of the experiment, newest first."""
    from mlflow import MlflowClient

    settings = settings or StackSettings.from_env()
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
