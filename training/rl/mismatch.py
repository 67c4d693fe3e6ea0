"""Training-inference mismatch: rollout-correction weights and metrics (RECIPE section 5).

rho_t = pi_trainer(y_t) / pi_rollout(y_t) = exp(trainer_logp_t - rollout_logp_t), per response
token; C = `threshold` >= 1. All weights are detached, `[B, T]`, 0 at masked positions.
Sequence products prod_t rho_t are formed in log space (sum of masked log-ratios), so a long
sequence whose product overflows float32 still gets its correct capped or zero weight.
"""

import math

import torch
from torch import Tensor

IMPORTANCE_MODES = ("none", "token_tis", "token_mis", "seq_tis", "seq_mis", "geo_mis")


def _log_ratios(trainer_logp: Tensor, rollout_logp: Tensor, mask: Tensor) -> Tensor:
    """log rho `[B, T]`, detached, 0 at masked positions (padding may hold -inf)."""
    is_response = mask > 0
    zeros = torch.zeros_like(trainer_logp)
    return torch.where(is_response, trainer_logp.detach() - rollout_logp.detach(), zeros)


def importance_weights(
    trainer_logp: Tensor, rollout_logp: Tensor, mask: Tensor, mode: str = "seq_mis", threshold: float = 2.0
) -> Tensor:
    """Per-token correction weights `[B, T]` (detached) for the policy loss's `weights`.

    none: 1 on response tokens.
    token_tis: min(rho_t, C).
    token_mis: rho_t if 1/C <= rho_t <= C else 0 (IcePop-style token masking).
    seq_tis: min(prod_t rho_t, C), one value per row.
    seq_mis: prod_t rho_t if it is <= C else 0, one value per row (the default, C=2).
    geo_mis: geometric-mean rejection (Geo-RS): a row is kept if exp(mean_t log rho_t) lies in
      [1/C, C], else dropped. A kept row gets weight 1 on every response token: the full product
      is what vanishes or explodes with length, which this mode exists to avoid, so it only
      rejects and does not reweight.
    """
    if mode not in IMPORTANCE_MODES:
        raise ValueError(f"unknown importance-weight mode {mode!r}; expected one of {IMPORTANCE_MODES}")
    if mode != "none" and threshold < 1.0:
        raise ValueError(f"importance-weight threshold C must be >= 1 (the range is [1/C, C]), got {threshold}")
    is_response = (mask > 0).to(trainer_logp.dtype)
    log_rho = _log_ratios(trainer_logp, rollout_logp, mask)  # [B, T]
    log_c = math.log(threshold) if mode != "none" else 0.0
    if mode == "none":
        return is_response
    if mode == "token_tis":
        return torch.exp(log_rho.clamp(max=log_c)) * is_response
    if mode == "token_mis":
        kept = log_rho.abs() <= log_c
        return torch.exp(log_rho) * kept * is_response
    seq_log_rho = log_rho.sum(dim=-1, keepdim=True)  # [B, 1], log prod_t rho_t
    if mode == "seq_tis":
        return torch.exp(seq_log_rho.clamp(max=log_c)) * is_response
    if mode == "seq_mis":
        kept = seq_log_rho <= log_c
        # Clamp before exp so a rejected row is exp(log C) * 0, never inf * 0 = NaN.
        return torch.exp(seq_log_rho.clamp(max=log_c)) * kept * is_response
    # geo_mis
    num_tokens = is_response.sum(dim=-1, keepdim=True).clamp(min=1)
    kept = (seq_log_rho / num_tokens).abs() <= log_c
    return kept * is_response


def mismatch_stats(trainer_logp: Tensor, rollout_logp: Tensor, mask: Tensor, weights: Tensor) -> dict[str, float]:
    """Metrics of a correction: masked_token_frac (response tokens with weight 0),
    masked_seq_frac (sequences with response tokens whose weights are all 0), ratio_max and
    ratio_mean of rho_t over response tokens, and weight_mean over response tokens."""
    is_response = mask > 0
    rho = torch.exp(_log_ratios(trainer_logp, rollout_logp, mask))[is_response]
    response_weights = weights.detach()[is_response]
    has_tokens = is_response.any(dim=-1)
    seq_dropped = ((weights.detach() == 0) | ~is_response).all(dim=-1) & has_tokens
    num_tokens = max(int(is_response.sum()), 1)
    num_sequences = max(int(has_tokens.sum()), 1)
    return {
        "masked_token_frac": float((response_weights == 0).sum()) / num_tokens,
        "masked_seq_frac": float(seq_dropped.sum()) / num_sequences,
        "ratio_max": float(rho.max()) if rho.numel() else 1.0,
        "ratio_mean": float(rho.mean()) if rho.numel() else 1.0,
        "weight_mean": float(response_weights.mean()) if response_weights.numel() else 1.0,
    }


def mismatch_kl(trainer_logp: Tensor, rollout_logp: Tensor, mask: Tensor) -> float:
    """vllm_kl: mean over response tokens of exp(d) - d - 1, d = trainer_logp - rollout_logp.

    Healthy values are ~1e-3 or below; spikes precede collapse (RECIPE section 5).
    """
    is_response = mask > 0
    d = _log_ratios(trainer_logp, rollout_logp, mask)[is_response]
    if d.numel() == 0:
        return 0.0
    return float((torch.exp(d) - d - 1.0).mean())


def response_perplexity(logp: Tensor, mask: Tensor) -> float:
    """Perplexity exp(-mean logp) of the response tokens under the model that produced `logp`."""
    is_response = mask > 0
    values = logp.detach()[is_response]
    if values.numel() == 0:
        return 1.0
    return float(torch.exp(-values.mean()))
