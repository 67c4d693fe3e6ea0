"""The rl flow with `distributed.nproc_per_node: 2` (torchrun ranks, FSDP2 on CPU, gloo) ends where
the in-process run does, and its checkpoint resumes in one process.

The tiny digit-answering Llama of tests/test_flow_rl.py, hf engine, fp32, two iterations:
A: in process (the reference); B: two ranks; C: two ranks stopped after iteration 1, rerun in one
process. The ranks' own equivalence is tests/test_rl_ranks.py's subject; this test is about the flow
around them: batches to the ranks, weights back to the engine, checkpoint commits, the resume rule.
"""

import pytest
import torch
from safetensors.torch import load_file

from passband.flows.rl.flow import rl
from passband.training.rl.config import RLAlgoConfig
from passband.training.runtime.config import DistributedConfig
from test_flow_rl import EVAL_PROMPTS, TRAIN_PROMPTS, _digit_model, _rows_file, _state, _tiny_config, _weights, harness  # noqa: F401

pytestmark = pytest.mark.slow  # four flow runs, two of them launching 2 torchrun ranks

ALGO = RLAlgoConfig(lr=1e-2, micro_batch_size=3, precision="fp32")


def _config(tmp_path, nproc: int, **overrides):
    base = _tiny_config(tmp_path, **overrides)
    return base.model_copy(update={"algo": ALGO, "distributed": DistributedConfig(nproc_per_node=nproc)})


