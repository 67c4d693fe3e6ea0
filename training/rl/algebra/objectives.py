"""The clipped policy-gradient surrogate (GRPO token level, GSPO sequence level) and loss aggregation.

Shapes: per-token tensors are `[B, T]` with a 0/1 `mask` over response tokens; advantages are
`[B]` (one per sequence) or `[B, T]`. Log-probs are natural-log probabilities of the sampled
tokens. Values at masked positions are never read (they may be -inf or NaN padding).
"""

import torch
from torch import Tensor

from passband.training.rl.algebra.logratio import exp_ratio

AGGREGATIONS = ("token_mean", "seq_mean", "seq_sum")


def masked_aggregate(
    per_token: Tensor, mask: Tensor, aggregation: str = "token_mean", max_tokens: int | None = None
) -> Tensor:
    """Reduce a per-token loss `[B, T]` to a scalar; the choice sets the length bias (docs/recipe.md section 4).

    - token_mean: sum over all response tokens of the batch / number of response tokens
      (long sequences weigh more, per token equally).
    - seq_mean: mean over tokens within each sequence, then mean over sequences (each sequence
      weighs the same; the tokens of short ones weigh more).
    - seq_sum: sum over tokens within each sequence divided by the fixed constant `max_tokens`
      (the response-length budget, Dr. GRPO), then mean over sequences: no length normalization
      that depends on the sample. `max_tokens` is required for it.
    Sequences without any response token (masked-out unparsable rollouts) are left out of the
    mean over sequences, as their tokens are left out of token_mean.
    """
    is_response = mask > 0
    values = torch.where(is_response, per_token, torch.zeros_like(per_token))
    num_tokens = is_response.sum(dim=-1).to(values.dtype)  # [B]
    num_sequences = (num_tokens > 0).sum().clamp(min=1)
    if aggregation == "token_mean":
        return values.sum() / num_tokens.sum().clamp(min=1)
    if aggregation == "seq_mean":
        return (values.sum(dim=-1) / num_tokens.clamp(min=1)).sum() / num_sequences
    if aggregation == "seq_sum":
        if max_tokens is None or max_tokens < 1:
            raise ValueError(f"aggregation='seq_sum' needs max_tokens >= 1 (the length budget), got {max_tokens}")
        return (values.sum(dim=-1) / max_tokens).sum() / num_sequences
    raise ValueError(f"unknown aggregation {aggregation!r}; expected one of {AGGREGATIONS}")


def policy_ratio(logp: Tensor, old_logp: Tensor, mask: Tensor, level: str = "token") -> Tensor:
    """Importance ratio pi_theta / pi_old per token, `[B, T]`, carrying the gradient of `logp`.

    level="token": r_t = exp(logp_t - old_logp_t) (GRPO/PPO).
    level="sequence": GSPO. The sequence ratio s_i = exp(mean_t (logp - old_logp)) over the
    response tokens of row i, written per token in the GSPO-token form
    s_i,t = sg[s_i] * pi_t / sg[pi_t]: its value is s_i at every token and its gradient is
    s_i * grad logp_t, so with seq_mean aggregation the gradient equals GSPO's
    s_i * (1/|y_i|) sum_t grad logp_t, and every token receives gradient.
    Masked positions carry no gradient (their value is 1 at token level, s_i at sequence level).
    Log-ratios are clamped at MAX_LOG_RATIO before the exp (`exp_ratio`), so the ratio is
    finite and a clipped or zero-advantage term never becomes inf * 0 = NaN.
    """
    is_response = mask > 0
    zeros = torch.zeros_like(logp)
    logp = torch.where(is_response, logp, zeros)
    log_ratio = logp - torch.where(is_response, old_logp, zeros)  # [B, T], 0 on padding
    if level == "token":
        return exp_ratio(log_ratio)
    if level == "sequence":
        num_tokens = is_response.sum(dim=-1, keepdim=True).clamp(min=1)  # [B, 1]
        seq_log_ratio = log_ratio.sum(dim=-1, keepdim=True) / num_tokens  # [B, 1]
        return exp_ratio(seq_log_ratio.detach()) * torch.exp(logp - logp.detach())
    raise ValueError(f"unknown level {level!r}; expected 'token' or 'sequence'")


