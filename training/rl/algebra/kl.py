"""KL regularization toward a reference policy, by estimator, placement and level (docs/recipe.md section 6).

Per token, with l_t = logp_t - ref_logp_t (log pi_theta - log pi_ref) and r = exp(-l) = pi_ref/pi_theta:
  k1 = l,   k2 = l^2 / 2,   k3 = r - 1 - log r = exp(-l) - 1 + l,
  huber = Huber_1(l) = l^2/2 if |l| <= 1 else |l| - 1/2.
`huber` is the bounded alternative: k2 whose gradient l * grad logp has its coefficient l clamped
to [-1, 1], so one token far from the reference cannot dominate the update. (It was called
`mse`; it is a Huber loss on the LOG-ratio, not the probability-space MSE some recipes name, so
the old name is refused with a ValueError that gives the new one.)

Placements, and why only some pairs are allowed (gradients under y ~ pi_theta):
- "reward": k1 per sequence, detached, times a coefficient, subtracted from the reward. Its
  score-function gradient E[L grad log pi(y)], L = sum_t l_t, is the exact gradient of the
  sequence reverse KL(pi_theta || pi_ref). The policy ratio and clipping of the surrogate then
  apply to it too, which handles off-policy updates.
- "loss" with k1: E[grad l] = E[grad log pi] = sum_y grad pi(y) = 0: it regularizes nothing
  and adds noise. Refused.
- "loss" with k3: E[grad k3] = -E_pi[(pi_ref/pi) grad log pi] = grad KL(pi_ref || pi), the
  FORWARD KL: weak when pi_theta >> pi_ref, explosive when pi_theta << pi_ref. Allowed with a
  warning (it is the common GRPO choice).
- "loss" with k2 (or huber, its bounded form), at one of two levels (`level`):
  - "sequence": the whole response is one action, L_i = sum_t l_t and the loss is
    k2(L_i) = L_i^2 / 2 per sequence, averaged over sequences. grad k2(L) = L grad log pi(y):
    exactly k1-in-the-reward's gradient, so E[grad] = grad KL_seq(pi_theta || pi_ref).
  - "token": sum_t k2(l_t) per sequence (aggregated like the policy loss). Its expected
    gradient E[sum_t l_t grad log pi(y_t | y_<t)] = sum_t E_{y_<t}[grad_theta KL(pi(.|y_<t) ||
    pi_ref(.|y_<t))] with the prefix distribution held fixed: it pulls each next-token
    distribution toward the reference AT THE VISITED PREFIXES, but drops the terms
    l_t' grad log pi(y_t), t' > t, through which an early token changes the KL of everything
    after it (the true gradient is E[sum_t (sum_{t' >= t} l_t') grad log pi(y_t)]). It is a
    different, myopic objective, not an estimator of grad KL_seq: on 2-token responses over a
    3-token vocabulary its expected gradient has cosine ~0.6 with the true one
    (tests/test_rl_kl.py enumerates every sequence). It is the default for continuity and
    because its per-token terms have far lower variance than L^2 on long responses.
Off-policy: a loss-form KL is an expectation under pi_theta, but the tokens come from the rollout
engine, which differs from pi_theta after S > 1 steps and, through the training-inference
mismatch, at the first step too. `kl_loss` takes `behaviour_logp` and weights each term by
w = sg[pi_theta / pi_behaviour]: per token at level "token" (a per-token approximation of the
sequence weight), per sequence (prod_t) at level "sequence" (exact importance sampling). Like
the policy loss, w is bounded by the rollout correction: capped at `weight_cap` and multiplied
by the correction's 0/1 `keep` factor, so a sequence that seq-MIS dropped gets no KL gradient.
"""

import math

import torch
from torch import Tensor

from passband.training.rl.algebra.logratio import MAX_LOG_RATIO, exp_ratio
from passband.training.rl.algebra.kl_rules import KL_ESTIMATORS, KL_LEVELS, check_kl_placement, refuse_renamed_estimator
from passband.training.rl.algebra.objectives import masked_aggregate




def kl_from_log_ratio(log_ratio: Tensor, estimator: str = "k1") -> Tensor:
    """The estimator applied elementwise to log-ratios l (per token `[B, T]` or per sequence `[B]`)."""
    refuse_renamed_estimator(estimator)
    if estimator == "k1":
        return log_ratio
    if estimator == "k2":
        return 0.5 * log_ratio**2
    if estimator == "k3":
        # exp(-l) overflows for l < -88 (pi_theta << pi_ref): clamp inside the exp only.
        return exp_ratio(-log_ratio) - 1.0 + log_ratio
    if estimator == "huber":
        return torch.nn.functional.huber_loss(log_ratio, torch.zeros_like(log_ratio), reduction="none", delta=1.0)
    raise ValueError(f"unknown KL estimator {estimator!r}; expected one of {KL_ESTIMATORS}")


