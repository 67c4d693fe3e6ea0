"""Clip-Cov and KL-Cov: keep entropy alive by acting on high-covariance tokens (docs/recipe.md section 7).

Cui et al., "The Entropy Mechanism of Reinforcement Learning for Reasoning Language Models":
the entropy change of a step follows the covariance between a token's log-prob and its
advantage. Per response token, over the whole batch:
  cov_t = (logp_t - mean logp) * (A_t - mean A),
with both means taken over all response tokens of the batch (the reference implementation's
centring) and logp detached.
- Clip-Cov: among tokens with cov in the open interval (cov_lower, cov_upper), not already
  clipped by the surrogate, pick max(1, int(fraction * num_response_tokens)) at random and
  detach their gradient. `clip_cov_keep_mask` returns the 0/1 mask to multiply into the
  policy loss's `weights`.
- KL-Cov: pick the top max(1, int(fraction * num_response_tokens)) tokens by cov
  (`kl_cov_selection`) and add coef * |logp - old_logp| to their loss (`kl_cov_penalty`, a
  per-token term `[B, T]` to aggregate like the policy loss, `masked_aggregate`, and add). As in
  the paper and its reference code, the surrogate under KL-Cov is the UNCLIPPED r * A on every
  token: the penalty takes the place of the trust region. `KL_COV_CLIP` is the clip range that
  says so to `policy_loss`.
Defaults are the paper's: fraction 2e-4, cov bounds (1, 5), KL coefficient 1.
"""

import math

import torch
from torch import Tensor

from passband.training.rl.algebra.logratio import exp_ratio

# (clip_low, clip_high) for `policy_loss` under KL-Cov: the ratio is clamped to [0, inf), which
# no ratio exp(...) > 0 ever leaves, so nothing is clipped.
KL_COV_CLIP = (1.0, math.inf)


def token_covariance(logp: Tensor, advantages: Tensor, mask: Tensor) -> Tensor:
    """cov_t `[B, T]` (detached) as in the module docstring; 0 at masked positions."""
    is_response = mask > 0
    if advantages.dim() == 1:
        advantages = advantages[:, None].expand_as(logp)
    zeros = torch.zeros_like(logp)
    logp = torch.where(is_response, logp.detach(), zeros)
    advantages = torch.where(is_response, advantages.detach().to(logp.dtype), zeros)
    num_tokens = is_response.sum().clamp(min=1)
    centred_logp = logp - logp.sum() / num_tokens
    centred_advantages = advantages - advantages.sum() / num_tokens
    return torch.where(is_response, centred_logp * centred_advantages, zeros)


def _num_selected(fraction: float, num_tokens: int) -> int:
    """max(1, int(fraction * num_tokens)) as in the reference; 0 when fraction is 0."""
    if not 0.0 <= fraction <= 1.0:
        raise ValueError(f"covariance fraction must be in [0, 1], got {fraction}")
    if fraction == 0.0 or num_tokens == 0:
        return 0
    return max(1, int(fraction * num_tokens))


def clip_cov_keep_mask(
    logp: Tensor,
    old_logp: Tensor,
    advantages: Tensor,
    mask: Tensor,
    fraction: float = 2e-4,
    cov_lower: float = 1.0,
    cov_upper: float = 5.0,
    clip_low: float = 0.2,
    clip_high: float = 0.28,
    generator: torch.Generator | None = None,
) -> Tensor:
    """0/1 float `[B, T]`: 0 on the tokens Clip-Cov detaches, 1 elsewhere.

    Candidates: response tokens with cov_lower < cov_t < cov_upper whose token-level surrogate
    is not already clipped (ratio exp(logp - old_logp) above 1 + clip_high with A > 0, or below
    1 - clip_low with A < 0). `generator` makes the random choice reproducible.
    """
    if advantages.dim() == 1:
        advantages = advantages[:, None].expand_as(logp)
    is_response = mask > 0
    cov = token_covariance(logp, advantages, mask)
    ratio = exp_ratio(torch.where(is_response, logp.detach() - old_logp.detach(), torch.zeros_like(logp)))
    already_clipped = ((advantages > 0) & (ratio > 1.0 + clip_high)) | ((advantages < 0) & (ratio < 1.0 - clip_low))
    candidates = is_response & ~already_clipped & (cov > cov_lower) & (cov < cov_upper)
    candidate_idx = candidates.reshape(-1).nonzero().squeeze(-1)  # flat indices
    num_selected = min(_num_selected(fraction, int(is_response.sum())), candidate_idx.numel())
    order = torch.randperm(candidate_idx.numel(), generator=generator, device="cpu").to(candidate_idx.device)
    keep = torch.ones(logp.numel(), dtype=logp.dtype, device=logp.device)
    keep[candidate_idx[order[:num_selected]]] = 0.0
    return keep.reshape(logp.shape)


def kl_cov_selection(logp: Tensor, advantages: Tensor, mask: Tensor, fraction: float = 2e-4) -> Tensor:
    """0/1 float `[B, T]`: the top max(1, int(fraction * N)) of the N response tokens by cov.

    The centring of cov is over the whole batch, so choose over the whole batch (not per
    micro-batch, which would make the choice depend on the micro-batch size). Ties in cov are
    broken by torch.topk.
    """
    is_response = mask > 0
    cov = torch.where(is_response, token_covariance(logp, advantages, mask), torch.full_like(logp, -torch.inf))
    num_selected = _num_selected(fraction, int(is_response.sum()))
    selected = torch.zeros(logp.numel(), dtype=logp.dtype, device=logp.device)
    selected[torch.topk(cov.reshape(-1), num_selected).indices] = 1.0
    return selected.reshape(logp.shape)


def kl_cov_penalty(logp: Tensor, old_logp: Tensor, selected: Tensor, mask: Tensor, coef: float = 1.0) -> Tensor:
    """Per-token penalty `[B, T]` = coef * |logp - old_logp| where `selected` (0/1 `[B, T]`, from
    `kl_cov_selection`) is 1, 0 elsewhere; gradient flows through `logp`, never from padding."""
    log_ratio = torch.where(mask > 0, logp - old_logp.detach(), torch.zeros_like(logp))
    return coef * log_ratio.abs() * selected.detach()
