"""KL estimators and placements: hand values, and exact expected gradients on a categorical.

The categorical tests enumerate every outcome y of a one-token policy pi = softmax(theta)
over V = 5 values, so expectations E_{y~pi}[...] are exact sums sum_y pi(y) [...] with pi(y)
detached (the sampling distribution is not differentiated, as with real samples).
"""

import math

import pytest
import torch

from passband.training.rl.algebra.kl import kl_estimate, kl_loss, kl_reward_penalty
from passband.training.rl.algebra.kl_rules import check_kl_placement
from passband.training.rl.algebra.advantages import group_advantages
from passband.training.rl.algebra.objectives import policy_loss

V = 5
THETA = torch.tensor([0.3, -1.2, 0.8, 0.0, -0.4])
REF_LOGITS = torch.tensor([0.1, 0.5, -0.3, 0.9, -1.0])


def _categorical():
    """theta (leaf), logp `[V, 1]` (one row per outcome), ref_logp `[V, 1]`, pi `[V]` detached."""
    theta = THETA.clone().requires_grad_()
    logp = torch.log_softmax(theta, dim=0)[:, None]
    ref_logp = torch.log_softmax(REF_LOGITS, dim=0)[:, None]
    return theta, logp, ref_logp, logp.detach().exp().squeeze(1)


def _reverse_kl_gradient() -> torch.Tensor:
    """grad_theta KL(pi || ref) = sum_y pi (log pi - log ref), differentiated directly."""
    theta = THETA.clone().requires_grad_()
    log_pi = torch.log_softmax(theta, dim=0)
    (log_pi.exp() * (log_pi - torch.log_softmax(REF_LOGITS, dim=0))).sum().backward()
    return theta.grad


def test_estimators_by_hand():
    l = torch.tensor([[0.5, -1.0, 2.0, 0.0]])  # logp - ref_logp
    logp, ref_logp = l - 3.0, torch.full_like(l, -3.0)
    assert torch.allclose(kl_estimate(logp, ref_logp, "k1"), l)
    assert torch.allclose(kl_estimate(logp, ref_logp, "k2"), torch.tensor([[0.125, 0.5, 2.0, 0.0]]))
    # k3 = exp(-l) - 1 + l: e^-0.5 - 0.5 = 0.106531; e^1 - 2 = 0.718282; e^-2 + 1 = 1.135335; 0.
    k3 = torch.tensor([[math.exp(-0.5) - 0.5, math.e - 2.0, math.exp(-2.0) + 1.0, 0.0]])
    assert torch.allclose(kl_estimate(logp, ref_logp, "k3"), k3, atol=1e-6)
    # huber (delta 1): 0.5^2/2 = 0.125; |-1| -> 0.5 either branch; |2| - 1/2 = 1.5; 0.
    assert torch.allclose(kl_estimate(logp, ref_logp, "huber"), torch.tensor([[0.125, 0.5, 1.5, 0.0]]))


def test_huber_gradient_coefficient_is_clamped_to_unit_interval():
    logp = torch.tensor([[0.5, -3.0, 2.0]], requires_grad=True)
    kl_estimate(logp, torch.zeros(1, 3), "huber").sum().backward()
    assert torch.allclose(logp.grad, torch.tensor([[0.5, -1.0, 1.0]]))  # clamp(l, -1, 1)


def test_k1_in_reward_and_k2_as_loss_both_give_the_reverse_kl_gradient():
    beta = 0.3
    expected = beta * _reverse_kl_gradient()

    # k1 in the reward: rewards 0 minus the detached penalty, a group-mean baseline (it cancels
    # in expectation), the on-policy surrogate with each outcome weighted by V * pi(y) so that
    # token_mean over the V rows is the expectation sum_y pi(y) [...].
    theta, logp, ref_logp, pi = _categorical()
    mask = torch.ones(V, 1)
    rewards = -kl_reward_penalty(logp, ref_logp, mask, coef=beta)
    advantages = group_advantages(rewards, group_size=V, scale_by_std=False)
    loss, _ = policy_loss(logp, logp.detach(), advantages, mask, weights=(V * pi)[:, None])
    loss.backward()
    assert torch.allclose(theta.grad, expected, atol=1e-6)

    # k2 as a loss, sampled off-policy from the uniform behaviour policy mu = 1/V: token_mean is
    # (1/V) sum_y w(y) k2(y) with w = pi/mu = V pi, i.e. exactly sum_y pi(y) k2(y).
    theta, logp, ref_logp, _ = _categorical()
    uniform_logp = torch.full((V, 1), -math.log(V))
    kl_loss(logp, ref_logp, mask, coef=beta, estimator="k2", behaviour_logp=uniform_logp).backward()
    assert torch.allclose(theta.grad, expected, atol=1e-6)
    assert expected.abs().max() > 0.01  # the policies differ, so the check has teeth


