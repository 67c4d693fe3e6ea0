"""`passband deploy`: create the work pools and register the deployments of infra/prefect.yaml.

The file is a Prefect deployment file plus two keys Prefect ignores (see its header):
`work_pools` and each deployment's `config_preset`. Registration goes through Prefect's Python API
(RunnerDeployment) instead of `prefect deploy`, which prompts for anything it finds missing and
cannot resolve our presets. Every deployment is loaded and its preset resolved before anything is
written to the server, so a bad entry registers nothing. An entry or a registered deployment that
names a flow's entrypoint from before flows/ became packages by flow (`flows/rl.py:rl`, now
`flows/rl/flow.py:rl`) gets one line saying so: the file's is refused, the server's are listed.
"""

from __future__ import annotations

import json
import os
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from passband.flows.config import read_yaml, resolve_config
from passband.tasks.stages.placement import moved_entrypoint_problem

REPO_ROOT = Path(__file__).resolve().parents[2]  # infra/cli/deploy.py -> the checkout
DEFAULT_PREFECT_FILE = REPO_ROOT / "infra" / "prefect.yaml"


class DeploymentFileError(ValueError):
    """A deployment file the user can fix: one line naming the entry and what to change."""


@dataclass
class Deployment:
    """One resolved entry of the deployment file, ready to register."""

    runner: Any
    """prefect.deployments.runner.RunnerDeployment with parameters, schedules and pull step set."""
    work_pool: str
    """Work pool the deployment's runs go to."""

    @property
    def full_name(self) -> str:
        """`flow/deployment`, the name `prefect deployment run` and the UI use."""
        return f"{self.runner.flow_name}/{self.runner.name}"


def register_deployments(prefect_file: Path | None = None) -> list[str]:
    """Create missing work pools, then create or update every deployment; return `flow/name`s."""
    from passband.stack.local import prepare_environment

    prepare_environment()
    # the process pool's pull step runs flows from this checkout unless the user points elsewhere
    os.environ.setdefault("PASSBAND_REPO", str(REPO_ROOT))
    from prefect.settings import PREFECT_API_URL

    path = Path(prefect_file or DEFAULT_PREFECT_FILE).resolve()
    spec = load_deployment_file(path)
    deployments = [resolve_deployment(entry, index) for index, entry in enumerate(spec["deployments"])]
    if not PREFECT_API_URL.value():
        raise RuntimeError("no Prefect server to register with: start one with `passband up --worker` "
                           "or set PREFECT_API_URL (see infra/stack.env)")
    ensure_work_pools(spec.get("work_pools", []), path.parent)
    for deployment in deployments:
        deployment.runner.apply(work_pool_name=deployment.work_pool)
    return [deployment.full_name for deployment in deployments]


def stale_deployments() -> list[str]:
    """One line per deployment on the server that still names a flow's old entrypoint (registered
    under a name the file does not have, so `passband deploy` did not replace it): its runs would
    fail to find their flow."""
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        found = client.read_deployments()
        flows = {flow.id: flow.name for flow in client.read_flows()}
    return [problem for deployment in found if (problem := moved_entrypoint_problem(
                deployment.entrypoint, f"deployment {flows.get(deployment.flow_id)}/{deployment.name}",
                "register it from a deployment file that names the new one, or delete it"))]


def load_deployment_file(path: Path) -> dict[str, Any]:
    """The deployment file with `{{ $ENV_VAR }}` placeholders filled, as `prefect deploy` does."""
    from prefect.utilities.templating import apply_values

    spec = read_yaml(path)
    if not spec.get("deployments"):
        raise DeploymentFileError(f"{path}: no `deployments` list")
    return apply_values(spec, dict(os.environ), remove_notset=False)


