"""RL's rollouts on Prefect task workers (rollout.workers = task_workers, issue 29 item 2;
tasks/sampling/rollout_workers.py), on the tiny digit model with the fp32 transformers engine.

1. Shard bounds by hand.
2. The three roles at k=0 (issue 29's first "must show"): the update on one torchrun rank
   (`distributed.torchrun_at_one_rank`: the trainer's own process, the flow holding no model) and
   the rollouts on one real task worker (its own process, its engine kept across jobs) against a
   real Prefect server, one shard per call: the run gives the in-process run's rewards per
   iteration, prompt ids, held-out scores and final weights bit for bit; every sampling call of the run
   (3 iterations' rollouts and 4 evaluations) was a committed rollout shard, each naming the
   weights version it was sampled with, and ran under the worker's name.
3. k=1 on the worker, the weights sent through the artifact store (as to workers on other
   machines): the batches' versions are [0, 0, 1] and the weights are the in-process k=1 run's, so
   the rollouts ahead and the evaluator's borrowed engine also work across processes; each version
   the worker sampled with was committed once as an `rl-weights/` artifact.
"""

from __future__ import annotations

import json
import time

import pytest
import torch
from mlflow import MlflowClient
from prefect.testing.utilities import prefect_test_harness
from safetensors.torch import load_file

from passband.flows.rl.flow import rl
from passband.flows.rl.config import RolloutConfig
from passband.stack.local import stop_services
from passband.stack.task_workers import start_task_workers
from passband.tasks.sampling.rollout_workers import shard_bounds
from passband.tasks.steps import rl as steps_rl
from passband.tasks.steps.rl_torchrun import trainer_ranks
from passband.training.runtime.config import DistributedConfig
from test_flow_rl import _state, _weights, digit_task
from test_rl_staleness import _config


def test_shard_bounds_by_hand():
    assert shard_bounds(7, 3) == [(0, 3), (3, 5), (5, 7)]
    assert shard_bounds(6, 3) == [(0, 2), (2, 4), (4, 6)]
    assert shard_bounds(2, 4) == [(0, 1), (1, 2)]  # never an empty shard
    assert shard_bounds(5, 1) == [(0, 5)]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """A real Prefect server (task workers cannot use the ephemeral API) and one Prefect storage
    folder for the flow and the worker (deferred runs' parameters)."""
    storage = tmp_path_factory.mktemp("prefect-storage")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PREFECT_LOCAL_STORAGE_PATH", str(storage))
        with prefect_test_harness(server_startup_timeout=300):
            import prefect.settings

            yield prefect.settings.PREFECT_API_URL.value()


def _series(run_id, name):
    return [m.value for m in sorted(MlflowClient().get_metric_history(run_id, name), key=lambda m: m.step)]


def _on_workers(k, **settings):
    return RolloutConfig(max_off_policy_steps=k, workers="task_workers", poll_s=0.1, connect_timeout_s=120, **settings)


def _rollout_shards(home):
    """The committed rollout shards under `home`: their manifests' producing configs."""
    shards = []
    for manifest_path in sorted((home / "artifacts" / "rollout-shards").glob("*/manifest.json")):
        shards.append(json.loads(manifest_path.read_text())["config"])
    return shards


def _task_runs(prefix, after):
    from datetime import datetime, timezone

    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import TaskRunFilter, TaskRunFilterName, TaskRunFilterStartTime

    with get_client(sync_client=True) as client:
        return client.read_task_runs(task_run_filter=TaskRunFilter(
            name=TaskRunFilterName(like_=prefix),
            start_time=TaskRunFilterStartTime(after_=datetime.fromtimestamp(after, timezone.utc))))