def test_two_ranks_match_the_in_process_run_and_resume_in_one(harness, tmp_path, monkeypatch):  # noqa: F811
    _digit_model(tmp_path / "digits")
    _rows_file(tmp_path / "train.jsonl", TRAIN_PROMPTS)
    _rows_file(tmp_path / "eval.jsonl", EVAL_PROMPTS)
    monkeypatch.setenv("PASSBAND_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("PASSBAND_EXPERIMENT", "test-rl-ranks")
    runs = {}
    for name, nproc in (("one", 1), ("two", 2)):
        monkeypatch.setenv("PASSBAND_ARTIFACT_ROOT", str(tmp_path / f"root_{name}"))
        runs[name] = rl(_config(tmp_path, nproc))
    monkeypatch.setenv("PASSBAND_ARTIFACT_ROOT", str(tmp_path / "root_resumed"))
    partial = rl(_config(tmp_path, 2, max_iterations_this_run=1))
    assert partial.status == "partial" and partial.outputs["checkpoint"].endswith("iter-000001")
    runs["resumed"] = rl(_config(tmp_path, 1))
    assert runs["resumed"].status == "completed"

    one = runs["one"]
    one_weights = _weights(one.outputs["checkpoint"])
    start = load_file(str(tmp_path / "digits" / "model.safetensors"))
    assert any(not torch.equal(start[k], one_weights[k]) for k in one_weights)  # the updates moved the weights

    def state_at(summary, iteration):
        return _state(summary.outputs["checkpoint"].replace("iter-000002", f"iter-{iteration:06d}"))

    for name in ("two", "resumed"):
        summary = runs[name]
        for iteration in (1, 2):
            assert state_at(summary, iteration)["prompt_ids"] == state_at(one, iteration)["prompt_ids"]
        weights = _weights(summary.outputs["checkpoint"])
        diffs = torch.cat([(weights[k] - one_weights[k]).abs().flatten() for k in one_weights])
        print(f"{name}: |weights - in-process run| after 2 iterations: max {float(diffs.max()):.3g}, "
              f"{int((diffs > 1e-6).sum())} of {diffs.numel()} above 1e-6")
        # The ranks sum gradients in another fp32 order (tests/test_rl_ranks.py: 1.2e-7 apart). Where a
        # gradient is below AdamW's eps = 1e-8, the first step is lr * g / eps, a gain of lr/eps = 1e6 on
        # its rounding: measured here, one embedding entry with g = 1.2e-9, the runs' g 5.6e-11 apart,
        # moved 4.5e-5 apart (a step moves a weight by up to lr = 1e-2). Measured: 150 of 90624 entries
        # above 1e-6 after 2 iterations, none above 4.5e-5. Bounds: the max within lr/eps x 1e-10 = 1e-4,
        # the bulk (all but 1%) within 1e-6. AdamW is nearly blind to the gradient's scale, so a dropped or
        # doubled micro-batch is caught by the grad norm below rather than by the weights.
        assert float(diffs.max()) <= 1e-4 and int((diffs > 1e-6).sum()) <= diffs.numel() // 100
        assert summary.metrics["math/reward"] == one.metrics["math/reward"]
        assert summary.metrics["grad_norm"] == pytest.approx(one.metrics["grad_norm"], rel=1e-5)


def test_one_update_ahead_on_two_ranks(harness, tmp_path, monkeypatch):  # noqa: F811
    """rollout.max_off_policy_steps=1 with the update on 2 ranks: the ranks publish the start weights
    and every update under their root, the rollout thread samples iteration i with v<i-2> from there
    while they train, and the run ends where the in-process k=1 run does (the ranks' bound above)."""
    from passband.training.runtime.config import DistributedConfig
    from test_flow_rl import digit_task
    from test_rl_staleness import _config as ahead_config, _series

    digit_task(tmp_path, monkeypatch, "test-rl-ranks-ahead")
    monkeypatch.setenv("PASSBAND_ARTIFACT_ROOT", str(tmp_path / "root_one"))
    one = rl(ahead_config(tmp_path, 1))
    # a root of its own: the rank count is not in the cache key, so the same root would reuse `one`
    monkeypatch.setenv("PASSBAND_ARTIFACT_ROOT", str(tmp_path / "root_two"))
    two = rl(ahead_config(tmp_path, 1).model_copy(update={"distributed": DistributedConfig(nproc_per_node=2)}))
    assert two.status == "completed" and two.mlflow_run_id != one.mlflow_run_id
    assert _series(two.mlflow_run_id, "rollout/weight_version") == [0.0, 0.0, 1.0]
    assert _series(two.mlflow_run_id, "math/reward") == _series(one.mlflow_run_id, "math/reward")
    kl_one, kl_two = _series(one.mlflow_run_id, "vllm_kl"), _series(two.mlflow_run_id, "vllm_kl")
    assert kl_two[0] < 1e-6 and min(kl_two[1:]) > 100 * 1e-9  # on policy at iteration 1, stale after
    assert kl_two == pytest.approx(kl_one, rel=1e-3)

    def state_at(summary, iteration):
        return _state(summary.outputs["checkpoint"].replace("iter-000003", f"iter-{iteration:06d}"))

    assert [state_at(two, i)["prompt_ids"] for i in (1, 2, 3)] == [state_at(one, i)["prompt_ids"] for i in (1, 2, 3)]
    # the ranks' checkpoint after iteration 1 keeps iteration 2's rollouts, sampled ahead with v0
    assert [(item["iteration"], item["weight_version"]) for item in state_at(two, 1)["in_flight"]] == [(2, 0)]
    weights, one_weights = _weights(two.outputs["checkpoint"]), _weights(one.outputs["checkpoint"])
    diffs = torch.cat([(weights[k] - one_weights[k]).abs().flatten() for k in one_weights])
    print(f"k=1 on 2 ranks: |weights - in-process| max {float(diffs.max()):.3g}, "
          f"{int((diffs > 1e-6).sum())} of {diffs.numel()} above 1e-6")
    # Three updates, so AdamW's amplification of sub-eps gradients (the test above) has one more step
    # to work: measured max 1.9e-4, 2305 of 90624 entries above 1e-6. The grad norms pin the batches.
    assert float(diffs.max()) <= 1e-3 and int((diffs > 1e-6).sum()) <= diffs.numel() // 20
    assert _series(two.mlflow_run_id, "grad_norm") == pytest.approx(_series(one.mlflow_run_id, "grad_norm"), rel=1e-4)