def test_k1_as_loss_has_zero_expected_gradient_and_is_refused():
    theta, logp, ref_logp, pi = _categorical()
    # sum_y pi(y) grad k1(y) = sum_y pi(y) grad log pi(y) = grad sum_y pi(y) = 0.
    (pi[:, None] * kl_estimate(logp, ref_logp, "k1")).sum().backward()
    assert torch.allclose(theta.grad, torch.zeros(V), atol=1e-7)
    with pytest.raises(ValueError, match="zero expected gradient"):
        kl_loss(logp, ref_logp, torch.ones(V, 1), coef=0.1, estimator="k1")


def test_k3_as_loss_follows_the_forward_kl_gradient_and_warns():
    theta, logp, ref_logp, pi = _categorical()
    (pi[:, None] * kl_estimate(logp, ref_logp, "k3")).sum().backward()
    # Forward KL(ref || pi) = sum_y ref (log ref - log pi), differentiated directly.
    forward_theta = THETA.clone().requires_grad_()
    ref = torch.softmax(REF_LOGITS, dim=0)
    (ref * (ref.log() - torch.log_softmax(forward_theta, dim=0))).sum().backward()
    assert torch.allclose(theta.grad, forward_theta.grad, atol=1e-6)
    assert not torch.allclose(theta.grad, _reverse_kl_gradient(), atol=1e-3)
    with pytest.warns(UserWarning, match="forward KL"):
        kl_loss(logp.detach(), ref_logp, torch.ones(V, 1), coef=0.1, estimator="k3")


def test_placement_checks():
    check_kl_placement("reward", "k1")
    check_kl_placement("loss", "k2")
    check_kl_placement("loss", "huber")
    # The old name of the Huber option is refused with the new one, not silently accepted.
    with pytest.raises(ValueError, match="renamed 'huber'"):
        check_kl_placement("loss", "mse")
    with pytest.raises(ValueError, match="renamed 'huber'"):
        kl_estimate(torch.zeros(1, 1), torch.zeros(1, 1), "mse")
    with pytest.raises(ValueError, match="must use estimator 'k1'"):
        check_kl_placement("reward", "k2")
    with pytest.raises(ValueError, match="'advantage'"):
        check_kl_placement("advantage", "k1")
    with pytest.raises(ValueError, match="'k4'"):
        check_kl_placement("loss", "k4")


def test_reward_penalty_sums_k1_over_response_tokens_detached():
    logp = torch.tensor([[-1.0, -2.0, -0.5], [-0.2, -0.2, -0.2]], requires_grad=True)
    ref_logp = torch.tensor([[-1.5, -1.0, float("nan")], [-0.4, -0.1, -0.2]])
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]])
    # row 0: 0.5 + (-1.0) = -0.5; row 1: 0.2 - 0.1 + 0 = 0.1; times coef 2.
    penalty = kl_reward_penalty(logp, ref_logp, mask, coef=2.0)
    assert torch.allclose(penalty, torch.tensor([-1.0, 0.2]))
    assert not penalty.requires_grad


def test_kl_loss_by_hand_with_padding_and_behaviour_weights():
    nan = float("nan")
    logp = torch.tensor([[-1.0, -2.0, nan], [-0.5, nan, nan]], requires_grad=True)
    ref_logp = torch.tensor([[-1.5, -1.0, nan], [-0.5, nan, nan]])
    behaviour_logp = torch.tensor([[-1.0 - math.log(2.0), -2.0, nan], [-0.5, nan, nan]])
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    # l = 0.5, -1.0, 0.0 -> k2 = 0.125, 0.5, 0; weights pi/mu = 2, 1, 1.
    # token_mean: (2 * 0.125 + 0.5 + 0) / 3 = 0.25; times coef 0.4 = 0.1.
    loss = kl_loss(logp, ref_logp, mask, coef=0.4, estimator="k2", behaviour_logp=behaviour_logp)
    assert loss.item() == pytest.approx(0.1)
    loss.backward()
    # d/dlogp = coef * w * l / 3: 0.4*2*0.5/3 = 0.133333, 0.4*1*(-1)/3 = -0.133333, 0; padding 0.
    expected = torch.tensor([[0.4 / 3, -0.4 / 3, 0.0], [0.0, 0.0, 0.0]])
    assert torch.allclose(logp.grad, expected, atol=1e-6)
