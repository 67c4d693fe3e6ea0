"""Curate's and evaluate's shards on real Prefect task workers (issue 13 items 1-2), with the real
model on vLLM.

- the smoke preset run with 2 local task workers commits the same shards, bit for bit, as the
  in-process run, and its task runs show on the Prefect server under the workers' names;
- SIGKILLing one worker (its whole process group, vLLM included) in the middle of a shard still
  completes the run with the same shards, each committed by exactly one sampling run;
- a small evaluation on 2 task workers (in shards of 3 problems, k-curve subset included) gives the
  same per-sample rows as the in-process one (a single generate call), and a repeat reuses its
  committed shards.
Each run has its own PASSBAND_HOME, so no run reads another's shards.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from prefect.testing.utilities import prefect_test_harness

from passband.stack.local import stop_services
from passband.stack.task_workers import start_task_workers
from passband.tasks.sampling.claim import claimant

# three curate smoke runs of the real model on vLLM (the in-process one shared): many minutes
pytestmark = [pytest.mark.slow, pytest.mark.timeout(3600)]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """A real Prefect server (task workers cannot use the ephemeral API) and one Prefect storage
    folder for the test, its flow subprocess and the workers (deferred runs' parameters)."""
    storage = tmp_path_factory.mktemp("prefect-storage")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PREFECT_LOCAL_STORAGE_PATH", str(storage))
        with prefect_test_harness(server_startup_timeout=180):
            import prefect.settings

            yield prefect.settings.PREFECT_API_URL.value()


def _smoke(model_dir: Path, workers: str):
    from passband.flows.config import resolve_config
    from passband.flows.curate.flow import CurateConfig

    return resolve_config(CurateConfig, "curate", "smoke", None,
                          [f"model={model_dir}", f"sampling.workers={workers}"])


def _shards(home: Path) -> dict[str, tuple[list[dict], list[dict]]]:
    """Every committed shard under `home`: key -> (per-problem summaries, per-sample rows)."""
    shards = {}
    for manifest_path in sorted((home / "artifacts" / "passrate").glob("*/manifest.json")):
        folder = manifest_path.parent / json.loads(manifest_path.read_text())["version"]
        shards[manifest_path.parent.name] = (pq.read_table(folder / "summary.parquet").to_pylist(),
                                             pq.read_table(folder / "samples.parquet").to_pylist())
    return shards


def _pass_rates(summary_metrics: dict) -> dict[str, float]:
    return {name: value for name, value in summary_metrics.items() if name.endswith("pass_rate_mean")}


@pytest.fixture(scope="module")
def in_process(server, smollm2_dir, tmp_path_factory):
    """The reference: the smoke run with the flow's own engine."""
    from passband.flows.curate.flow import curate

    home = tmp_path_factory.mktemp("home-local")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PASSBAND_HOME", str(home))
        summary = curate(_smoke(smollm2_dir, "local"))
    return home, summary


def _task_runs(name_prefix: str, after: float):
    from datetime import datetime, timezone

    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import TaskRunFilter, TaskRunFilterName, TaskRunFilterStartTime

    with get_client(sync_client=True) as client:
        return client.read_task_runs(task_run_filter=TaskRunFilter(
            name=TaskRunFilterName(like_=name_prefix),
            start_time=TaskRunFilterStartTime(after_=datetime.fromtimestamp(after, timezone.utc))))


def test_two_task_workers_match_the_in_process_run(server, in_process, smollm2_dir, tmp_path, monkeypatch):
    from passband.flows.curate.flow import curate

    local_home, local = in_process
    monkeypatch.setenv("PASSBAND_HOME", str(tmp_path))
    started = time.time()
    names = start_task_workers(2, server)
    try:
        distributed = curate(_smoke(smollm2_dir, "task_workers"))
    finally:
        stop_services()

    expected = _shards(local_home)
    assert len(expected) >= 6  # 3 tasks x 2 pass-rate shards, plus correction and synthetic shards
    assert _shards(tmp_path) == expected  # every completion, verdict and pass rate, bit for bit
    assert _pass_rates(distributed.metrics) == _pass_rates(local.metrics)
    assert (distributed.metrics["engine_calls"], distributed.metrics["shards_computed"]) == (0, len(expected))

    # The shard runs are on the server, named after the worker that ran them, and both worked.
    runs = [run for run in _task_runs("shard ", started) if run.state.is_completed()]
    assert sorted(run.name.split()[1] for run in runs) == sorted(key[:12] for key in expected)
    assert {run.name.split(" on ")[1].split(" [")[0] for run in runs} == set(names) == {"task-worker-0",
                                                                                          "task-worker-1"}


def test_a_killed_worker_loses_nothing(server, in_process, smollm2_dir, tmp_path):
    local_home, local = in_process
    env = {**os.environ, "PASSBAND_HOME": str(tmp_path), "PREFECT_API_URL": server}
    started = time.time()
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PASSBAND_HOME", str(tmp_path))
        start_task_workers(2, server)
    victim = int((tmp_path / "run" / "task-worker-0.pid").read_text())
    flow = subprocess.Popen(
        [str(Path(sys.executable).parent / "passband"), "run", "curate", "--preset", "smoke",
         "--set", f"model={smollm2_dir}", "--set", "sampling.workers=task_workers"],
        env=env, stdout=subprocess.PIPE, text=True)
    try:
        # Kill worker 0 while it samples its second shard (its engine is warm: the kill lands in
        # generation, not in the engine's start-up).
        deadline = time.monotonic() + 1200
        while True:
            assert time.monotonic() < deadline and flow.poll() is None, "worker 0 never ran a second shard"
            worker0 = [run for run in _task_runs("shard ", started) if claimant(run.name) == f"{_host()}-{victim}"]
            if sum(run.state.is_completed() for run in worker0) >= 1 and any(r.state.is_running() for r in worker0):
                killed = next(run for run in worker0 if run.state.is_running())
                os.killpg(victim, signal.SIGKILL)
                break
            time.sleep(0.2)
        out, _ = flow.communicate(timeout=1800)
    finally:
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv("PASSBAND_HOME", str(tmp_path))
            stop_services()
    assert flow.returncode == 0
    summary = json.loads(out.strip().splitlines()[-1])

    assert _shards(tmp_path) == _shards(local_home)
    assert _pass_rates(summary["metrics"]) == _pass_rates(local.metrics)
    # The killed run was marked crashed by the flow, and its shard was committed by worker 1.
    runs = _task_runs("shard ", started)
    lost = next(run for run in runs if run.id == killed.id)
    assert lost.state.is_crashed() and "lost" in lost.state.message
    key = killed.name.split()[1]
    assert any(run.state.is_completed() and run.name.split()[1] == key and "task-worker-1" in run.name
               for run in runs)
    # Each shard was sampled and committed by one run only (a resubmitted shard that another run
    # had committed meanwhile is answered from the store).
    commits = [run for run in _task_runs("commit-shard", started) if run.state.is_completed()]
    assert len(commits) == len(_shards(tmp_path))


def _host() -> str:
    import socket

    return socket.gethostname()


def _evaluate_config(model_dir: Path, workers: str, **updates):
    from passband.flows.evaluate.flow import EvaluateConfig

    return EvaluateConfig.model_validate({
        "model": str(model_dir),
        "suites": {"math": {"suite": "math", "num_problems": 4, "seed": 9001},
                   "code": {"suite": "code", "num_problems": 2, "seed": 9001},
                   "ifeval": {"suite": "ifeval", "num_problems": 2, "seed": 9001, "difficulty": "easy"}},
        "sampling": {"n": 2, "max_tokens": 48},
        "k_curve": {"problems": 2, "n": 16, "sets": ["math"]},
        "shards": {"workers": workers, "shard_size": 3},
        **updates})


def _eval_samples(summary) -> list[dict]:
    from passband.tasks.artifacts.datasets import read_table

    return read_table(summary.outputs["samples"]).to_pylist()


def test_evaluation_on_two_task_workers_matches_the_in_process_one(server, smollm2_dir, tmp_path, monkeypatch):
    from passband.flows.evaluate.flow import evaluate

    monkeypatch.setenv("PASSBAND_HOME", str(tmp_path / "local"))
    local = evaluate(_evaluate_config(smollm2_dir, "local"))
    monkeypatch.setenv("PASSBAND_HOME", str(tmp_path / "workers"))
    started = time.time()
    names = start_task_workers(2, server)
    try:
        distributed = evaluate(_evaluate_config(smollm2_dir, "task_workers"))
        repeated_at = time.time()
        repeated = evaluate(_evaluate_config(smollm2_dir, "task_workers", force=True))
    finally:
        stop_services()

    expected = _eval_samples(local)
    assert len(expected) == 8 * 2 + 2 * 16  # 8 problems x n=2, the k-curve's 2 math problems x 16
    # every sample: its token ids, text and verdict, in the same order (one generate call in-process,
    # four shards of at most 3 problems on the workers)
    assert _eval_samples(distributed) == expected
    assert distributed.metrics == local.metrics
    # 3 + 1 shards (the k-curve subset has its own n, hence its own shards), run on the server by
    # the workers under their names; the repeat read them back and submitted nothing
    keys = sorted(path.parent.name for path in (tmp_path / "workers" / "artifacts" / "eval-shards").glob("*/manifest.json"))
    assert len(keys) == 4
    runs = [run for run in _task_runs("shard ", started) if run.state.is_completed()]
    assert sorted(run.name.split()[1] for run in runs) == sorted(key[:12] for key in keys)
    assert {run.name.split(" on ")[1].split(" [")[0] for run in runs} <= set(names)
    assert not _task_runs("shard ", repeated_at)
    assert _eval_samples(repeated) == expected
