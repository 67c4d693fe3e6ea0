"""Bounded staleness (rollout.max_off_policy_steps, training/rl/batches/staleness.py, tasks/rollouts/ahead.py).

1. The schedule of weight versions, by hand.
2. The rl flow at k=1 on the tiny digit model (fp32 hf engine and fp32 trainer, so the engine and
   the trainer agree to ~1e-7 whenever they hold the same weights): iterations 1 and 2 sample with
   v0, iteration 3 with v1; the mismatch the trainer measures (vllm_kl) is ~0 where the batch is on
   policy and not where it is stale, an independent check that the engine held the stale weights;
   the prompts per iteration are the synchronous run's; two k=1 runs give the same weights, and so
   does a k=1 run stopped after iteration 1 and resumed (its checkpoint kept iteration 2's rollouts).
3. The in-flight rollouts through the checkpoint's JSON and back, and the resume's checks.
"""

import json

import pytest
import torch
from mlflow import MlflowClient
from prefect.testing.utilities import prefect_test_harness
from safetensors.torch import load_file

from passband.flows.common_config import EngineConfig, ProblemSource, SamplingConfig
from passband.flows.evaluate.config import EvalConfig
from passband.flows.rl.flow import RLConfig, rl
from passband.flows.rl.config import RolloutConfig
from passband.tasks.artifacts.store import fetch_artifact
from passband.training.rl.config import RLAlgoConfig
from passband.training.rl.batches.staleness import behaviour_version, check_staleness, off_policy_steps, versions_to_keep
from test_flow_rl import digit_task


def test_behaviour_versions_by_hand():
    assert [behaviour_version(i, 0, 0) for i in (1, 2, 3)] == [0, 1, 2]  # the synchronous loop
    assert [behaviour_version(i, 1, 0) for i in (1, 2, 3, 4)] == [0, 0, 1, 2]
    assert [behaviour_version(i, 2, 0) for i in (1, 2, 3, 4, 5)] == [0, 0, 0, 1, 2]
    # resumed after iteration 3 holding v3 only: fresher than the uninterrupted run until the lag catches up
    assert [behaviour_version(i, 2, 3) for i in (4, 5, 6, 7)] == [3, 3, 3, 4]
    with pytest.raises(ValueError, match="completed before"):
        behaviour_version(3, 1, 3)
    assert off_policy_steps(5, 2) == 2 and off_policy_steps(1, 0) == 0
    assert versions_to_keep(0) == 1 and versions_to_keep(2) == 3


def test_check_staleness_refuses_outside_the_bound():
    check_staleness(4, 2, 1)  # one update off policy, k=1: trained on
    check_staleness(4, 3, 0)
    with pytest.raises(RuntimeError, match="2 updates off policy"):
        check_staleness(4, 1, 1)
    with pytest.raises(RuntimeError, match="-1 updates off policy"):  # weights not published yet
        check_staleness(4, 4, 1)


@pytest.fixture(scope="module")
def harness():
    with prefect_test_harness(server_startup_timeout=300):
        yield


def _config(tmp, k, **overrides):
    return RLConfig(
        model=str(tmp / "digits"),
        datasets={"math": ProblemSource(suite=None, path=str(tmp / "train.jsonl"), task="math", num_problems=8)},
        prompts_per_step=2, num_iterations=3, seed=7,
        sampling=SamplingConfig(n=4, max_tokens=4), engine=EngineConfig(kind="hf", dtype="float32"),
        algo=RLAlgoConfig(lr=1e-2, micro_batch_size=3, precision="fp32"), checkpoint_every=1,
        rollout=RolloutConfig(max_off_policy_steps=k),
        # an evaluation at every iteration borrows the engine from the rollout thread
        eval=EvalConfig(suites={"math": ProblemSource(suite=None, path=str(tmp / "eval.jsonl"), task="math")},
                        sampling=SamplingConfig(n=2, max_tokens=4)), eval_every=1,
        **overrides,
    )


def _series(run_id, name):
    return [m.value for m in sorted(MlflowClient().get_metric_history(run_id, name), key=lambda m: m.step)]


def _prompt_ids(summary):
    final = summary.outputs["checkpoint"]
    uris = [final.replace("iter-000003", f"iter-{i:06d}") for i in (1, 2, 3)]
    return [json.loads((fetch_artifact(uri) / "trainer_state.json").read_text())["prompt_ids"] for uri in uris]


