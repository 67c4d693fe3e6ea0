"""The pieces of sampling on task workers that need no server: device shares, run claims, refusals.
(The workers themselves, on a real Prefect server and vLLM: tests/test_task_workers.py, slow.)"""

import pytest

from passband.flows.curate.config import CurateConfig
from passband.stack.task_workers import device_env
from passband.tasks.sampling.claim import claimant, claimed_run_name, worker_id
from passband.tasks.sampling.passrate_job import sample_shard_job


def test_each_worker_gets_a_gpu_or_a_disjoint_core_share():
    assert device_env(1, 2, num_gpus=2, cores=[0, 1]) == {"CUDA_VISIBLE_DEVICES": "1"}
    assert [device_env(i, 2, num_gpus=0, cores=[0, 1, 2, 3, 4]) for i in range(2)] == [
        {"VLLM_CPU_OMP_THREADS_BIND": "0,1", "OMP_NUM_THREADS": "2", "CUDA_VISIBLE_DEVICES": ""},
        {"VLLM_CPU_OMP_THREADS_BIND": "2,3", "OMP_NUM_THREADS": "2", "CUDA_VISIBLE_DEVICES": ""}]
    # 1 GPU for 2 workers: they share the cores instead of one GPU
    assert device_env(0, 2, num_gpus=1, cores=[6, 7])["VLLM_CPU_OMP_THREADS_BIND"] == "6"
    with pytest.raises(ValueError, match="--task-workers 3 needs at least 3 CPU cores or GPUs"):
        device_env(0, 3, num_gpus=0, cores=[0, 1])


def test_a_claimed_run_names_its_worker(monkeypatch):
    monkeypatch.setenv("PASSBAND_WORKER_NAME", "task-worker-1")
    name = claimed_run_name("passrate/0123456789abcdef")
    assert name == f"shard 0123456789ab on task-worker-1 [{worker_id()}]"
    assert claimant(name) == worker_id()
    assert claimant("sample-shard-job-0") is None  # not started by a worker yet


def test_task_workers_are_refused_without_a_server_or_a_model_ref():
    from prefect.settings import PREFECT_API_URL, temporary_settings

    from passband.tasks.sampling.dispatch import run_on_task_workers
    from passband.tasks.sampling.engine import LazyEngine

    config = CurateConfig.model_validate({"sampling": {"workers": "task_workers"}})
    with pytest.raises(ValueError, match="pass model_ref"):
        LazyEngine(config.engine, "/nowhere", workers=config.sampling)
    with temporary_settings(updates={PREFECT_API_URL: None}):
        with pytest.raises(ValueError, match="workers = task_workers needs a Prefect server"):
            run_on_task_workers([], config.sampling, sample_shard_job)
    with pytest.raises(ValueError, match="workers"):
        CurateConfig.model_validate({"sampling": {"workers": "ray"}})
