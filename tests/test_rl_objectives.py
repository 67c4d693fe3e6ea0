"""Clipped surrogate (token level and GSPO), its clipping sides and aggregations, by hand."""

import math
import warnings

import pytest
import torch

from passband.training.rl.algebra.objectives import policy_loss


def test_gspo_sequence_ratio_value_and_gradient():
    nan = float("nan")  # padding is never read
    logp = torch.tensor([[-1.0, -2.0, nan], [-0.3, -0.7, -1.1]], requires_grad=True)
    old_logp = torch.tensor([[-1.2, -1.6, nan], [-0.6, -0.7, -1.4]])
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]])
    advantages = torch.tensor([1.0, -1.0])
    # Row 0: log-ratios 0.2, -0.4 -> mean -0.1 -> s0 = exp(-0.1) = 0.904837.
    # Row 1: log-ratios 0.3, 0.0, 0.3 -> mean 0.2 -> s1 = exp(0.2) = 1.221403.
    # Both inside [0.8, 1.28]: no clipping. seq_mean loss = (-s0 * 1 + s1 * 1) / 2 = 0.158283.
    s0, s1 = math.exp(-0.1), math.exp(0.2)
    loss, metrics = policy_loss(logp, old_logp, advantages, mask, level="sequence", aggregation="seq_mean")
    assert loss.item() == pytest.approx((-s0 + s1) / 2, abs=1e-6)
    assert metrics["ratio_min"] == pytest.approx(s0, abs=1e-6)
    assert metrics["ratio_max"] == pytest.approx(s1, abs=1e-6)
    assert metrics["ratio_mean"] == pytest.approx((s0 + s1) / 2, abs=1e-6)
    assert metrics["clip_frac_low"] == metrics["clip_frac_high"] == 0.0
    loss.backward()
    # GSPO gradient: d/dlogp_t of -(1/2) A_i s_i = -(1/2) A_i s_i / |y_i| on each response token.
    expected = torch.tensor([[-s0 / 4, -s0 / 4, 0.0], [s1 / 6, s1 / 6, s1 / 6]])
    assert torch.allclose(logp.grad, expected, atol=1e-6)


def test_gspo_gradient_matches_direct_sequence_formula():
    # Independent method: differentiate -mean_i A_i exp(mean_t (logp - old)) written directly.
    torch.manual_seed(0)
    logp = (-torch.rand(3, 5)).requires_grad_()
    old_logp = logp.detach() + 0.05 * torch.randn(3, 5)
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 0, 0, 0], [1, 1, 1, 0, 0]])
    advantages = torch.tensor([0.7, -1.2, 0.4])
    loss, _ = policy_loss(logp, old_logp, advantages, mask, level="sequence", clip_low=10.0, clip_high=10.0,
                          aggregation="seq_mean")
    loss.backward()
    direct_logp = logp.detach().clone().requires_grad_()
    mean_log_ratio = ((direct_logp - old_logp) * mask).sum(-1) / mask.sum(-1)
    (-(advantages * torch.exp(mean_log_ratio)).mean()).backward()
    assert torch.allclose(logp.grad, direct_logp.grad, atol=1e-6)


def test_sequence_level_clips_whole_sequence():
    logp = torch.tensor([[0.0, 0.0]], requires_grad=True)
    old_logp = torch.tensor([[-0.5, -0.5]])  # s = exp(0.5) = 1.6487 > 1.28 with A > 0
    loss, metrics = policy_loss(logp, old_logp, torch.tensor([2.0]), torch.ones(1, 2), level="sequence")
    assert loss.item() == pytest.approx(-1.28 * 2.0)
    assert metrics["clip_frac_high"] == 1.0
    loss.backward()
    assert torch.equal(logp.grad, torch.zeros(1, 2))