def resolve_deployment(entry: dict[str, Any], index: int) -> Deployment:
    """Load the entry's flow, resolve its preset into the `config` parameter, build the runner."""
    from prefect.deployments.runner import RunnerDeployment
    from prefect.flows import load_flow_from_entrypoint
    from prefect.runner.storage import LocalStorage

    where = f"deployments[{index}] ({entry.get('name')!r}, {entry.get('entrypoint')!r})"
    for key in ("name", "entrypoint", "work_pool"):
        if not entry.get(key):
            raise DeploymentFileError(f"{where}: missing `{key}`")
    problem = moved_entrypoint_problem(entry["entrypoint"], where, "write the new one in the deployment file")
    if problem:
        raise DeploymentFileError(problem)
    # entrypoints are relative to the repository, wherever `passband deploy` runs from
    flow = load_flow_from_entrypoint(str(REPO_ROOT / entry["entrypoint"]))
    runner = RunnerDeployment.from_flow(
        flow, entry["name"],
        description=entry.get("description"), tags=entry.get("tags"),
        schedules=[schedule_from_entry(s, where) for s in entry.get("schedules", [])],
        job_variables=entry["work_pool"].get("job_variables") or {},
        parameters=preset_parameters(flow, entry.get("config_preset"), where),
        # Two runs of one deployment would each open an engine on the same box: queue, not crash.
        concurrency_limit=entry.get("concurrency_limit"),
    )
    # relative to the pull step's directory, on the worker's disk or in its image
    runner.entrypoint = entry["entrypoint"]
    runner.storage = LocalStorage(working_directory(entry.get("pull", []), where))
    return Deployment(runner=runner, work_pool=entry["work_pool"]["name"])


def preset_parameters(flow: Any, preset: str | None, where: str) -> dict[str, Any]:
    """{"config": the resolved preset} (JSON-ready), or {} to keep the flow's default config."""
    if not preset:
        return {}
    # every passband flow takes `config: <Its>Config`; the annotation names the class to validate
    config_cls = typing.get_type_hints(flow.fn).get("config")
    if config_cls is None:
        raise DeploymentFileError(f"{where}: config_preset set but flow '{flow.name}' has no `config` parameter")
    return {"config": resolve_config(config_cls, flow.name, preset).model_dump(mode="json")}


def schedule_from_entry(entry: dict[str, Any], where: str):
    """A prefect.schedules.Schedule from a `schedules:` item (cron or interval seconds)."""
    from prefect.schedules import Cron, Interval

    active = entry.get("active", True)
    if "cron" in entry:
        return Cron(entry["cron"], timezone=entry.get("timezone"), active=active)
    if "interval" in entry:
        return Interval(entry["interval"], timezone=entry.get("timezone"), active=active)
    raise DeploymentFileError(f"{where}: schedule {entry} has neither `cron` nor `interval`")


def working_directory(pull_steps: list[dict[str, Any]], where: str) -> str:
    """The directory of the entry's single set_working_directory pull step (the code's location)."""
    step = "prefect.deployments.steps.set_working_directory"
    if len(pull_steps) != 1 or step not in pull_steps[0]:
        raise DeploymentFileError(f"{where}: `pull` must be one {step} step (the code is on the worker's disk "
                         f"or in its image), got {pull_steps}")
    directory = pull_steps[0][step]["directory"]
    if "{{" in directory:
        raise DeploymentFileError(f"{where}: pull directory {directory!r} has an unset environment variable")
    return directory


def ensure_work_pools(pools: list[dict[str, Any]], base_dir: Path) -> None:
    """Create each pool that does not exist; keep existing ones except for what the file owns: a
    GPU pool's template (edits to k8s-gpu-job-template.json take effect on the next deploy) and
    every pool's concurrency limit.

    Creating a Kubernetes pool needs only the server; the worker that runs its jobs on the
    cluster needs `pip install 'passband[k8s]'` (prefect-kubernetes)."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import WorkPoolCreate, WorkPoolUpdate
    from prefect.exceptions import ObjectNotFound

    with get_client(sync_client=True) as client:
        for pool in pools:
            template_file = pool.get("base_job_template")
            template = json.loads((base_dir / template_file).read_text()) if template_file else None
            try:
                client.read_work_pool(pool["name"])
            except ObjectNotFound:
                client.create_work_pool(WorkPoolCreate(
                    name=pool["name"], type=pool["type"], description=pool.get("description"),
                    base_job_template=template or default_job_template(pool),
                    concurrency_limit=pool.get("concurrency_limit")))
                continue
            client.update_work_pool(pool["name"], WorkPoolUpdate(
                concurrency_limit=pool.get("concurrency_limit"), **({"base_job_template": template} if template else {})))


def default_job_template(pool: dict[str, Any]) -> dict[str, Any]:
    """The installed worker's default template for a pool that names no template file."""
    from prefect.workers.base import BaseWorker

    worker_cls = BaseWorker.get_worker_class_from_type(pool["type"])
    if worker_cls is None:
        raise ValueError(f"work pool {pool['name']!r}: type {pool['type']!r} has no worker installed here; "
                         "give it a `base_job_template` file")
    return worker_cls.get_default_base_job_template()
