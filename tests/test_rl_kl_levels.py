"""Sequence-level vs per-token KL as a loss, and the KL loss under the rollout correction.

Exact enumeration: a tabular softmax policy over responses of T tokens from a vocabulary of V
(one logit row per prefix), so every sequence's probability is known. The expected gradient of
a per-sample surrogate f is sum_y p(y) grad f(y) (p detached: the sampling distribution), and
the target is the autograd gradient of the sequence reverse KL(pi_theta || pi_ref) =
sum_y p(y) (log p(y) - log ref(y)).
"""

import itertools
import math

import pytest
import torch

from passband.training.rl.algebra.kl import kl_loss

VOCAB = 3


def _tabular(length: int, seed: int) -> dict[tuple[int, ...], torch.Tensor]:
    """Logits `[V]` (2 x standard normal: peaked enough that the two KL forms differ clearly) for every
    prefix of length 0..length-1."""
    gen = torch.Generator().manual_seed(seed)
    return {prefix: 2.0 * torch.randn(VOCAB, generator=gen, dtype=torch.float64)
            for n in range(length) for prefix in itertools.product(range(VOCAB), repeat=n)}


def _token_logps(table, seq) -> torch.Tensor:
    """[T] log-probs of each token of `seq` given its prefix."""
    return torch.stack([torch.log_softmax(table[seq[:t]], -1)[seq[t]] for t in range(len(seq))])


def _setup(length: int):
    policy = {k: v.clone().requires_grad_() for k, v in _tabular(length, seed=2).items()}
    reference = _tabular(length, seed=3)
    sequences = list(itertools.product(range(VOCAB), repeat=length))
    return policy, reference, sequences


def _grad(policy, loss) -> torch.Tensor:
    params = list(policy.values())
    return torch.cat([g.reshape(-1) for g in torch.autograd.grad(loss, params)])


def _true_kl_grad(policy, reference, sequences) -> torch.Tensor:
    kl = sum(_token_logps(policy, s).sum().exp() * (_token_logps(policy, s) - _token_logps(reference, s)).sum()
             for s in sequences)
    return _grad(policy, kl)


def _expected_grad(policy, reference, sequences, per_sample) -> torch.Tensor:
    """sum_y p(y) grad f(y) for f = per_sample(logp [1, T], ref_logp [1, T])."""
    total = 0.0
    for s in sequences:
        logp = _token_logps(policy, s)
        p = logp.sum().exp().detach()
        total = total + p * per_sample(logp[None], _token_logps(reference, s)[None])
    return _grad(policy, total)


def _cosine(a: torch.Tensor, b: torch.Tensor) -> float:
    return float(a @ b / (a.norm() * b.norm()))


@pytest.mark.parametrize("length", [2, 3])
def test_sequence_k2_and_k1_in_reward_give_the_sequence_kl_gradient_per_token_k2_does_not(length):
    policy, reference, sequences = _setup(length)
    true = _true_kl_grad(policy, reference, sequences)
    mask = torch.ones(1, length, dtype=torch.float64)
    # k1 in the reward: the score-function surrogate sg[L] * log p(y), L = sum_t l_t.
    k1_reward = _expected_grad(policy, reference, sequences,
                               lambda lp, rp: (lp - rp).sum().detach() * lp.sum())
    seq_k2 = _expected_grad(policy, reference, sequences,
                            lambda lp, rp: kl_loss(lp, rp, mask, 1.0, "k2", level="sequence"))
    token_k2 = _expected_grad(policy, reference, sequences,
                              lambda lp, rp: kl_loss(lp, rp, mask, 1.0, "k2", aggregation="seq_sum",
                                                     max_tokens=1, level="token"))
    assert torch.allclose(k1_reward, true, atol=1e-12, rtol=1e-9)
    assert torch.allclose(seq_k2, true, atol=1e-12, rtol=1e-9)
    # Per-token k2 drops the future terms l_t' grad log pi(y_t), t' > t: a different objective.
    # Measured with these seeds: cosine 0.682 at T=2 (relative error 0.73), 0.694 at T=3.
    cosine = _cosine(token_k2, true)
    assert cosine == pytest.approx({2: 0.682, 3: 0.694}[length], abs=1e-3)
    assert (token_k2 - true).norm() / true.norm() > 0.3
    # What it IS: the gradient of the conditional KLs at fixed prefixes,
    # sum_t sum_{y<t} p(y<t) grad KL(pi(.|y<t) || ref(.|y<t)), prefix probabilities detached.
    myopic = 0.0
    for prefix, logits in policy.items():
        p_prefix = _token_logps(policy, prefix).sum().exp().detach() if prefix else torch.tensor(1.0)
        log_pi, log_ref = torch.log_softmax(logits, -1), torch.log_softmax(reference[prefix], -1)
        myopic = myopic + p_prefix * (log_pi.exp() * (log_pi - log_ref)).sum()
    assert torch.allclose(token_k2, _grad(policy, myopic), atol=1e-12, rtol=1e-9)