def test_token_clipping_sides_for_positive_and_negative_advantages():
    # One token per row; ratios 1.5, 0.5, 0.5, 1.5 with A = +1, +1, -1, -1; clip range [0.8, 1.28].
    ratios = torch.tensor([[1.5], [0.5], [0.5], [1.5]])
    old_logp = torch.full((4, 1), -1.0)
    logp = (old_logp + ratios.log()).requires_grad_()
    advantages = torch.tensor([1.0, 1.0, -1.0, -1.0])
    # row 0: A>0, r=1.5: min(1.5, 1.28) = 1.28 -> loss -1.28, clipped HIGH, no gradient
    # row 1: A>0, r=0.5: min(0.5, 0.80) = 0.50 -> loss -0.50, unclipped, dloss/dlogp = -r A = -0.5
    # row 2: A<0, r=0.5: min(-0.5, -0.8) = -0.8 -> loss 0.80, clipped LOW, no gradient
    # row 3: A<0, r=1.5: min(-1.5, -1.28) = -1.5 -> loss 1.50, unclipped, dloss/dlogp = -r A = 1.5
    # token_mean: (-1.28 - 0.5 + 0.8 + 1.5) / 4 = 0.13; gradients divided by 4.
    loss, metrics = policy_loss(logp, old_logp, advantages, torch.ones(4, 1))
    assert loss.item() == pytest.approx(0.13, abs=1e-6)
    loss.backward()
    assert torch.allclose(logp.grad, torch.tensor([[0.0], [-0.125], [0.0], [0.375]]), atol=1e-6)
    assert metrics == pytest.approx(
        {"clip_frac_low": 0.25, "clip_frac_high": 0.25, "clip_frac": 0.5, "ratio_mean": 1.0, "ratio_max": 1.5,
         "ratio_min": 0.5}
    )


def _on_policy_batch():
    """Ratio 1 everywhere so the per-token loss is -A; row 2 is a masked-out unparsable rollout."""
    nan = float("nan")
    logp = torch.tensor([[-1.0, -1.0, -1.0], [-1.0, nan, nan], [nan, nan, nan]])
    mask = torch.tensor([[1, 1, 1], [1, 0, 0], [0, 0, 0]])
    return logp, logp.clone(), torch.tensor([1.0, -2.0, 5.0]), mask


def test_aggregations_by_hand():
    logp, old_logp, advantages, mask = _on_policy_batch()
    # per-token loss: row 0: -1, -1, -1; row 1: +2; row 2 has no response token.
    token_mean, _ = policy_loss(logp, old_logp, advantages, mask, aggregation="token_mean")
    assert token_mean.item() == pytest.approx((-3 + 2) / 4)  # = -0.25
    seq_mean, _ = policy_loss(logp, old_logp, advantages, mask, aggregation="seq_mean")
    assert seq_mean.item() == pytest.approx((-3 / 3 + 2 / 1) / 2)  # = 0.5
    seq_sum, _ = policy_loss(logp, old_logp, advantages, mask, aggregation="seq_sum", max_tokens=4)
    assert seq_sum.item() == pytest.approx((-3 / 4 + 2 / 4) / 2)  # = -0.125
    with pytest.raises(ValueError, match="max_tokens"):
        policy_loss(logp, old_logp, advantages, mask, aggregation="seq_sum")
    with pytest.raises(ValueError, match="'batch_mean'"):
        policy_loss(logp, old_logp, advantages, mask, aggregation="batch_mean")


def test_weights_multiply_per_token_loss_and_are_detached():
    logp, old_logp, advantages, mask = _on_policy_batch()
    nan = float("nan")
    weights = torch.tensor([[2.0, 0.0, 1.0], [0.5, nan, nan], [nan, nan, nan]], requires_grad=True)
    # token_mean: (-1*2 - 1*0 - 1*1 + 2*0.5) / 4 = -0.5 (weights on masked positions unused).
    logp.requires_grad_()
    loss, _ = policy_loss(logp, old_logp, advantages, mask, weights=weights)
    assert loss.item() == pytest.approx(-0.5)
    loss.backward()
    assert weights.grad is None
    # d/dlogp of w_t * (-r_t A) at r = 1: -w_t A / 4 -> row 0: -0.5, 0, -0.25; row 1: 2*0.5/4.
    expected = torch.tensor([[-0.5, 0.0, -0.25], [0.25, 0.0, 0.0], [0.0, 0.0, 0.0]])
    assert torch.allclose(logp.grad, expected)