def policy_loss(
    logp: Tensor,
    old_logp: Tensor,
    advantages: Tensor,
    mask: Tensor,
    level: str = "token",
    clip_low: float = 0.2,
    clip_high: float = 0.28,
    aggregation: str = "token_mean",
    weights: Tensor | None = None,
    max_tokens: int | None = None,
    with_metrics: bool = True,
    dual_clip: float | None = None,
) -> tuple[Tensor, dict[str, float]]:
    """Clipped surrogate to MINIMIZE: -min(r A, clip(r, 1-clip_low, 1+clip_high) A), aggregated.

    logp: `[B, T]` trainer log-probs (with gradient); old_logp: `[B, T]` behaviour log-probs
    (pi_old; no gradient is taken through it); advantages: `[B]` or `[B, T]`; mask: 0/1 `[B, T]`.
    weights: optional `[B, T]` per-token factors on the loss, detached here (the rollout
    mismatch correction from `importance_weights`, or Clip-Cov's keep mask).
    max_tokens: the constant of aggregation="seq_sum".

    Which side clips: for A > 0 the objective stops rewarding r above 1 + clip_high ("high");
    for A < 0 it stops rewarding r below 1 - clip_low ("low"). Clipped tokens get no gradient.
    dual_clip: c > 1 (Ye et al. 2020, dual-clip PPO): for A < 0 the objective is bounded below by c A,
    max(min(r A, clip(r) A), c A), so a token with r > c (pi_theta far above pi_old, which nothing else
    bounds for A < 0 but the exp clamp) adds loss c |A| and no gradient, instead of r |A| growing with r.
    Metrics (python floats): clip_frac_low, clip_frac_high and their sum clip_frac (the fraction
    of response tokens whose term is clipped for level="token"; of sequences with response
    tokens for level="sequence", where the clip acts on the whole sequence), ratio_mean,
    ratio_max, ratio_min (over response tokens, or over sequences for level="sequence"), and
    with a dual clip, clip_frac_dual, the fraction where it binds (not part of clip_frac).
    with_metrics=False: none (`{}`); they are read off the device, which a micro-batch's loss
    should not wait for.
    """
    if advantages.dim() == 1:
        advantages = advantages[:, None]  # [B, 1], broadcast over tokens
    advantages = advantages.detach().to(logp.dtype)
    ratio = policy_ratio(logp, old_logp.detach(), mask, level)  # [B, T]
    clipped_ratio = ratio.clamp(1.0 - clip_low, 1.0 + clip_high)
    per_token = -torch.minimum(ratio * advantages, clipped_ratio * advantages)
    dual_clipped = None
    if dual_clip is not None:
        dual_clipped = (advantages < 0) & (ratio > dual_clip)  # [B, T]; there -min(...) = -r A > -c A
        per_token = torch.where(dual_clipped, -dual_clip * advantages, per_token)
    if weights is not None:
        # Padding weights are never read, even in backward (0 * NaN would be NaN).
        per_token = per_token * torch.where(mask > 0, weights.detach(), torch.zeros_like(per_token))
    loss = masked_aggregate(per_token, mask, aggregation, max_tokens)
    if not with_metrics:
        return loss, {}

    with torch.no_grad():
        is_response = mask > 0
        clipped_high = is_response & (advantages > 0) & (ratio > 1.0 + clip_high)  # [B, T]
        clipped_low = is_response & (advantages < 0) & (ratio < 1.0 - clip_low)
        clipped_dual = is_response & (dual_clipped if dual_clipped is not None else torch.zeros_like(is_response))
        if level == "sequence":
            # One ratio per sequence: count sequences, so an 8-token sequence is not 8 clips.
            has_tokens = is_response.any(dim=-1)  # [B]
            ratio_values = ratio[:, 0][has_tokens]  # one value per sequence
            clipped_high, clipped_low, clipped_dual = (clipped.any(dim=-1) for clipped in
                                                       (clipped_high, clipped_low, clipped_dual))  # [B]
            count = has_tokens.sum().clamp(min=1)
        else:
            ratio_values = ratio[is_response]
            count = is_response.sum().clamp(min=1)
        if ratio_values.numel() == 0:
            ratio_values = torch.ones(1, dtype=ratio.dtype, device=ratio.device)
        metrics = {
            "clip_frac_low": clipped_low.sum() / count,
            "clip_frac_high": clipped_high.sum() / count,
            "clip_frac": (clipped_low.sum() + clipped_high.sum()) / count,
            "ratio_mean": ratio_values.mean(),
            "ratio_max": ratio_values.max(),
            "ratio_min": ratio_values.min(),
        }
        if dual_clip is not None:
            metrics["clip_frac_dual"] = clipped_dual.sum() / count
    # One read of the device for all of them (widened to float64, exactly: the floats are those of .item()).
    return loss, dict(zip(metrics, torch.stack([value.double() for value in metrics.values()]).tolist()))
