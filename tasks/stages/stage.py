"""One stage run: the preamble and the ending that every flow shares, written once.

A flow runs its stage with `run_in_stage(flow, config, work)`, or opens it with `stage_run(...)`: MLflow is configured, the stage's run is opened
(nested under the pipeline's when `parent_run_id` is given), the resolved config is logged as
params and JSON, and the stage cache is looked up (docs/recipe.md section 1: a rerun with the
same inputs and code reuses what was computed). On a cache hit the new run is tagged with the
run it reuses and carries that run's metrics, so nobody finds an empty run in MLflow, and
`run_in_stage` returns that run's summary without calling `work`. The flow ends with `stage.finish(outputs, metrics)`, which commits the summary last (tasks/stages/cache.py): a
crashed stage leaves no summary and is recomputed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from passband.tasks.artifacts.provenance import code_version, config_hash
from passband.tasks.reporting import tracking
from passband.tasks.reporting.logs import run_logger
from passband.tasks.reporting.prefect_artifacts import publish_markdown
from passband.tasks.stages import cache as stage_cache
from passband.tasks.stages.summary import RunSummary

DEFAULT_RUN_CONTROL = frozenset({"force"})


@dataclass
class StageRun:
    """An open stage: its MLflow run, its resolved config and what the cache holds for it."""

    flow: str
    run_id: str
    """The stage's MLflow run (pass it as `run_id=` from inside Prefect tasks)."""
    resolved: dict[str, Any]
    """The config as JSON-ready data: what was logged and what the cache key hashes."""
    cache_key: str
    cached: RunSummary | None
    """The summary of an identical completed run (None: compute; always None with force)."""
    cache: bool = True
    """Commit the summary of a completed run for later runs to reuse."""

    @property
    def config_id(self) -> str:
        """What names this config's own artifacts across reruns (RL's checkpoints): its cache key's id."""
        return stage_cache.config_id(self.cache_key)

    def finish(self, outputs: dict[str, str], metrics: dict[str, float], status: str = "completed",
               message: str | None = None) -> RunSummary:
        """The stage's summary; a completed one is committed to the cache (a 'partial' one, with
        `message` saying why, is not)."""
        summary = RunSummary(flow=self.flow, status=status, mlflow_run_id=self.run_id, outputs=outputs,
                             metrics=metrics, message=message)
        if status == "completed" and self.cache:
            stage_cache.save_summary(self.cache_key, self.flow, self.resolved, summary.model_dump())
        publish_outputs(self.flow, self.run_id, outputs)
        return summary


def publish_outputs(flow: str, run_id: str, outputs: dict[str, str]) -> None:
    """What the Prefect UI shows for the stage: its output URIs (markdown) and its MLflow run (link)."""
    from prefect.artifacts import create_link_artifact

    lines = [f"# {flow} outputs", "", "| output | URI |", "|---|---|",
             *(f"| {name} | `{uri}` |" for name, uri in sorted(outputs.items())), "", f"MLflow run: `{run_id}`"]
    publish_markdown("\n".join(lines), description=f"{flow}: output artifact URIs")
    url = tracking.run_url(run_id)
    if url is not None:
        create_link_artifact(url, link_text=f"MLflow run of {flow}", description=f"{flow}: its MLflow run")


def _identity_tags(resolved: dict[str, Any]) -> dict[str, str]:
    """What produced this run: the code, the config, and the Prefect flow run (id and UI page)."""
    from prefect.runtime import flow_run

    tags = {"passband.code_version": code_version(), "passband.config_hash": config_hash(resolved)}
    if flow_run.id:
        tags |= {"prefect.flow_run_id": str(flow_run.id), "prefect.flow_run_name": str(flow_run.name)}
        if flow_run.ui_url:
            tags["prefect.flow_run_url"] = str(flow_run.ui_url)
    return tags


def _tag_flow_run(run_id: str) -> None:
    """The other direction: the Prefect flow run is tagged `mlflow-run:<id>`, so the Prefect UI
    (and a filter on that tag) leads to the MLflow run."""
    from prefect.client.orchestration import get_client
    from prefect.runtime import flow_run

    if not flow_run.id:
        return
    with get_client(sync_client=True) as client:
        current = client.read_flow_run(flow_run.id)
        client.update_flow_run(flow_run.id, tags=[*current.tags, f"mlflow-run:{run_id}"])


@contextmanager
def stage_run(flow: str, config: BaseModel, parent_run_id: str | None = None, run_name: str | None = None,
              run_control: frozenset[str] | set[str] = DEFAULT_RUN_CONTROL, cache: bool = True,
              system_metrics: bool = False) -> Iterator[StageRun]:
    """Open the stage's MLflow run (FAILED on an exception), log the config, look up the cache.

    `run_control` names config fields that steer how a run proceeds (force, resume, ...), not
    what it produces: they are left out of the cache key. `cache=False` (the pipeline, whose
    stages cache themselves, and `sample`) neither looks up nor commits a summary.
    """
    tracking.configure()
    resolved = config.model_dump(mode="json")
    with tracking.start_run(run_name or flow, parent_run_id=parent_run_id, system_metrics=system_metrics) as run_id:
        tracking.log_config(resolved, run_id)
        tracking.set_tags(_identity_tags(resolved), run_id)
        _tag_flow_run(run_id)
        cache_key, cached = stage_cache.find_completed(flow, resolved, run_control) if cache else ("", None)
        summary = None
        if cached is not None:
            summary = RunSummary(**cached)
            tracking.set_tags({"passband.cache_hit": "true", "passband.cached_from_run": str(summary.mlflow_run_id)},
                              run_id)
            tracking.log_metrics(summary.metrics, step=0, run_id=run_id)
        yield StageRun(flow, run_id, resolved, cache_key, summary, cache)


def run_in_stage(flow: str, config: BaseModel, work: Callable[[StageRun], RunSummary],
                 parent_run_id: str | None = None, run_name: str | None = None,
                 run_control: frozenset[str] | set[str] = DEFAULT_RUN_CONTROL, system_metrics: bool = False) -> RunSummary:
    """`work(stage)` inside `stage_run`, unless the cache holds an identical completed run: then that run's
    summary, with one line in the log saying so (the preamble every cached flow wrote itself)."""
    with stage_run(flow, config, parent_run_id, run_name, run_control, system_metrics=system_metrics) as stage:
        if stage.cached is not None:
            run_logger().info("reusing the completed %s run %s (cache key %s)", flow, stage.cached.mlflow_run_id,
                              stage.cache_key)
            return stage.cached
        return work(stage)
