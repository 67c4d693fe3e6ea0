"""KL regularization toward a reference policy, by estimator and placement (RECIPE section 6).

Per token, with l = logp - ref_logp (log pi_theta - log pi_ref) and r = exp(-l) = pi_ref/pi_theta:
  k1 = l,   k2 = l^2 / 2,   k3 = r - 1 - log r = exp(-l) - 1 + l,
  mse = Huber(l) = l^2/2 if |l| <= 1 else |l| - 1/2.
`mse` is the bounded alternative: k2 whose gradient l * grad logp has its coefficient l clamped
to [-1, 1], so one token far from the reference cannot dominate the update.

Placements, and why only some pairs are allowed (gradients under y ~ pi_theta):
- "reward": k1 per sequence, detached, times a coefficient, subtracted from the reward. Its
  score-function gradient E[l grad log pi] is the exact reverse-KL gradient. The policy ratio and
  clipping of the surrogate then apply to it too, which handles off-policy updates.
- "loss" with k2: grad k2 = l grad log pi, the same reverse-KL gradient on-policy.
- "loss" with mse: the bounded version of k2.
- "loss" with k1: E[grad l] = E[grad log pi] = sum_y grad pi(y) = 0: it regularizes nothing
  and adds noise. Refused.
- "loss" with k3: E[grad k3] = -E_pi[(pi_ref/pi) grad log pi] = grad KL(pi_ref || pi), the
  FORWARD KL: weak when pi_theta >> pi_ref, explosive when pi_theta << pi_ref. Allowed with a
  warning (it is the common GRPO choice).
A loss-form KL is an expectation under pi_theta, but the tokens come from the behaviour policy
(pi_old after S > 1 steps, or the rollout engine): `kl_loss` takes `behaviour_logp` and weights
each token by pi_theta/pi_behaviour (detached), a per-token approximation of the sequence weight.
"""

import warnings

import torch
from torch import Tensor

from passband.training.rl.objectives import masked_aggregate

KL_ESTIMATORS = ("k1", "k2", "k3", "mse")
KL_PLACEMENTS = ("reward", "loss")


def kl_estimate(logp: Tensor, ref_logp: Tensor, estimator: str = "k1") -> Tensor:
    """Per-token KL estimate `[B, T]` (see module docstring); gradient flows through `logp`."""
    log_ratio = logp - ref_logp
    if estimator == "k1":
        return log_ratio
    if estimator == "k2":
        return 0.5 * log_ratio**2
    if estimator == "k3":
        return torch.exp(-log_ratio) - 1.0 + log_ratio
    if estimator == "mse":
        return torch.nn.functional.huber_loss(log_ratio, torch.zeros_like(log_ratio), reduction="none", delta=1.0)
    raise ValueError(f"unknown KL estimator {estimator!r}; expected one of {KL_ESTIMATORS}")


def check_kl_placement(placement: str, estimator: str) -> None:
    """Refuse the unprincipled pairs with a ValueError saying why; warn on k3 as a loss.

    Call it when a config is built, so a bad setting fails before any rollout.
    """
    if placement == "reward":
        if estimator != "k1":
            raise ValueError(
                f"KL in the reward must use estimator 'k1' (got {estimator!r}): the score-function "
                "gradient of k1 is the reverse-KL gradient; use placement='loss' for k2/k3/mse"
            )
        return
    if placement != "loss":
        raise ValueError(f"unknown KL placement {placement!r}; expected one of {KL_PLACEMENTS}")
    if estimator == "k1":
        raise ValueError(
            "KL estimator 'k1' as a loss has zero expected gradient (E[grad log pi] = 0), so it "
            "regularizes nothing and only adds noise; use 'k2' as a loss or 'k1' in the reward"
        )
    if estimator == "k3":
        warnings.warn(
            "KL estimator 'k3' as a loss follows the gradient of the forward KL(pi_ref || pi): weak "
            "when pi >> pi_ref and explosive when pi << pi_ref; 'k2' gives the reverse-KL gradient",
            stacklevel=2,
        )
    elif estimator not in KL_ESTIMATORS:
        raise ValueError(f"unknown KL estimator {estimator!r}; expected one of {KL_ESTIMATORS}")


def kl_reward_penalty(logp: Tensor, ref_logp: Tensor, mask: Tensor, coef: float) -> Tensor:
    """Per-sequence penalty `[B]` = coef * sum over response tokens of k1, detached.

    Subtract it from the rewards before `group_advantages`: reward_i - kl_reward_penalty(...)_i.
    """
    per_token = torch.where(mask > 0, logp.detach() - ref_logp.detach(), torch.zeros_like(logp))
    return coef * per_token.sum(dim=-1)


def kl_loss(
    logp: Tensor,
    ref_logp: Tensor,
    mask: Tensor,
    coef: float,
    estimator: str = "k2",
    behaviour_logp: Tensor | None = None,
    aggregation: str = "token_mean",
    max_tokens: int | None = None,
) -> Tensor:
    """Scalar loss term coef * aggregate(w_t * k(logp_t, ref_logp_t)), to add to the policy loss.

    w_t = exp(logp_t - behaviour_logp_t), detached, when `behaviour_logp` is given (off-policy:
    S > 1 or a mismatch correction is on); 1 otherwise. Use the policy loss's aggregation.
    Raises ValueError for k1 (see `check_kl_placement`); warns for k3.
    """
    check_kl_placement("loss", estimator)
    is_response = mask > 0
    zeros = torch.zeros_like(logp)
    # Zero the padding BEFORE the estimator: a NaN there would turn its backward (0 * NaN) into
    # NaN gradients even though the aggregate never reads those positions.
    logp = torch.where(is_response, logp, zeros)
    per_token = kl_estimate(logp, torch.where(is_response, ref_logp.detach(), zeros), estimator)  # [B, T]
    if behaviour_logp is not None:
        log_weight = torch.where(is_response, logp.detach() - behaviour_logp, zeros)
        per_token = per_token * torch.exp(log_weight)
    return coef * masked_aggregate(per_token, mask, aggregation, max_tokens)