@pytest.fixture
def one_thread():
    """Fewer intra-op threads than cores, as an earlier test in the suite may leave them
    (test_flow_evaluate): the one torchrun rank must take the flow's count, or its float reductions
    split otherwise (measured: vllm_kl 1e-8 apart at iteration 2)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def test_rollouts_on_a_task_worker_match_the_in_process_run(server, tmp_path, monkeypatch, one_thread):
    digit_task(tmp_path, monkeypatch, "test-rl-rollout-workers")
    launched = []

    def counted_ranks(*args, **kwargs):  # the real launcher, counted
        launched.append(args[4].nproc_per_node)
        return trainer_ranks(*args, **kwargs)

    monkeypatch.setattr(steps_rl, "trainer_ranks", counted_ranks)
    local = rl(_config(tmp_path, 0))
    local_ahead = rl(_config(tmp_path, 1))
    started = time.time()
    (name,) = start_task_workers(1, server)
    try:
        remote = rl(_config(tmp_path, 0).model_copy(update={
            "rollout": _on_workers(0), "distributed": DistributedConfig(torchrun_at_one_rank=True)}))
        shards_k0 = _rollout_shards(tmp_path / "home")
        remote_ahead = rl(_config(tmp_path, 1).model_copy(update={"rollout": _on_workers(1, weights_through_store=True)}))
    finally:
        stop_services()
    assert remote.status == remote_ahead.status == "completed"

    # k=0, the update on one torchrun rank and the rollouts on the worker: the in-process run's
    # numbers, bit for bit
    assert launched == [1]  # the remote run launched its one rank; the in-process runs none
    for metric in ("math/reward", "vllm_kl", "eval/math/pass_at_1", "rollout/weight_version"):
        assert _series(remote.mlflow_run_id, metric) == _series(local.mlflow_run_id, metric), metric
    iterations = [remote.outputs["checkpoint"].replace("iter-000003", f"iter-{i:06d}") for i in (1, 2, 3)]
    local_iterations = [local.outputs["checkpoint"].replace("iter-000003", f"iter-{i:06d}") for i in (1, 2, 3)]
    assert [_state(uri)["prompt_ids"] for uri in iterations] == [_state(uri)["prompt_ids"] for uri in local_iterations]
    final, local_final = _weights(remote.outputs["checkpoint"]), _weights(local.outputs["checkpoint"])
    assert all(torch.equal(final[n], local_final[n]) for n in final)
    start = load_file(str(tmp_path / "digits" / "model.safetensors"))
    assert any(not torch.equal(final[n], start[n]) for n in final)
    assert min(_series(remote.mlflow_run_id, "zero_variance_group_frac")) < 1.0  # the updates had signal

    # every sampling call ran on the worker, with the weights it names: the evaluation before
    # training and iteration 1's rollouts on the model's own weights (no version), then each
    # published version twice (the evaluation after its update, the next iteration's rollouts)
    assert sorted(-1 if shard["weight_version"] is None else shard["weight_version"] for shard in shards_k0) == \
        [-1, -1, 1, 1, 2, 2, 3]
    runs = [run for run in _task_runs("shard ", started) if run.state.is_completed()]
    assert runs and all(f" on {name} [" in run.name for run in runs)

    # k=1 on the worker: one update stale, and the in-process k=1 run's weights
    assert _series(remote_ahead.mlflow_run_id, "rollout/weight_version") == [0.0, 0.0, 1.0]
    assert _series(remote_ahead.mlflow_run_id, "vllm_kl") == _series(local_ahead.mlflow_run_id, "vllm_kl")
    ahead_final, local_ahead_final = _weights(remote_ahead.outputs["checkpoint"]), _weights(local_ahead.outputs["checkpoint"])
    assert all(torch.equal(ahead_final[n], local_ahead_final[n]) for n in ahead_final)
    assert any(not torch.equal(ahead_final[n], final[n]) for n in final)  # k=1 is another run than k=0
    # committed once each: the model's own weights (the first evaluation, iterations 1-2's rollouts),
    # v1 (the evaluation after iteration 1, iteration 3's rollouts), v2 and v3 (the evaluations)
    committed = sorted((tmp_path / "home" / "artifacts" / "rl-weights").glob("*/manifest.json"))
    assert len(committed) == 4


@pytest.mark.slow  # two workers, two flow runs, a kill and its grace period: ~90 s
def test_a_killed_rollout_worker_loses_nothing(server, tmp_path, monkeypatch):
    """kill -9 of one of two rollout workers (its whole process group) while it samples, after a
    seeded random number of its shards: its shard is marked crashed and sampled again by the other
    worker, and the run trains on the uninterrupted run's prompts to the same weights, bit for bit."""
    import os
    import random
    import signal
    import threading

    from killrun import kill_seed
    from passband.tasks.sampling.claim import claimant

    digit_task(tmp_path, monkeypatch, "test-rl-rollout-worker-killed")
    start_task_workers(2, server)
    # long responses (160 tokens, EOS ignored, scored though cut), so a shard runs long enough to be
    # caught in the middle
    base = _config(tmp_path, 1)
    config = base.model_copy(update={
        "rollout": _on_workers(1, shards_per_call=2, lost_worker_grace_s=1.0),
        "sampling": base.sampling.model_copy(update={"max_tokens": 160, "ignore_eos": True}),
        "reward": base.reward.model_copy(update={"mask_truncated": False})})
    seed = kill_seed()
    print(f"PASSBAND_KILL_SEED={seed}")
    victim = int((tmp_path / "home" / "run" / "task-worker-0.pid").read_text())
    kills: list[str] = []

    def mine(started: float) -> list:
        return [run for run in _task_runs("shard ", started) if (claimant(run.name) or "").endswith(f"-{victim}")]

    def kill_after(num_shards: int, started: float) -> None:
        """SIGKILL worker 0 in the middle of a shard once it completed `num_shards`: it is stopped
        (SIGSTOP) when the server shows it running one, and killed if it still is, else let go on."""
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            runs = mine(started)
            if sum(run.state.is_completed() for run in runs) >= num_shards and any(r.state.is_running() for r in runs):
                os.killpg(victim, signal.SIGSTOP)
                time.sleep(0.3)  # a state write already on its way lands
                if any(run.state.is_running() for run in mine(started)):
                    os.killpg(victim, signal.SIGKILL)
                    kills.append(f"after {num_shards} shards")
                    return
                os.killpg(victim, signal.SIGCONT)
            time.sleep(0.02)

    def prompt_ids(summary):
        final = summary.outputs["checkpoint"]
        return [_state(final.replace("iter-000003", f"iter-{i:06d}"))["prompt_ids"] for i in (1, 2, 3)]

    try:
        whole = rl(config)
        # read now: the killed run (the workers' artifact root is the same) commits under the same keys
        expected = (prompt_ids(whole), _series(whole.mlflow_run_id, "math/reward"), _weights(whole.outputs["checkpoint"]))
        started = time.time()
        # worker 0 gets about half of the run's 14 shards, 3 of them long: its first or its second
        killer = threading.Thread(target=kill_after, args=(random.Random(seed).randint(0, 1), started))
        killer.start()
        killed = rl(config.model_copy(update={"force": True, "resume": False}))
        killer.join()
    finally:
        stop_services()
    assert kills, f"worker 0 was never caught in a shard: {[(run.name, run.state.type) for run in mine(started)]}"
    assert killed.status == whole.status == "completed" and killed.mlflow_run_id != whole.mlflow_run_id
    lost = [run for run in _task_runs("shard ", started) if run.state.is_crashed()]
    assert lost and all("lost" in run.state.message for run in lost), \
        [(run.name, run.state.type, run.state.message) for run in mine(started)]
    assert prompt_ids(killed) == expected[0]
    assert _series(killed.mlflow_run_id, "math/reward") == expected[1]
    final = _weights(killed.outputs["checkpoint"])
    assert all(torch.equal(final[n], expected[2][n]) for n in final)


