"""What the rollout code below the flow reads of the RL config (tasks/rollouts/settings.py): the
config's own settings, each task's weight and overlong shaping resolved, nothing copied by value.
The rollouts' numbers through these settings are the RL flow tests' (test_flow_rl.py,
test_rl_staleness.py, test_rl_overlong.py, test_rl_dynamic_sampling.py)."""

from __future__ import annotations

import dataclasses

import pytest

from passband.flows.rl.config import RLConfig
from passband.tasks.rollouts.settings import RolloutSettings, iteration_seed
from passband.training.rl.batches.dynamic_sampling import DynamicSamplingConfig
from passband.training.rl.batches.overlong import OverlongShaping


def test_the_settings_are_the_configs_own():
    soft = {"truncated": "soft", "buffer_tokens": 16}
    config = RLConfig(task_weights={"math": 3.0}, system_prompt="Be brief.", prompts_per_step=4, seed=11,
                      dynamic_sampling=DynamicSamplingConfig(max_rounds=2),
                      reward={"overlong": {"truncated": "zero"}, "overlong_tasks": {"code": soft},
                              "mask_truncated": False, "invalid_reward": "zero"})
    settings = config.rollout_settings()
    assert isinstance(settings, RolloutSettings)
    assert settings.task_weights == {"code": 1.0, "ifeval": 1.0, "math": 3.0}  # a task not listed weighs 1
    assert settings.overlong == {"math": OverlongShaping(truncated="zero"), "ifeval": OverlongShaping(truncated="zero"),
                                 "code": OverlongShaping(**soft)}  # code's own, the others the run-wide one
    assert (settings.seed, settings.prompts_per_step, settings.system_prompt) == (11, 4, "Be brief.")
    assert (settings.mask_truncated, settings.invalid_reward) == (False, "zero")
    # the config's objects themselves: a setting read below the flow is the one the flow holds
    assert settings.sampling is config.sampling and settings.verifiers is config.reward.verifiers
    assert settings.dynamic_sampling is config.dynamic_sampling and settings.environments is config.environments
    assert settings.math_tool is None and settings.code_feedback is None
    with pytest.raises(dataclasses.FrozenInstanceError):
        settings.seed = 0  # type: ignore[misc]


def test_iteration_seed_by_hand():
    # by the iteration alone, so a resumed run draws what the uninterrupted one drew there
    assert iteration_seed(7, 3) == 7 * 1_000_003 + 3 == 7_000_024
    assert iteration_seed(0, 1) == 1
