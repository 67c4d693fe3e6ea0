"""Training-inference mismatch: rollout-correction weights and metrics (docs/recipe.md section 5).

rho_t = pi_trainer(y_t) / pi_rollout(y_t) = exp(trainer_logp_t - rollout_logp_t), per response
token; C = C_high = `threshold` >= 1, the cap or upper acceptance bound. The rejection modes keep
ratios inside [1/C_low, C_high] (docs/recipe.md section 5), with C_low = `threshold_low` >= 1 (default C):
IcePop's range is asymmetric ([0.5, 5]: C_low = 2, C_high = 5), because tokens the trainer finds
far less likely than the engine did and tokens it finds far likelier are not equally harmful.
All weights are detached, `[B, T]`, 0 at masked positions.
Sequence products prod_t rho_t are formed in log space (sum of masked log-ratios), so a long
sequence whose product overflows float32 still gets its correct capped or zero weight, and every
exp goes through `exp_ratio` (log-ratio clamped at 20), so a token log-ratio of 94 gives a
finite rho (a rejected token's weight is 0, never inf * 0 = NaN).
Geo-MIS takes its own, much tighter thresholds (`RLAlgoConfig.geo_threshold`, ~1.001): a band on
the per-token geometric mean that reuses seq-MIS's C = 2 allows a mean |log rho_t| of 0.69 and
in practice rejects nothing (tests/test_rl_mismatch.py measures it).
"""

import math

import torch
from torch import Tensor

from passband.training.rl.algebra.logratio import MAX_LOG_RATIO, exp_ratio

IMPORTANCE_MODES = ("none", "token_tis", "token_mis", "seq_tis", "seq_mis", "geo_mis")


def _log_ratios(trainer_logp: Tensor, rollout_logp: Tensor, mask: Tensor) -> Tensor:
    """log rho `[B, T]`, detached, 0 at masked positions (padding may hold -inf)."""
    is_response = mask > 0
    zeros = torch.zeros_like(trainer_logp)
    return torch.where(is_response, trainer_logp.detach() - rollout_logp.detach(), zeros)


def importance_weights(
    trainer_logp: Tensor,
    rollout_logp: Tensor,
    mask: Tensor,
    mode: str = "seq_mis",
    threshold: float = 2.0,
    threshold_low: float | None = None,
) -> Tensor:
    """Per-token correction weights `[B, T]` (detached) for the policy loss's `weights`.

    With C = C_high = `threshold` and C_low = `threshold_low` (None: C_low = C):
    none: 1 on response tokens.
    token_tis: min(rho_t, C).
    token_mis: rho_t if 1/C_low <= rho_t <= C_high else 0 (IcePop-style token masking).
    seq_tis: min(prod_t rho_t, C), one value per row.
    seq_mis: prod_t rho_t if it is <= C else 0, one value per row (the default, C=2).
    geo_mis: geometric-mean rejection (Geo-RS): a row is kept if exp(mean_t log rho_t) lies in
      [1/C_low, C_high], else dropped. A kept row gets weight 1 on every response token: the
      full product is what vanishes or explodes with length, which this mode exists to avoid, so
      it only rejects and does not reweight.
    """
    if mode not in IMPORTANCE_MODES:
        raise ValueError(f"unknown importance-weight mode {mode!r}; expected one of {IMPORTANCE_MODES}")
    if threshold_low is None:
        threshold_low = threshold
    if mode != "none" and min(threshold, threshold_low) < 1.0:
        raise ValueError(
            f"importance-weight thresholds must be >= 1 (the range is [1/C_low, C_high]), got "
            f"C_high={threshold}, C_low={threshold_low}"
        )
    is_response = (mask > 0).to(trainer_logp.dtype)
    log_rho = _log_ratios(trainer_logp, rollout_logp, mask)  # [B, T]
    if mode == "none":
        return is_response
    log_c, log_c_low = math.log(threshold), math.log(threshold_low)
    if mode == "token_tis":
        return exp_ratio(log_rho.clamp(max=log_c)) * is_response
    if mode == "token_mis":
        kept = (log_rho >= -log_c_low) & (log_rho <= log_c)
        return exp_ratio(log_rho) * kept * is_response
    seq_log_rho = log_rho.sum(dim=-1, keepdim=True)  # [B, 1], log prod_t rho_t
    if mode == "seq_tis":
        return exp_ratio(seq_log_rho.clamp(max=log_c)) * is_response
    if mode == "seq_mis":
        kept = seq_log_rho <= log_c
        # Clamp before exp so a rejected row is exp(log C) * 0, never inf * 0 = NaN.
        return exp_ratio(seq_log_rho.clamp(max=log_c)) * kept * is_response
    # geo_mis
    num_tokens = is_response.sum(dim=-1, keepdim=True).clamp(min=1)
    geo_log_rho = seq_log_rho / num_tokens  # [B, 1], log of the geometric mean
    kept = (geo_log_rho >= -log_c_low) & (geo_log_rho <= log_c)
    return kept * is_response


