"""Overlong shaping (issue 68 item 3; docs/recipe.md section 4.4): what an answer cut at max_tokens
trains as, per task: masked (the default, the batch as before), zero, or DAPO's soft overlong
punishment (Yu et al. 2025, eq. 13), checked at hand-computed points; the settings refuse bad
combinations in one line; a tiny RL run with it on logs how often it fired."""

from __future__ import annotations

import math

import pytest
from pydantic import ValidationError

from passband.flows.common_config import SamplingConfig
from passband.flows.rl.config import RewardConfig, RLConfig
from passband.training.engines.protocol import Sample
from passband.training.rl.algebra.overlong import soft_overlong_penalty
from passband.training.rl.batches.batching import build_rollout_batch
from passband.training.rl.batches.overlong import OverlongShaping, shape_overlong
from test_flow_rl import harness  # noqa: F401  (a fixture)

SOFT = OverlongShaping(truncated="soft", buffer_tokens=4)


@pytest.mark.parametrize(("length", "expected"), [
    (0, 0.0), (11, 0.0), (12, 0.0),  # |y| <= L_max - L_cache = 12: nothing
    (13, -0.25), (14, -0.5), (15, -0.75), (16, -1.0),  # ((16 - 4) - |y|) / 4
    (17, -1.0), (100, -1.0),  # past L_max
])
def test_the_soft_penalty_is_dapos_equation_13_at_hand_computed_points(length: int, expected: float) -> None:
    assert soft_overlong_penalty(length, max_tokens=16, buffer_tokens=4) == expected


def test_the_soft_penalty_at_another_shape() -> None:
    # L_max = 20480, L_cache = 4096 (DAPO's own): free to 16384, -0.5 halfway through the buffer
    assert soft_overlong_penalty(16384, 20480, 4096) == 0.0
    assert soft_overlong_penalty(16384 + 2048, 20480, 4096) == -0.5
    assert soft_overlong_penalty(16385, 20480, 4096) == -1 / 4096


@pytest.mark.parametrize("buffer_tokens", [0, 16, 17])
def test_the_soft_penalty_refuses_a_buffer_that_does_not_fit(buffer_tokens: int) -> None:
    with pytest.raises(ValueError, match="1 <= buffer_tokens < max_tokens"):
        soft_overlong_penalty(10, 16, buffer_tokens)


def _sample(length: int, cut: bool, index: int = 0, loss_mask: list[int] | None = None) -> Sample:
    return Sample(0, index, list(range(1, length + 1)), "x", [-0.5] * length, "length" if cut else "stop", [7, 8],
                  loss_mask)


# one group of G = 6 at L_max = 16: lengths, cut?, verifier reward (None: no verdict), valid
GROUP = [(5, False, 1.0, True), (13, False, 1.0, True), (14, False, 0.0, True), (16, True, None, False),
         (16, True, 1.0, True), (15, False, None, False)]


def _group():
    return ([[_sample(n, cut, i) for i, (n, cut, _, _) in enumerate(GROUP)]], [[r for _, _, r, _ in GROUP]],
            [[v for _, _, _, v in GROUP]])


@pytest.mark.parametrize("invalid_reward", ["mask", "zero"])
@pytest.mark.parametrize("mask_truncated", [True, False])
def test_masked_builds_the_batch_mask_truncated_built(invalid_reward, mask_truncated) -> None:
    """The default shaping, then the batch without mask_truncated, is the batch as before the setting."""
    samples, rewards, valid = _group()
    before = build_rollout_batch(samples, rewards, valid, ["math"], mask_truncated, 1.0, invalid_reward)
    shaped = shape_overlong(samples, rewards, valid, ["math"], {}, 16, mask_truncated)
    after = build_rollout_batch(samples, shaped.rewards, shaped.valid, ["math"], False, 1.0, invalid_reward)
    assert shaped.metrics == {}
    assert after.valid == before.valid and after.unscored == before.unscored and after.truncated == before.truncated
    assert [r if v else None for r, v in zip(after.rewards, after.valid)] == \
        [r if v else None for r, v in zip(before.rewards, before.valid)]


def test_zero_gives_a_cut_answer_reward_zero_in_the_gradient() -> None:
    samples, rewards, valid = _group()
    shaped = shape_overlong(samples, rewards, valid, ["math"], {"math": OverlongShaping(truncated="zero")}, 16)
    assert shaped.rewards == [[1.0, 1.0, 0.0, 0.0, 0.0, None]]
    assert shaped.valid == [[True, True, True, True, True, False]]
    assert shaped.metrics == {"math/overlong_penalised": 2 / 6}


def test_soft_adds_the_length_reward_and_keeps_cut_answers() -> None:
    samples, rewards, valid = _group()
    shaped = shape_overlong(samples, rewards, valid, ["math"], {"math": SOFT}, 16)
    # 5 tokens: free; 13: 1 - 0.25; 14: 0 - 0.5; cut without a verdict: 0 - 1; cut with one: 1 - 1;
    # 15 tokens, not cut, no verdict: left to invalid_reward (no length term)
    assert shaped.rewards == [[1.0, 0.75, -0.5, -1.0, 0.0, None]]
    assert shaped.valid == [[True, True, True, True, True, False]]
    assert shaped.metrics == {"math/overlong_penalised": 4 / 6,
                              "math/overlong_penalty_mean": (-0.25 - 0.5 - 1.0 - 1.0) / 6}
    batch = build_rollout_batch(samples, shaped.rewards, shaped.valid, ["math"], False, 1.0, "mask")
    assert batch.rewards[:5] == [1.0, 0.75, -0.5, -1.0, 0.0] and batch.valid == shaped.valid[0]
    assert math.isnan(batch.rewards[5])