def kl_estimate(logp: Tensor, ref_logp: Tensor, estimator: str = "k1") -> Tensor:
    """Per-token KL estimate `[B, T]` (see module docstring); gradient flows through `logp`."""
    return kl_from_log_ratio(logp - ref_logp, estimator)




def kl_reward_penalty(logp: Tensor, ref_logp: Tensor, mask: Tensor, coef: float) -> Tensor:
    """Per-sequence penalty `[B]` = coef * sum over response tokens of k1, detached.

    The RL update subtracts it, centred in its group, from the verifier's advantages
    (`training.rl.update.advantages_with_kl`), so the reward std does not rescale it.
    """
    per_token = torch.where(mask > 0, logp.detach() - ref_logp.detach(), torch.zeros_like(logp))
    return coef * per_token.sum(dim=-1)


def _off_policy_weight(log_weight: Tensor, keep: Tensor | None, weight_cap: float | None) -> Tensor:
    """sg[keep * min(exp(log_weight), weight_cap)], any shape; exp clamped by `exp_ratio`."""
    log_cap = math.log(weight_cap) if weight_cap is not None else MAX_LOG_RATIO
    weight = exp_ratio(log_weight.detach().clamp(max=log_cap))
    return weight if keep is None else weight * keep.detach()


def kl_loss(
    logp: Tensor,
    ref_logp: Tensor,
    mask: Tensor,
    coef: float,
    estimator: str = "k2",
    behaviour_logp: Tensor | None = None,
    aggregation: str = "token_mean",
    max_tokens: int | None = None,
    level: str = "token",
    keep: Tensor | None = None,
    weight_cap: float | None = None,
) -> Tensor:
    """Scalar KL loss term to add to the policy loss (see the module docstring for the levels).

    logp: `[B, T]` trainer log-probs (with gradient); ref_logp, behaviour_logp: `[B, T]`;
    mask: 0/1 `[B, T]`; keep: optional 0/1 `[B, T]` (the rollout correction's "weight > 0").
    level "token":    coef * aggregate_t(w_t * k(l_t)), w_t = keep_t * min(pi_theta_t/pi_b_t, cap),
                      aggregated like the policy loss (`aggregation`, `max_tokens`).
    level "sequence": coef * mean_i(w_i * k(L_i)), L_i = sum_t l_t, w_i = prod_t keep_t *
                      min(prod_t pi_theta_t/pi_b_t, cap), mean over sequences with response
                      tokens (the aggregation does not apply: one action per sequence).
    w = 1 when `behaviour_logp` is None (exact samples of pi_theta); `weight_cap` None: uncapped
    (apart from the e^20 overflow guard). All weights are detached.
    Raises ValueError for k1 (see `check_kl_placement`) or an unknown level; warns for k3.
    """
    check_kl_placement("loss", estimator)
    if level not in KL_LEVELS:
        raise ValueError(f"unknown KL level {level!r}; expected one of {KL_LEVELS}")
    is_response = mask > 0
    zeros = torch.zeros_like(logp)
    # Zero the padding BEFORE the estimator: a NaN there would turn its backward (0 * NaN) into
    # NaN gradients even though the aggregate never reads those positions.
    logp = torch.where(is_response, logp, zeros)
    log_ratio = logp - torch.where(is_response, ref_logp.detach(), zeros)  # [B, T], 0 on padding
    log_weight = zeros if behaviour_logp is None else torch.where(is_response, logp.detach() - behaviour_logp, zeros)
    if keep is not None:
        keep = torch.where(is_response, keep, torch.ones_like(keep))  # padding never rejects a row
    if level == "token":
        per_token = kl_from_log_ratio(log_ratio, estimator) * _off_policy_weight(log_weight, keep, weight_cap)
        return coef * masked_aggregate(per_token, mask, aggregation, max_tokens)
    has_tokens = is_response.any(dim=-1)  # [B]
    seq_keep = None if keep is None else keep.amin(dim=-1)  # [B]: one rejected token rejects the row
    per_sequence = kl_from_log_ratio(log_ratio.sum(dim=-1), estimator) * _off_policy_weight(
        log_weight.sum(dim=-1), seq_keep, weight_cap
    )  # [B]
    per_sequence = torch.where(has_tokens, per_sequence, torch.zeros_like(per_sequence))
    return coef * per_sequence.sum() / has_tokens.sum().clamp(min=1)