def mismatch_stats(trainer_logp: Tensor, rollout_logp: Tensor, mask: Tensor, weights: Tensor) -> dict[str, float]:
    """Metrics of a correction: masked_token_frac (response tokens with weight 0),
    masked_seq_frac (sequences with response tokens whose weights are all 0), ratio_max and
    ratio_mean of rho_t over response tokens, and weight_mean over response tokens."""
    is_response = mask > 0
    rho = exp_ratio(_log_ratios(trainer_logp, rollout_logp, mask))[is_response]
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

    Healthy values are ~1e-3 or below; spikes precede collapse (docs/recipe.md section 5).
    """
    is_response = mask > 0
    d = _log_ratios(trainer_logp, rollout_logp, mask)[is_response]
    if d.numel() == 0:
        return 0.0
    d = d.clamp(-MAX_LOG_RATIO, MAX_LOG_RATIO)  # a finite metric even for a log-ratio of 94
    return float((torch.exp(d) - d - 1.0).mean())


def effective_sample_size(trainer_logp: Tensor, rollout_logp: Tensor, mask: Tensor) -> float:
    """Kish's effective sample size of the sequence importance weights w_i = prod_t rho_t, as a
    fraction of the sequences with response tokens: (sum_i w_i)^2 / (n sum_i w_i^2), in (0, 1];
    1 when the engine sampled from the trainer's distribution, near 1/n when one sequence carries
    all the weight. In log space (log-sum-exp), so long sequences' products neither overflow nor
    vanish. An uncorrected diagnostic: it reads the raw ratios, whichever correction the update uses."""
    has_tokens = (mask > 0).any(dim=-1)
    if not bool(has_tokens.any()):
        return 1.0
    log_w = _log_ratios(trainer_logp, rollout_logp, mask).sum(dim=-1)[has_tokens].double()
    log_ess = 2 * torch.logsumexp(log_w, 0) - torch.logsumexp(2 * log_w, 0) - math.log(log_w.numel())
    return float(torch.exp(log_ess))


def response_perplexity(logp: Tensor, mask: Tensor) -> float:
    """Perplexity exp(-mean logp) of the response tokens under the model that produced `logp`."""
    is_response = mask > 0
    values = logp.detach()[is_response]
    if values.numel() == 0:
        return 1.0
    return float(torch.exp(-values.mean()))


REJECTING_MODES = ("seq_mis", "geo_mis", "token_mis")


def rejection_fractions(trainer_logp: Tensor, rollout_logp: Tensor, mask: Tensor,
                        bounds: dict[str, tuple[float, float | None]]) -> dict[str, float]:
    """What each rejecting correction would drop of this batch, whichever one the update uses:
    `<mode>` the fraction of sequences (with response tokens) it zeroes whole, for token_mis the
    fraction with at least one rejected token, and `token_mis_tokens` its fraction of tokens.
    `bounds`: mode -> (C_high, C_low) as `importance_weights` takes them. Under staleness these
    are expected to separate (a product over hundreds of tokens can leave seq-MIS's [0, C] while
    every token stays inside token-MIS's band; docs/benchmarks.md "Staleness" has what was measured)."""
    is_response = mask > 0
    has_tokens = is_response.any(dim=-1)
    num_sequences = max(int(has_tokens.sum()), 1)
    fractions = {}
    for mode in REJECTING_MODES:
        rejected = (importance_weights(trainer_logp, rollout_logp, mask, mode, *bounds[mode]) == 0) & is_response
        fractions[mode] = float((rejected.any(dim=-1) & has_tokens).sum()) / num_sequences
        if mode == "token_mis":
            fractions["token_mis_tokens"] = float(rejected.sum()) / max(int(is_response.sum()), 1)
    return fractions