def test_one_step_off_policy_flow(harness, tmp_path, monkeypatch):
    digit_task(tmp_path, monkeypatch, "test-rl-staleness")

    synchronous = rl(_config(tmp_path, 0))
    ahead = rl(_config(tmp_path, 1))
    assert ahead.status == synchronous.status == "completed"

    assert _series(synchronous.mlflow_run_id, "rollout/weight_version") == [0.0, 1.0, 2.0]
    assert _series(ahead.mlflow_run_id, "rollout/weight_version") == [0.0, 0.0, 1.0]
    assert _series(ahead.mlflow_run_id, "rollout/off_policy_steps") == [0.0, 1.0, 1.0]
    assert _series(synchronous.mlflow_run_id, "rollout/overlap_share") == [0.0, 0.0, 0.0]
    assert all(0.0 <= share <= 1.0 for share in _series(ahead.mlflow_run_id, "rollout/overlap_share"))
    # Same engine and trainer numerics: on policy the two agree, one update stale they do not.
    sync_kl, ahead_kl = _series(synchronous.mlflow_run_id, "vllm_kl"), _series(ahead.mlflow_run_id, "vllm_kl")
    assert max(sync_kl) < 1e-6 and ahead_kl[0] < 1e-6
    assert min(ahead_kl[1:]) > 100 * max(sync_kl + [1e-9])
    # The updates had signal, and the cursor is the synchronous run's.
    assert min(_series(ahead.mlflow_run_id, "zero_variance_group_frac")) < 1.0
    assert _prompt_ids(ahead) == _prompt_ids(synchronous)
    # Held-out scores at every iteration: the evaluation borrowed the engine at each update's weights.
    assert len(_series(ahead.mlflow_run_id, "eval/math/pass_at_1")) == 4

    monkeypatch.setenv("PASSBAND_ARTIFACT_ROOT", str(tmp_path / "root_b"))
    again = rl(_config(tmp_path, 1))
    assert _same_weights(ahead, again)

    # Stopped after iteration 1, its checkpoint keeps iteration 2's rollouts (sampled with v0);
    # the rerun trains on them, samples iteration 3 with v1 and ends where the uninterrupted run did.
    monkeypatch.setenv("PASSBAND_ARTIFACT_ROOT", str(tmp_path / "root_c"))
    stopped = rl(_config(tmp_path, 1, max_iterations_this_run=1))
    assert stopped.status == "partial"
    kept = json.loads((fetch_artifact(stopped.outputs["checkpoint"]) / "trainer_state.json").read_text())["in_flight"]
    assert [(item["iteration"], item["weight_version"]) for item in kept] == [(2, 0)]
    resumed = rl(_config(tmp_path, 1))
    assert _series(resumed.mlflow_run_id, "rollout/weight_version") == [0.0, 1.0]  # iterations 2 and 3
    assert _series(resumed.mlflow_run_id, "vllm_kl") == pytest.approx(ahead_kl[1:], rel=1e-6)
    assert _prompt_ids(resumed) == _prompt_ids(ahead)
    assert _same_weights(ahead, resumed)


def _same_weights(first_run, second_run) -> bool:
    first, second = (load_file(str(fetch_artifact(s.outputs["checkpoint"]) / "model.safetensors"))
                     for s in (first_run, second_run))
    return all(torch.equal(first[name], second[name]) for name in first)


def test_in_flight_rollouts_round_trip_and_resume_checks():
    from concurrent.futures import Future

    from passband.tasks.rollouts.ahead import RolloutsAhead
    from passband.tasks.rollouts.collect import Rollouts, ScoredGroup
    from passband.training.engines.protocol import Sample
    from passband.training.rl.batches.batching import RolloutBatch
    from passband.training.rl.monitoring.timeline import Span

    samples = [Sample(0, i, [5, 6][: i + 1], "1" * (i + 1), [-0.5, -1.25][: i + 1], "stop", [1, 2]) for i in range(2)]
    batch = RolloutBatch([[1, 2]] * 2, [[5], [5, 6]], [[-0.5], [-0.5, -1.25]], [1.0, float("nan")], [True, False],
                         ["math"] * 2, 2, [False, True], 0.7)
    rollouts = Rollouts([ScoredGroup({"id": "p1", "task": "math"}, samples, [1.0, None], [True, False])], batch,
                        {"math": 3}, {"rollout_tokens_per_s": 12.5}, 4, [Span("rollouts", "rollout", 1.0, 2.5)])
    back = Rollouts.from_json(json.loads(json.dumps(rollouts.to_json())))  # as the checkpoint stores it
    assert back.groups == rollouts.groups and back.spans == rollouts.spans and back.weight_version == 4
    assert back.batch.response_ids == [[5], [5, 6]] and back.batch.temperature == 0.7
    assert back.batch.rewards[0] == 1.0 and back.batch.rewards[1] != back.batch.rewards[1]  # NaN stays NaN
    assert back.consumed == {"math": 3} and back.judged == []

    def ahead(resumed_at, k):
        return RolloutsAhead(RLConfig().rollout_settings(), k, None, None, {}, {}, resumed_at, 10, {"math": 0})

    queued = ahead(5, 2)
    queued.resume([{"iteration": 6, **rollouts.to_json()}, {"iteration": 7, **rollouts.to_json()}])
    assert sorted(queued.pending) == [6, 7] and all(isinstance(f, Future) and f.done() for f in queued.pending.values())
    assert queued.in_flight()[0]["iteration"] == 6 and queued.in_flight()[1]["weight_version"] == 4
    with pytest.raises(ValueError, match="iterations \\[7\\]: max_off_policy_steps=2 resumes from at most 2 of them, "
                                         "from iteration 6 on"):
        ahead(5, 2).resume([{"iteration": 7, **rollouts.to_json()}])  # iteration 6 missing
    with pytest.raises(ValueError, match="at most 1 of them"):
        ahead(5, 1).resume([{"iteration": 6, **rollouts.to_json()}, {"iteration": 7, **rollouts.to_json()}])
    queued.close()
