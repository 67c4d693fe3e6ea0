"""Group advantages and zero-variance groups against hand-computed values."""

import math

import pytest
import torch

from passband.training.rl.algebra.advantages import group_advantages, zero_variance_groups


def test_group_advantages_use_sample_std_by_hand():
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0, 0.0])
    # Group 1: mean 0.5, squared deviations 4 * 0.25 = 1, sample variance 1/3, std 0.57735;
    #   A = +-0.5 / 0.57735 = +-0.866025 (population std 0.5 would give +-1).
    # Group 2: mean 0.75, squared deviations 3 * 0.0625 + 0.5625 = 0.75, sample variance 0.25,
    #   std 0.5; A = 0.25/0.5 = 0.5 (x3) and -0.75/0.5 = -1.5.
    s = 0.5 / math.sqrt(1 / 3)
    expected = torch.tensor([s, -s, -s, s, 0.5, 0.5, 0.5, -1.5])
    assert torch.allclose(group_advantages(rewards, group_size=4), expected, atol=1e-5)


def test_mean_only_subtracts_group_mean():
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0, 0.0])
    expected = torch.tensor([0.5, -0.5, -0.5, 0.5, 0.25, 0.25, 0.25, -0.75])
    assert torch.allclose(group_advantages(rewards, 4, scale_by_std=False), expected)


def test_equal_rewards_give_exact_zero_advantages():
    # 0.9 is not representable: in float32, sum([0.9] * 3) / 3 differs from 0.9 by 6e-8, and
    # that deviation divided by (std + eps) would be an advantage of 0.056 instead of 0.
    rewards = torch.tensor([0.9, 0.9, 0.9, 1.0, 1.0, 1.0])
    assert torch.equal(group_advantages(rewards, 3), torch.zeros(6))
    assert zero_variance_groups(rewards, 3).tolist() == [True, True]


def test_invalid_rollouts_are_excluded_and_get_zero():
    rewards = torch.tensor([1.0, 0.0, float("nan"), 1.0, 0.0, float("nan"), 1.0, 1.0])
    valid = torch.tensor([1, 1, 0, 1, 1, 0, 1, 1])
    # Group 1 valid [1, 0, 1]: mean 2/3, deviations 1/3, -2/3, 1/3, squares sum 6/9,
    #   sample variance (6/9)/2 = 1/3, std 0.57735 -> A = 0.57735, -1.15470, 0 (invalid), 0.57735.
    # Group 2 valid [0, 1, 1]: mean 2/3 -> A = -1.15470, 0, 0.57735, 0.57735.
    a, b = (1 / 3) / math.sqrt(1 / 3), (-2 / 3) / math.sqrt(1 / 3)
    expected = torch.tensor([a, b, 0.0, a, b, 0.0, a, a])
    advantages = group_advantages(rewards, 4, valid=valid)
    assert torch.allclose(advantages, expected, atol=1e-5)


def test_zero_variance_groups_with_validity():
    rewards = torch.tensor([1.0, 1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 0.0])
    valid = torch.tensor([1, 1, 1, 1, 0, 0, 0, 0, 0])
    # Group 1: [1, 1, 0] varies. Group 2: only one valid member (0). Group 3: none valid.
    assert zero_variance_groups(rewards, 3, valid).tolist() == [False, True, True]
    # A group with a single valid member has advantage 0 (no sample std), not NaN.
    assert torch.equal(group_advantages(rewards, 3, valid=valid)[3:], torch.zeros(6))


def test_ragged_batch_is_refused():
    with pytest.raises(ValueError, match="group_size=4"):
        group_advantages(torch.zeros(6), 4)
