"""A pipeline stage run as a flow run of its deployment on a named Prefect work pool.

`run_on_pool("sft", "passband-gpu", parameters)` finds the one deployment of flow `sft` on that
pool (`passband deploy` registers them from infra/prefect.yaml), creates a flow run of it with
these parameters through `run_deployment` (linked to the calling flow run as a subflow), waits for
it, and returns its RunSummary. The summary travels as the child's persisted Prefect result: the
child is asked to persist it (PREFECT_RESULTS_PERSIST_BY_DEFAULT in the run's environment) and
the caller reads it from result storage, which on one machine is the shared local folder under
PASSBAND_HOME and across machines must be a shared block (docs/scaling.md). A run that does not end
Completed raises with its id and state; what it committed (manifest-last) stays for a rerun.
"""

from __future__ import annotations

from typing import Any

from passband.tasks.stages.summary import RunSummary

PERSIST_RESULTS = {"PREFECT_RESULTS_PERSIST_BY_DEFAULT": "true"}
# The flows' entrypoints before flows/ became packages by flow (issue 65): a deployment registered
# then, or a deployment file written for it, still names the old path, where no file is any more.
MOVED_ENTRYPOINTS = {f"flows/{name}.py:{name}": f"flows/{name}/flow.py:{name}"
                     for name in ("curate", "rl", "evaluate", "pipeline")}


def moved_entrypoint_problem(entrypoint: str | None, what: str, fix: str) -> str | None:
    """One line when `entrypoint` is a flow's old path (`what` names its deployment, `fix` says what to
    do); None for any other."""
    moved = MOVED_ENTRYPOINTS.get(entrypoint or "")
    return None if moved is None else f"{what} names entrypoint {entrypoint}, which moved to {moved}: {fix}"


class StageRunFailed(RuntimeError):
    """A placed stage's flow run ended in a state other than Completed."""


def deployment_on_pool(flow_name: str, pool: str) -> Any:
    """The deployment of `flow_name` whose runs go to work pool `pool`; a ValueError unless exactly one."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowFilter, FlowFilterName, WorkPoolFilter, WorkPoolFilterName

    with get_client(sync_client=True) as client:
        found = client.read_deployments(flow_filter=FlowFilter(name=FlowFilterName(any_=[flow_name])),
                                        work_pool_filter=WorkPoolFilter(name=WorkPoolFilterName(any_=[pool])))
    if len(found) != 1:
        names = sorted(f"{flow_name}/{d.name}" for d in found)
        raise ValueError(f"placement: stage flow {flow_name!r} needs exactly one deployment on work pool {pool!r}, "
                         f"found {names or 'none'}; register one (infra/prefect.yaml, `passband deploy`)")
    problem = moved_entrypoint_problem(found[0].entrypoint, f"placement: deployment {flow_name}/{found[0].name} on "
                                       f"work pool {pool!r}", "register it again with `passband deploy`")
    if problem:
        raise ValueError(problem)
    return found[0]


def run_on_pool(flow_name: str, pool: str, parameters: dict[str, Any], flow_run_name: str) -> RunSummary:
    """Run the flow's deployment on `pool` with `parameters`, wait, and return the run's summary."""
    from prefect.deployments import run_deployment

    deployment = deployment_on_pool(flow_name, pool)
    env = {**(deployment.job_variables or {}).get("env", {}), **PERSIST_RESULTS}
    flow_run = run_deployment(deployment.id, parameters=parameters, flow_run_name=flow_run_name,
                              job_variables={"env": env}, timeout=None)
    if not flow_run.state.is_completed():
        raise StageRunFailed(f"stage {flow_run_name!r}: flow run {flow_run.id} of {flow_name}/{deployment.name} on "
                             f"work pool {pool!r} ended {flow_run.state.type.value} ({flow_run.state.name}): "
                             f"{flow_run.state.message}")
    return RunSummary.model_validate(flow_run.state.result())