def test_sequence_k2_off_policy_is_exact_with_the_sequence_weight():
    # Rollouts from a different behaviour policy mu: E_mu[w(y) grad k2(L)] with w = p/mu per
    # sequence (uncapped) is still the true gradient.
    length = 2
    policy, reference, sequences = _setup(length)
    behaviour = _tabular(length, seed=7)
    true = _true_kl_grad(policy, reference, sequences)
    mask = torch.ones(1, length, dtype=torch.float64)
    total = 0.0
    for s in sequences:
        mu_logp = _token_logps(behaviour, s)
        total = total + mu_logp.sum().exp() * kl_loss(_token_logps(policy, s)[None], _token_logps(reference, s)[None],
                                                      mask, 1.0, "k2", behaviour_logp=mu_logp[None], level="sequence")
    assert torch.allclose(_grad(policy, total), true, atol=1e-12, rtol=1e-9)


def test_kl_loss_applies_the_corrections_cap_and_rejection_keeping_the_normalizer():
    # Three rows, k2 per token, token_mean over 5 response tokens. Log weights logp - behaviour:
    # row 0: ln 3 (capped at C = 2), row 1: 0 (weight 1), row 2: 0 but rejected (keep 0).
    logp = torch.tensor([[-1.0, -1.0], [-0.5, -2.0], [-1.0, float("nan")]], requires_grad=True)
    ref_logp = torch.tensor([[-2.0, -1.5], [-0.5, -1.0], [-3.0, 0.0]])
    behaviour = logp.detach() - torch.tensor([[math.log(3.0)] * 2, [0.0, 0.0], [0.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0], [1.0, 1.0], [1.0, 0.0]])
    keep = torch.tensor([[1.0, 1.0], [1.0, 1.0], [0.0, 1.0]])
    loss = kl_loss(logp, ref_logp, mask, 0.5, "k2", behaviour_logp=behaviour, keep=keep, weight_cap=2.0)
    # k2: row 0: 0.5, 0.125; row 1: 0, 0.5; row 2: 2 (rejected). Weighted: 2*0.625 + 0.5 = 1.75,
    # over all 5 tokens (the rejected one stays in the normalizer): 0.5 * 1.75 / 5 = 0.175.
    assert loss.item() == pytest.approx(0.175, abs=1e-6)
    loss.backward()
    # d/dlogp of 0.5 * w * k2 / 5 = 0.1 * w * l: row 0: 0.1*2*1, 0.1*2*0.5; row 1: 0, 0.1*(-1); row 2: 0.
    assert torch.allclose(logp.grad, torch.tensor([[0.2, 0.1], [0.0, -0.1], [0.0, 0.0]]), atol=1e-6)
    uncapped = kl_loss(logp, ref_logp, mask, 0.5, "k2", behaviour_logp=behaviour)
    assert uncapped.item() == pytest.approx(0.5 * (3 * 0.625 + 0.5 + 2.0) / 5, abs=1e-6)  # the old behaviour
    # Sequence level: one rejected token rejects its row; w_i = min(prod_t, C).
    # L = [1.5, -1.0, 2.0]; k2 = [1.125, 0.5, 2]; w = [min(9, 2), 1, 0]; mean over 3 rows.
    seq = kl_loss(logp, ref_logp, mask, 0.5, "k2", behaviour_logp=behaviour, keep=keep, weight_cap=2.0,
                  level="sequence")
    assert seq.item() == pytest.approx(0.5 * (2 * 1.125 + 0.5) / 3, abs=1e-6)
    with pytest.raises(ValueError, match="level"):
        kl_loss(logp, ref_logp, mask, 0.5, "k2", level="batch")


@pytest.mark.parametrize("level", ["token", "sequence"])
@pytest.mark.parametrize("estimator", ["k2", "k3", "huber"])
def test_kl_loss_is_finite_for_extreme_log_ratios(level, estimator):
    # l = -94 (pi_theta << pi_ref: k3's exp(-l) overflowed) and a behaviour log-weight of +94.
    logp = torch.tensor([[-95.0, -1.0]], requires_grad=True)
    ref_logp = torch.tensor([[-1.0, -1.0]])
    behaviour = torch.tensor([[-189.0, -1.0]])
    with pytest.warns(UserWarning) if estimator == "k3" else _no_warning():
        loss = kl_loss(logp, ref_logp, torch.ones(1, 2), 0.1, estimator, behaviour_logp=behaviour, level=level)
    loss.backward()
    assert math.isfinite(loss.item()) and torch.isfinite(logp.grad).all()


def _no_warning():
    import contextlib

    return contextlib.nullcontext()