def test_soft_on_an_episode_counts_only_the_cut() -> None:
    """max_tokens bounds each turn of an episode, not its tokens: only a cut last turn costs (-1)."""
    long_episode = _sample(30, False, 0, [1] * 10 + [0] * 10 + [1] * 10)
    cut_episode = _sample(30, True, 1, [1] * 10 + [0] * 10 + [1] * 10)
    shaped = shape_overlong([[long_episode, cut_episode]], [[1.0, 1.0]], [[True, True]], ["math"], {"math": SOFT}, 16)
    assert shaped.rewards == [[1.0, 0.0]]


def test_each_task_takes_its_own_shaping_else_the_run_wide_one() -> None:
    reward = RewardConfig(overlong=OverlongShaping(truncated="zero"), overlong_tasks={"math": SOFT})
    assert reward.overlong_shaping(["math", "code"]) == {"math": SOFT, "code": OverlongShaping(truncated="zero")}
    samples, rewards, valid = _group()
    shaped = shape_overlong(samples * 2, rewards * 2, valid * 2, ["math", "code"],
                            reward.overlong_shaping(["math", "code"]), 16)
    assert shaped.rewards[0][3] == -1.0 and shaped.rewards[1][3] == 0.0
    assert sorted(shaped.metrics) == ["code/overlong_penalised", "math/overlong_penalised", "math/overlong_penalty_mean"]


def test_the_defaults_leave_the_resolved_config_as_it_was() -> None:
    """Masked everywhere, the settings are not in the dump: run keys and checkpoints do not move."""
    assert list(RLConfig().model_dump(mode="json")["reward"]) == ["verifiers", "mask_truncated", "invalid_reward"]
    on = RLConfig(reward=RewardConfig(overlong=SOFT)).model_dump(mode="json")["reward"]
    assert on["overlong"] == {"truncated": "soft", "buffer_tokens": 4}


@pytest.mark.parametrize(("settings", "message"), [
    ({"reward": {"overlong": {"truncated": "soft", "buffer_tokens": 96}}},
     "reward.overlong.buffer_tokens=96 must be below sampling.max_tokens=96"),
    ({"reward": {"overlong_tasks": {"math": {"truncated": "soft", "buffer_tokens": 100}}}},
     "reward.overlong_tasks.math.buffer_tokens=100 must be below sampling.max_tokens=96"),
    ({"reward": {"overlong": {"truncated": "soft"}}}, "truncated: soft needs buffer_tokens >= 1"),
    ({"reward": {"overlong": {"truncated": "zero", "buffer_tokens": 8}}}, "applies to truncated: soft only"),
    ({"reward": {"overlong_tasks": {"structured": {"truncated": "zero"}}}},
     "reward.overlong_tasks names ['structured'], which are not in datasets"),
])
def test_bad_combinations_are_refused_in_one_line(settings, message) -> None:
    with pytest.raises(ValidationError) as error:
        RLConfig(**settings)
    assert sum(message in line for line in str(error.value).splitlines()) == 1


def test_a_buffer_below_the_runs_own_max_tokens_is_accepted() -> None:
    config = RLConfig(sampling=SamplingConfig(n=4, max_tokens=32), reward=RewardConfig(
        overlong_tasks={"math": OverlongShaping(truncated="soft", buffer_tokens=31)}))
    assert config.reward.overlong_shaping(["math"])["math"].buffer_tokens == 31


def test_a_tiny_rl_run_with_soft_punishment_logs_how_often_it_fired(harness, tmp_path, monkeypatch) -> None:
    """The digit model answers "1" or "2" and EOS (2 tokens, now and then more) under max_tokens 4; a
    buffer of 3 makes every answer past 1 token pay: -(n - 1) / 3, -1 when cut."""
    from mlflow import MlflowClient

    from passband.flows.rl.flow import rl
    from passband.tasks.steps.rollouts_log import ROLLOUTS_TAG, read_rollouts
    from test_flow_rl import _tiny_config, digit_task

    digit_task(tmp_path, monkeypatch, "test-rl-overlong")
    shaping = OverlongShaping(truncated="soft", buffer_tokens=3)
    config = _tiny_config(tmp_path, reward=RewardConfig(overlong_tasks={"math": shaping}))
    summary = rl(RLConfig.model_validate(config.model_dump() | {"num_iterations": 1, "eval": None, "eval_every": 0,
                                                                "checkpoint_every": 0}))
    assert summary.status == "completed"
    client = MlflowClient()
    rows = read_rollouts(client.get_run(summary.mlflow_run_id).data.tags[ROLLOUTS_TAG]).to_pylist()
    # the rows in the gradient: a verdict, or cut (a cut answer is kept under soft)
    kept = [row for row in rows if row["status"] in ("pass", "fail", "timeout") or row["finish_reason"] == "length"]
    penalties = [-1.0 if row["finish_reason"] == "length" else soft_overlong_penalty(row["num_tokens"], 4, 3)
                 for row in kept]
    history = {name: [m.value for m in client.get_metric_history(summary.mlflow_run_id, f"math/{name}")]
               for name in ("overlong_penalised", "overlong_penalty_mean")}
    assert history["overlong_penalised"] == [pytest.approx(sum(p < 0 for p in penalties) / len(rows))]
    assert history["overlong_penalty_mean"] == [pytest.approx(sum(penalties) / len(rows))]
    assert history["overlong_penalised"][0] > 0, "the penalty never fired: the run shows nothing"
    for row, penalty in zip(kept, penalties):  # the reward the update used: the verdict (0 if none) plus the length term
        verdict = row["score"] if row["status"] in ("pass", "fail", "timeout") else 0.0
        assert row["valid"] and row["reward"] == pytest.approx(verdict + penalty)