def test_unknown_level_is_refused():
    logp, old_logp, advantages, mask = _on_policy_batch()
    with pytest.raises(ValueError, match="'tokens'"):
        policy_loss(logp, old_logp, advantages, mask, level="tokens")


def test_extreme_log_ratio_gives_finite_loss_and_gradients():
    # Token log-ratio 94: exp overflows float32. At A = 0 the loss was inf * 0 = NaN; with A > 0
    # the term is clipped, and its zero gradient was 0 * inf = NaN.
    for level in ("token", "sequence"):
        for advantage in (0.0, 1.0, -1.0):
            logp = torch.tensor([[-0.1, -1.0]], requires_grad=True)
            old_logp = torch.tensor([[-94.1, -1.0]])
            loss, metrics = policy_loss(logp, old_logp, torch.tensor([advantage]), torch.ones(1, 2), level=level)
            loss.backward()
            assert math.isfinite(loss.item()) and torch.isfinite(logp.grad).all(), (level, advantage)
            assert all(math.isfinite(v) for v in metrics.values())


def test_sequence_level_clip_fraction_counts_sequences():
    # An 8-token sequence clipped high and a 2-token one inside the range: 1 of 2 sequences is
    # clipped (0.5), not 8 of 10 tokens (0.8).
    mask = torch.tensor([[1.0] * 8, [1.0] * 2 + [0.0] * 6])
    old_logp = torch.full((2, 8), -1.0)
    logp = old_logp + torch.tensor([[0.01], [0.0]])  # s = e^0.01 = 1.01005 > 1 + 4e-4
    _, metrics = policy_loss(logp, old_logp, torch.tensor([1.0, 1.0]), mask, level="sequence", clip_low=3e-4,
                             clip_high=4e-4, aggregation="seq_mean")
    assert metrics["clip_frac_high"] == 0.5 and metrics["clip_frac"] == 0.5


def test_gspo_config_defaults_to_seq_mean_and_its_own_clip_range():
    from passband.training.rl.config import RLAlgoConfig

    token, sequence = RLAlgoConfig(), RLAlgoConfig(level="sequence")
    assert (token.aggregation, token.clip_low, token.clip_high) == ("token_mean", 0.2, 0.28)
    assert (sequence.aggregation, sequence.clip_low, sequence.clip_high) == ("seq_mean", 3e-4, 4e-4)
    with pytest.warns(UserWarning, match="not GSPO"):
        RLAlgoConfig(level="sequence", aggregation="token_mean")
    with warnings.catch_warnings():  # a wide sequence-level clip can bind (scripts/sequence_clip.py): no warning
        warnings.simplefilter("error")
        assert RLAlgoConfig(level="sequence", clip_low=0.28, clip_high=0.40).clip_high == 0.40
    # Under seq_mean each sequence gets the same gradient mass whatever its length: at ratio 1
    # with A = 1, sum_t |dloss/dlogp_t| is 1/2 for the 8-token and for the 2-token sequence
    # (token_mean would give 8/10 and 2/10).
    mask = torch.tensor([[1.0] * 8, [1.0] * 2 + [0.0] * 6])
    logp = torch.full((2, 8), -1.0, requires_grad=True)
    loss, _ = policy_loss(logp, logp.detach(), torch.tensor([1.0, 1.0]), mask, level="sequence",
                          clip_low=sequence.clip_low, clip_high=sequence.clip_high, aggregation=sequence.aggregation)
    loss.backward()
    assert torch.allclose(logp.grad.abs().sum(dim=-1), torch.tensor([0.5, 0.5]))
