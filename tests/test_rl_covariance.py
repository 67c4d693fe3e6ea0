"""Clip-Cov and KL-Cov token selection on a crafted batch with known covariances."""

import math

import pytest
import torch

from passband.training.rl.algebra.covariance import clip_cov_keep_mask, kl_cov_penalty, kl_cov_selection, token_covariance
from passband.training.rl.algebra.objectives import policy_loss
from passband.training.rl.algebra.covariance import KL_COV_CLIP

# Two rows of two tokens. Token advantages [1, 1, -1, -1] (mean 0); logp [-1, -3, -1.5, -2.5]
# (mean -2, centred [1, -1, 0.5, -0.5]); cov = centred logp * centred A = [1, -1, -0.5, 0.5].
LOGP = torch.tensor([[-1.0, -3.0], [-1.5, -2.5]])
ADVANTAGES = torch.tensor([1.0, -1.0])
MASK = torch.ones(2, 2)


def test_token_covariance_by_hand():
    expected = torch.tensor([[1.0, -1.0], [-0.5, 0.5]])
    assert torch.allclose(token_covariance(LOGP, ADVANTAGES, MASK), expected)
    # A padded third token changes nothing: means are over response tokens only.
    padded = torch.cat([LOGP, torch.full((2, 1), float("nan"))], dim=1)
    mask = torch.tensor([[1, 1, 0], [1, 1, 0]])
    assert torch.allclose(token_covariance(padded, ADVANTAGES, mask)[:, :2], expected)


def test_clip_cov_detaches_the_tokens_inside_the_bounds():
    # Bounds (0.4, 5): candidates are (0, 0) with cov 1 and (1, 1) with cov 0.5.
    keep = clip_cov_keep_mask(LOGP, LOGP, ADVANTAGES, MASK, fraction=0.5, cov_lower=0.4, cov_upper=5.0)
    assert torch.equal(keep, torch.tensor([[0.0, 1.0], [1.0, 0.0]]))  # int(0.5 * 4) = 2 chosen
    # Bounds (0.6, 5): only (0, 0).
    keep = clip_cov_keep_mask(LOGP, LOGP, ADVANTAGES, MASK, fraction=0.5, cov_lower=0.6)
    assert torch.equal(keep, torch.tensor([[0.0, 1.0], [1.0, 1.0]]))


def test_clip_cov_random_choice_is_reproducible_and_among_candidates():
    chosen = set()
    for seed in range(20):
        # fraction 0.25 of 4 tokens: one of the two candidates, picked by the generator.
        keep = clip_cov_keep_mask(LOGP, LOGP, ADVANTAGES, MASK, fraction=0.25, cov_lower=0.4,
                                  generator=torch.Generator().manual_seed(seed))
        again = clip_cov_keep_mask(LOGP, LOGP, ADVANTAGES, MASK, fraction=0.25, cov_lower=0.4,
                                   generator=torch.Generator().manual_seed(seed))
        assert torch.equal(keep, again)
        assert int((keep == 0).sum()) == 1
        chosen.add(tuple((keep == 0).nonzero()[0].tolist()))
    assert chosen == {(0, 0), (1, 1)}


def test_clip_cov_skips_tokens_the_surrogate_already_clips():
    old_logp = LOGP.clone()
    old_logp[0, 0] -= 1.0  # ratio e^1 = 2.72 > 1.28 with A > 0: already clipped high
    keep = clip_cov_keep_mask(LOGP, old_logp, ADVANTAGES, MASK, fraction=0.5, cov_lower=0.6)
    assert torch.equal(keep, torch.ones(2, 2))


def test_kl_cov_penalizes_the_top_covariance_token():
    logp = LOGP.clone().requires_grad_()
    old_logp = LOGP - torch.tensor([[0.3, 0.2], [0.1, -0.4]])
    # fraction 0.25 of 4 -> 1 token: the top cov (0, 0); penalty 2 * |0.3| = 0.6 there.
    selected = kl_cov_selection(LOGP, ADVANTAGES, MASK, fraction=0.25)
    assert torch.equal(selected, torch.tensor([[1.0, 0.0], [0.0, 0.0]]))
    penalty = kl_cov_penalty(logp, old_logp, selected, MASK, coef=2.0)
    assert torch.allclose(penalty, torch.tensor([[0.6, 0.0], [0.0, 0.0]]))
    penalty.sum().backward()
    assert torch.allclose(logp.grad, torch.tensor([[2.0, 0.0], [0.0, 0.0]]))  # coef * sign(0.3)
    # fraction 0.5 -> 2 tokens: (0, 0) and (1, 1) with cov 0.5; |-0.4| * 2 = 0.8.
    selected = kl_cov_selection(LOGP, ADVANTAGES, MASK, fraction=0.5)
    assert torch.equal(selected, torch.tensor([[1.0, 0.0], [0.0, 1.0]]))
    assert torch.allclose(kl_cov_penalty(LOGP, old_logp, selected, MASK, coef=2.0), torch.tensor([[0.6, 0.0], [0.0, 0.8]]))


def test_kl_cov_selection_ignores_padding():
    # A padded third column with a huge logp would have the top cov if it were read.
    padded = torch.cat([LOGP, torch.full((2, 1), 50.0)], dim=1)
    mask = torch.tensor([[1, 1, 0], [1, 1, 0]])
    selected = kl_cov_selection(padded, ADVANTAGES, mask, fraction=0.25)
    assert torch.equal(selected, torch.tensor([[1.0, 0.0, 0.0], [0.0, 0.0, 0.0]]))
    # Padding holding NaN gets neither penalty nor gradient.
    logp = torch.tensor([[-1.0, float("nan")]], requires_grad=True)
    penalty = kl_cov_penalty(logp, torch.tensor([[-1.5, float("nan")]]), torch.ones(1, 2), torch.tensor([[1, 0]]))
    assert torch.allclose(penalty, torch.tensor([[0.5, 0.0]]))
    penalty.sum().backward()
    assert torch.equal(logp.grad, torch.tensor([[1.0, 0.0]]))


def test_kl_cov_clip_range_leaves_the_surrogate_unclipped():
    # Ratios 3.0 (A = +1) and 0.1 (A = -1) lie far outside any usual clip range; the unclipped
    # surrogate is -mean(r * A) = -(3.0 - 0.1) / 2 = -1.45, gradient d/dlogp_t = -r_t A_t / 2.
    logp = torch.tensor([[math.log(3.0)], [math.log(0.1)]], requires_grad=True)
    loss, metrics = policy_loss(logp, torch.zeros(2, 1), torch.tensor([1.0, -1.0]), torch.ones(2, 1),
                                clip_low=KL_COV_CLIP[0], clip_high=KL_COV_CLIP[1])
    assert loss.item() == pytest.approx(-1.45, abs=1e-6)
    assert metrics["clip_frac_low"] == metrics["clip_frac_high"] == 0.0
    loss.backward()
    assert torch.allclose(logp.grad, torch.tensor([[-1.5], [0.05]]), atol=1e-6)
    # Control: the default range clips both tokens, so neither gets gradient.
    clipped = logp.detach().clone().requires_grad_()
    loss, metrics = policy_loss(clipped, torch.zeros(2, 1), torch.tensor([1.0, -1.0]), torch.ones(2, 1))
    loss.backward()
    assert metrics["clip_frac_low"] == metrics["clip_frac_high"] == 0.5
    assert torch.equal(clipped.grad, torch.zeros(2, 1))


def test_fraction_out_of_range_is_refused():
    with pytest.raises(ValueError, match="fraction"):
        kl_cov_selection(LOGP, ADVANTAGES, MASK, fraction=1.5)