@pytest.mark.slow  # two flow runs on 2 torchrun ranks each, one on a task worker: ~2 min
def test_three_roles_together(server, tmp_path, monkeypatch):
    """The three roles apart: the update on 2 torchrun ranks, the rollouts on a task worker, one
    update ahead, the flow between them. The worker reads the versions the ranks publish, so the
    run equals the same ranks with the flow's own engine, bit for bit."""
    from passband.training.runtime.config import DistributedConfig

    digit_task(tmp_path, monkeypatch, "test-rl-three-roles")
    ranks = {"distributed": DistributedConfig(nproc_per_node=2)}
    monkeypatch.setenv("PASSBAND_ARTIFACT_ROOT", str(tmp_path / "root_engine"))
    own_engine = rl(_config(tmp_path, 1).model_copy(update=ranks))
    monkeypatch.delenv("PASSBAND_ARTIFACT_ROOT")  # the worker's root: PASSBAND_HOME's
    start_task_workers(1, server)
    try:
        apart = rl(_config(tmp_path, 1).model_copy(update={**ranks, "rollout": _on_workers(1)}))
    finally:
        stop_services()
    assert apart.status == "completed"
    assert _series(apart.mlflow_run_id, "rollout/weight_version") == [0.0, 0.0, 1.0]
    for metric in ("math/reward", "vllm_kl", "eval/math/pass_at_1"):
        assert _series(apart.mlflow_run_id, metric) == _series(own_engine.mlflow_run_id, metric), metric
    final, expected = _weights(apart.outputs["checkpoint"]), _weights(own_engine.outputs["checkpoint"])
    assert all(torch.equal(final[n], expected[n]) for n in final)
    assert len(list((tmp_path / "home" / "artifacts" / "rollout-shards").glob("*/manifest.json"))) == 7
