"""Building the RL batch from engine samples, its checks, and per-task rollout metrics by hand."""

import math

import pytest

from passband.training.engines.protocol import Sample
from passband.training.rl.batches.batching import RolloutBatch, build_rollout_batch
from passband.training.rl.monitoring.rollout_metrics import rollout_metrics


def _sample(prompt_index, sample_index, tokens, finish_reason="stop", prompt=(1, 2)):
    return Sample(prompt_index=prompt_index, sample_index=sample_index, token_ids=list(tokens), text="",
                  logprobs=[-0.5] * len(tokens), finish_reason=finish_reason, prompt_token_ids=list(prompt))


def test_build_flattens_groups_and_masks_truncated_samples():
    samples = [
        [_sample(0, 0, [3, 4]), _sample(0, 1, [5, 6, 7], finish_reason="length")],
        [_sample(1, 0, [8], prompt=(9,)), _sample(1, 1, [10, 11], prompt=(9,))],
    ]
    batch = build_rollout_batch(samples, [[1.0, 0.5], [None, 0.0]], [[True, True], [False, True]], ["math", "code"])
    assert batch.group_size == 2
    assert batch.response_ids == [[3, 4], [5, 6, 7], [8], [10, 11]]
    assert batch.prompt_ids == [[1, 2], [1, 2], [9], [9]]
    assert batch.valid == [True, False, False, True]  # row 1 truncated, row 2 unparsable
    assert math.isnan(batch.rewards[2]) and batch.rewards[1] == 0.5
    assert batch.tasks == ["math", "math", "code", "code"]
    assert batch.truncated == [False, True, False, False]
    kept = build_rollout_batch(samples, [[1.0, 0.5], [None, 0.0]], [[True, True], [False, True]], ["math", "code"],
                               mask_truncated=False)
    assert kept.valid == [True, True, False, True]


def test_build_refuses_a_valid_sample_without_reward():
    with pytest.raises(ValueError, match="prompt 0 sample 1: reward None but marked valid"):
        build_rollout_batch([[_sample(0, 0, [3]), _sample(0, 1, [4])]], [[1.0, None]], [[True, True]], ["math"])


def test_batch_checks_name_the_bad_row():
    rows = dict(prompt_ids=[[1], [1]], response_ids=[[2], [3]], engine_logp=[[-1.0], [-1.0]], rewards=[1.0, 0.0],
                valid=[True, True], tasks=["math", "math"], group_size=2)
    RolloutBatch(**rows)
    with pytest.raises(ValueError, match="row 1: 2 engine log-probs for 1 response tokens"):
        RolloutBatch(**{**rows, "engine_logp": [[-1.0], [-1.0, -2.0]]})
    with pytest.raises(ValueError, match="row 1: prompt differs from row 0"):
        RolloutBatch(**{**rows, "prompt_ids": [[1], [7]]})
    with pytest.raises(ValueError, match="row 0: valid row has non-finite reward"):
        RolloutBatch(**{**rows, "rewards": [math.nan, 0.0]})
    with pytest.raises(ValueError, match="not a whole number of groups"):
        RolloutBatch(**{**rows, "group_size": 3})


def test_rollout_metrics_per_task_by_hand():
    batch = RolloutBatch(
        prompt_ids=[[1]] * 6, response_ids=[[2] * 3, [2] * 5, [2] * 1, [2] * 4, [2] * 2, [2] * 6],
        engine_logp=[[-1.0] * n for n in (3, 5, 1, 4, 2, 6)], rewards=[1.0, 0.5, math.nan, 1.0, 0.0, 0.25],
        valid=[True, True, False, True, True, True], tasks=["math", "math", "math", "code", "code", "code"],
        group_size=3, truncated=[False, False, True, False, False, False],
    )
    metrics = rollout_metrics(batch)
    # math: rewards 1, 0.5, (invalid -> 0): mean 0.5; one full pass of 3; one unparsable; lengths 3, 5, 1.
    assert metrics["math/reward"] == pytest.approx(0.5)
    assert metrics["math/pass_rate"] == pytest.approx(1 / 3)
    assert metrics["math/unparsable_frac"] == pytest.approx(1 / 3)
    assert metrics["math/response_len_mean"] == pytest.approx(3.0)
    assert metrics["math/response_len_max"] == 5.0
    assert metrics["math/truncated_frac"] == pytest.approx(1 / 3)
    # code: rewards 1, 0, 0.25: mean 0.41667; one pass; lengths 4, 2, 6.
    assert metrics["code/reward"] == pytest.approx(1.25 / 3)
    assert metrics["code/pass_rate"] == pytest.approx(1 / 3)
    assert metrics["code/unparsable_frac"] == 0.0
    assert metrics["code/response_len_mean"] == pytest.approx(4.0)
    assert metrics["reward"] == pytest.approx(2.75 / 6)
    assert metrics["pass_rate"] == pytest.approx(2 / 6)
    assert metrics["num_masked_unparsable"] == 1.0
