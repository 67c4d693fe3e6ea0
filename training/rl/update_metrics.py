"""What one RL update reports: a typed record, flattened to the metric names MLflow logs by `as_dict`."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class BatchMetrics:
    """The batch the update trains on, after advantages (phase 2 of `training/rl/update.py`)."""

    zero_variance_group_frac: float
    """Groups whose verifier rewards are all equal, as a fraction of the groups."""
    kl_reward_penalty_mean: float | None
    """Mean KL penalty subtracted from the valid rows' rewards (None: KL not in the reward)."""
    advantages_std: float
    """Std of the valid rows' advantages (0 with fewer than two)."""
    num_dropped_groups: float
    """Zero-variance groups dropped (cfg.drop_zero_variance_groups)."""
    num_train_sequences: float
    """Rows the loss is normalized over: skipped rows included."""
    num_train_tokens: float
    """Response tokens the loss is normalized over: skipped rows included."""
    num_skipped_rows: float
    """Trained rows not forwarded in the inner steps, their gradient being exactly 0
    (cfg.skip_zero_gradient_rows; 0 when off)."""
    num_skipped_tokens: float
    """Response tokens of the skipped rows."""


@dataclass(frozen=True)
class ThetaKMetrics:
    """The trainer's view of the batch at theta_k, over every valid row (a skipped row is scored without
    gradient, as the unskipped update would have scored it)."""

    vllm_kl: float
    """Engine-vs-trainer KL over valid rows."""
    vllm_kl_all: float
    """The same over every row with response tokens: truncated and unparsable outputs are where it grows."""
    mismatch_ess: float
    """Effective sample size of the engine-vs-trainer ratios."""
    trainer_ppl: float
    """The trainer's perplexity of the responses."""
    entropy: float
    """Token entropy, nats, mean over valid response tokens."""
    mismatch: dict[str, float]
    """`mismatch_stats` of the correction, logged as mismatch_<name>."""
    would_reject: dict[str, float]
    """What each rejection mode would reject, logged as mismatch_would_reject/<mode>."""
    kl_ref_k1: float | None
    """k1 KL to the reference over valid tokens (None: no reference)."""


@dataclass(frozen=True)
class StepsMetrics:
    """The inner steps, over the rows they forwarded (a skipped row's ratio is never computed; A = 0 cannot clip)."""

    summary: dict[str, float]
    """The last step's loss, policy_loss, kl_loss / kl_cov_loss (when those terms exist), grad_norm (before
    clipping), clip_frac_low/high and clip_frac (per token, or per sequence at level 'sequence'), ratio_mean;
    `<name>_mean` over steps, ratio_max/min over steps (`summarize_steps`)."""
    lr: float
    """The rate of the last step."""
    train_tokens_per_s: float
    """Prompt + response tokens through forward and backward, over the S inner steps, per second."""


@dataclass(frozen=True)
class UpdateMetrics:
    """One `rl_update`: the rollouts, the batch, theta_k's view, and the steps (None when no step was taken:
    vllm_kl above cfg.max_vllm_kl, or no response token to train on)."""

    rollouts: dict[str, float]
    """Per-task rollout metrics of the batch (`rollout_metrics`)."""
    batch: BatchMetrics
    theta_k: ThetaKMetrics
    steps: StepsMetrics | None
    seconds: float
    """Wall time of the whole update."""

    def as_dict(self) -> dict[str, float]:
        """The flat names the flow logs (python floats); `skipped` is 1.0 when no step was taken."""
        batch, theta_k = self.batch, self.theta_k
        out = dict(self.rollouts)
        out["zero_variance_group_frac"] = batch.zero_variance_group_frac
        if batch.kl_reward_penalty_mean is not None:
            out["kl_reward_penalty_mean"] = batch.kl_reward_penalty_mean
        out.update({name: getattr(batch, name) for name in (
            "advantages_std", "num_dropped_groups", "num_train_sequences", "num_train_tokens", "num_skipped_rows",
            "num_skipped_tokens")})
        out.update({"vllm_kl": theta_k.vllm_kl, "vllm_kl_all": theta_k.vllm_kl_all, "mismatch_ess": theta_k.mismatch_ess,
                    "trainer_ppl": theta_k.trainer_ppl, "entropy": theta_k.entropy,
                    **{f"mismatch_{name}": value for name, value in theta_k.mismatch.items()},
                    **{f"mismatch_would_reject/{mode}": value for mode, value in theta_k.would_reject.items()}})
        if theta_k.kl_ref_k1 is not None:
            out["kl_ref_k1"] = theta_k.kl_ref_k1
        if self.steps is None:
            return {**out, "skipped": 1.0, "seconds": self.seconds}
        return {**out, **self.steps.summary, "skipped": 0.0, "lr": self.steps.lr,
                "train_tokens_per_s": self.steps.train_tokens_per_s, "seconds": self.seconds}


def summarize_steps(steps: list[dict[str, float]]) -> dict[str, float]:
    """Last-step values under the plain names, means over steps as `_mean`; ratio extremes over all steps."""
    summary = {name: value for name, value in steps[-1].items()}
    for name in ("loss", "grad_norm", "clip_frac_low", "clip_frac_high", "clip_frac", "ratio_mean"):
        summary[f"{name}_mean"] = sum(step[name] for step in steps) / len(steps)
    summary["ratio_max"] = max(step["ratio_max"] for step in steps)
    summary["ratio_min"] = min(step["ratio_min"] for step in steps)
    return summary
