"""The RL algorithm library: pure tensor functions (docs/recipe.md sections 4-7).

Per-token tensors are `[B, T]` with a 0/1 `mask` over response tokens; per-sequence ones `[B]`.
"""

from passband.training.rl.advantages import group_advantages, zero_variance_groups
from passband.training.rl.covariance import clip_cov_keep_mask, kl_cov_penalty, kl_cov_selection, token_covariance
from passband.training.rl.entropy import entropy_from_hidden, token_entropy
from passband.training.rl.entropy_ceiling import EntropyCeilingFit, fit_entropy_ceiling, should_stop_early
from passband.training.rl.kl import check_kl_placement, kl_estimate, kl_from_log_ratio, kl_loss, kl_reward_penalty
from passband.training.rl.logratio import MAX_LOG_RATIO, exp_ratio
from passband.training.rl.mismatch import (
    importance_weights,
    mismatch_kl,
    mismatch_stats,
    response_perplexity,
)
from passband.training.rl.objectives import masked_aggregate, policy_loss, policy_ratio

__all__ = [
    "MAX_LOG_RATIO",
    "EntropyCeilingFit",
    "check_kl_placement",
    "clip_cov_keep_mask",
    "entropy_from_hidden",
    "exp_ratio",
    "fit_entropy_ceiling",
    "group_advantages",
    "importance_weights",
    "kl_cov_penalty",
    "kl_cov_selection",
    "kl_estimate",
    "kl_from_log_ratio",
    "kl_loss",
    "kl_reward_penalty",
    "masked_aggregate",
    "mismatch_kl",
    "mismatch_stats",
    "policy_loss",
    "policy_ratio",
    "response_perplexity",
    "should_stop_early",
    "token_covariance",
    "token_entropy",
    "zero_variance_groups",
]
