"""Environments of the user's own code (issue 55 item 1, as tasks and rewards of the user's are):
`environments: {task: {environment: module:attribute}}` runs that task's rows as the user's
episodes in RL's rollouts, evaluation and curation, under the same opt-in as user tasks. The reward
is the task's verifier on the last turn; only the sampled tokens carry the loss mask."""

from __future__ import annotations

import pytest

from episode_fixtures import ScriptedPolicy
from passband.flows.curate.config import CurateConfig
from passband.flows.evaluate.flow import EvaluateConfig
from passband.flows.rl.config import RLConfig
from passband.tasks.rollouts.collect import _episode_samples
from passband.tasks.sampling.passrate_job import ShardSampling
from passband.training.engines.config import SamplingConfig
from passband.training.episodes.setups import environment_source_version, load_environment
from passband.training.rl.batches.batching import build_rollout_batch
from tiny_chat_model import IM_END, tiny_tokenizer
from user_environment_fixture import HINT

ENV = {"math": {"environment": "user_environment_fixture:SayTheAnswer", "budget": {"max_turns": 3}}}
ROW = {"id": "m0", "task": "math", "prompt": "What is 3 + 4?", "reference": "7", "subdomain": "arithmetic"}


def test_a_tasks_rows_run_as_the_users_episodes(monkeypatch):
    monkeypatch.setenv("PASSBAND_ALLOW_USER_CODE", "1")
    turns = [list(b"6") + [IM_END], list(b"7") + [IM_END]]
    config = RLConfig(sampling=SamplingConfig(n=2, max_tokens=16), environments=ENV)
    samples, counts = _episode_samples(config.rollout_settings(), tiny_tokenizer(), ScriptedPolicy({}, default=turns), [ROW], ["unused"],
                                       config.sampling)
    assert [s.text for s in samples[0]] == ["7", "7"]
    assert (counts["math/num_episodes"], counts["math/num_turns"]) == (2.0, 4.0)
    batch = build_rollout_batch(samples, [[1.0, 1.0]], [[True, True]], ["math"])
    hint = len(batch.response_ids[0]) - len(turns[0]) - len(turns[1])
    assert batch.loss_mask[0] == [1] * len(turns[0]) + [0] * hint + [1] * len(turns[1])
    # the hint between the turns is the environment's, rendered by the chat template
    assert HINT in tiny_tokenizer().decode(batch.response_ids[0][len(turns[0]):len(turns[0]) + hint])


def test_user_environments_need_the_opt_in(monkeypatch):
    monkeypatch.delenv("PASSBAND_ALLOW_USER_CODE", raising=False)
    config = RLConfig(sampling=SamplingConfig(n=2, max_tokens=16), environments=ENV)
    with pytest.raises(ValueError, match="PASSBAND_ALLOW_USER_CODE=1"):
        _episode_samples(config.rollout_settings(), tiny_tokenizer(), ScriptedPolicy({}), [ROW], ["unused"], config.sampling)


def test_environment_settings_are_checked_before_a_run(monkeypatch):
    with pytest.raises(ValueError, match="not an import path"):
        RLConfig(environments={"math": {"environment": "user_environment_fixture.SayTheAnswer"}})
    for config in (RLConfig, EvaluateConfig, CurateConfig):
        with pytest.raises(ValueError, match="environments.math and the built-in math_tool"):
            config(math_tool={}, environments=ENV)
    monkeypatch.setenv("PASSBAND_ALLOW_USER_CODE", "1")
    with pytest.raises(ValueError, match="without open"):
        load_environment("user_environment_fixture:NOT_AN_ENVIRONMENT")


def test_a_curate_shard_is_keyed_by_the_environments_code(monkeypatch):
    monkeypatch.setenv("PASSBAND_ALLOW_USER_CODE", "1")
    sampling = CurateConfig(environments=ENV).pass_rate_sampling()
    keyed = sampling.for_task("math").key_fields()["environments"]["math"]
    assert keyed["environment"] == ENV["math"]["environment"]
    assert keyed["source"] == environment_source_version(ENV["math"]["environment"])
    assert "environments" not in sampling.for_task("code").key_fields()
    assert ShardSampling.model_validate(sampling.model_dump()) == sampling  # a task worker's job carries them
