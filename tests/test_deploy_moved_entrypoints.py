"""Deployments that name a flow's entrypoint from before flows/ became packages by flow (issue 65:
`flows/rl.py:rl` is `flows/rl/flow.py:rl` now), through the paths a user takes: `passband deploy` of
a deployment file written for the old layout, a pipeline stage placed on a pool whose deployment was
registered then, and `passband deploy` of the shipped file afterwards, which re-registers it and names
the old deployments it could not replace. Each gets one line naming the new entrypoint.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parent.parent
PASSBAND = str(Path(sys.executable).parent / "passband")
OLD, NEW = "flows/rl.py:rl", "flows/rl/flow.py:rl"


def _rl_demo_file(tmp_path: Path, entrypoint: str) -> Path:
    """infra/prefect.yaml cut down to the rl/demo deployment on the process pool, naming `entrypoint`."""
    spec = yaml.safe_load((REPO / "infra" / "prefect.yaml").read_text())
    (entry,) = [d for d in spec["deployments"] if d["entrypoint"] == NEW and d["name"] == "demo"]
    spec["deployments"] = [{**entry, "entrypoint": entrypoint}]
    spec["work_pools"] = [pool for pool in spec["work_pools"] if pool["type"] == "process"]
    path = tmp_path / f"prefect-{entrypoint.replace('/', '_').replace(':', '_')}.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def _passband(tmp_path: Path, *args: str, api_url: str | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "PASSBAND_"))}
    env |= {"PASSBAND_HOME": str(tmp_path / "home"), **({"PREFECT_API_URL": api_url} if api_url else {})}
    return subprocess.run([PASSBAND, *args], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300)


def test_the_shipped_file_names_no_moved_entrypoint():
    from passband.tasks.stages.placement import MOVED_ENTRYPOINTS

    spec = yaml.safe_load((REPO / "infra" / "prefect.yaml").read_text())
    entrypoints = {d["entrypoint"] for d in spec["deployments"]}
    assert entrypoints & set(MOVED_ENTRYPOINTS) == set()
    assert set(MOVED_ENTRYPOINTS.values()) <= entrypoints  # each old path points at a shipped one
    for entrypoint in MOVED_ENTRYPOINTS.values():
        assert (REPO / entrypoint.split(":")[0]).is_file()


def test_a_deployment_file_with_an_old_entrypoint_is_refused_in_one_line(tmp_path: Path):
    done = _passband(tmp_path, "deploy", "--file", str(_rl_demo_file(tmp_path, OLD)))
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-3000:]
    assert done.stderr.strip().splitlines()[-1] == (
        f"Error: deployments[0] ('demo', '{OLD}') names entrypoint {OLD}, which moved to {NEW}: "
        "write the new one in the deployment file")
    assert done.stdout == ""  # nothing registered


# ~90 s on the loaded 2-core box, most of it the Prefect server starting
@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_deployment_registered_with_an_old_entrypoint(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    from prefect.settings import PREFECT_API_URL
    from prefect.testing.utilities import prefect_test_harness

    from passband.cli.deploy import ensure_work_pools, load_deployment_file, resolve_deployment
    from passband.tasks.stages.placement import deployment_on_pool, run_on_pool

    monkeypatch.setenv("PASSBAND_REPO", str(REPO))  # the process pool's pull step, as `passband deploy` sets it
    with prefect_test_harness(server_startup_timeout=300):
        pools = [{"name": "passband-process", "type": "process"}, {"name": "mine", "type": "process"}]
        ensure_work_pools(pools, REPO / "infra")
        # what `passband deploy` registered before the move: rl/demo from the shipped file, and a
        # user's rl/own on a pool of their own, both naming flows/rl.py
        for name, pool in (("demo", "passband-process"), ("own", "mine")):
            deployment = resolve_deployment({**load_deployment_file(_rl_demo_file(tmp_path, NEW))["deployments"][0],
                                             "name": name}, 0)
            deployment.runner.entrypoint = OLD
            deployment.runner.apply(work_pool_name=pool)

        # a pipeline stage placed there stops before creating a run that could not find its flow
        with pytest.raises(ValueError) as refused:
            run_on_pool("rl", "passband-process", {}, "rl")
        assert str(refused.value) == (
            f"placement: deployment rl/demo on work pool 'passband-process' names entrypoint {OLD}, which moved "
            f"to {NEW}: register it again with `passband deploy`")

        # `passband deploy` re-registers rl/demo at the new path and names the one it cannot replace
        done = _passband(tmp_path, "deploy", "--file", str(_rl_demo_file(tmp_path, NEW)), api_url=PREFECT_API_URL.value())
        assert done.returncode == 0, done.stderr[-3000:]
        assert done.stdout.split() == ["registered", "rl/demo"]
        assert (f"deployment rl/own names entrypoint {OLD}, which moved to {NEW}: register it from a deployment "
                "file that names the new one, or delete it") in done.stderr.splitlines()
        assert "rl/demo names" not in done.stderr
        assert deployment_on_pool("rl", "passband-process").entrypoint == NEW
