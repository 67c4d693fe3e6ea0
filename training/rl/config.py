"""The settings of one RL update (RECIPE sections 4-7): objective, reuse, mismatch, KL, entropy.

The flow's config holds one `RLAlgoConfig` and passes it to `training.rl.update.rl_update` each
outer iteration. Bad combinations are refused here, before any rollout is generated.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from passband.training.rl.kl import check_kl_placement


class RLAlgoConfig(BaseModel):
    """How one outer iteration turns a fixed batch of scored rollouts into S optimizer steps."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # Advantages (RECIPE 4, Objectives).
    scale_by_std: bool = Field(
        default=True, description="Divide group-centred rewards by the group's sample std (GRPO); False: mean-only."
    )
    eps: float = Field(default=1e-6, gt=0, description="Added to the group std before dividing.")
    drop_zero_variance_groups: bool = Field(
        default=False,
        description="Leave groups whose rewards are all equal (all-zero advantages) out of the update entirely, "
        "so they neither count in the loss normalizer nor in the KL terms. They are counted either way.",
    )

    # Objective.
    level: Literal["token", "sequence"] = Field(
        default="token", description="Importance ratio per token (GRPO) or per sequence as a geometric mean (GSPO)."
    )
    clip_low: float = Field(default=0.2, ge=0, lt=1, description="Ratio clipped below at 1 - clip_low (binds for A < 0).")
    clip_high: float = Field(default=0.28, ge=0, description="Ratio clipped above at 1 + clip_high (binds for A > 0; clip-higher).")
    aggregation: Literal["token_mean", "seq_mean", "seq_sum"] = Field(
        default="token_mean",
        description="Loss reduction over the WHOLE batch (it sets the length bias): mean over all response tokens, "
        "mean of per-sequence means, or per-sequence sums divided by max_tokens.",
    )
    max_tokens: int | None = Field(
        default=None, gt=0, description="The constant divisor of aggregation='seq_sum' (the response-length budget)."
    )

    # Trajectory reuse and optimization.
    num_inner_steps: int = Field(
        default=1, ge=1, description="S: optimizer steps on each fixed rollout batch (1 = on-policy; more drifts off-policy)."
    )
    micro_batch_size: int = Field(
        default=8, ge=1, description="Sequences per forward/backward pass; gradients accumulate to the full-batch loss."
    )
    lr: float = Field(default=1e-6, gt=0, description="AdamW learning rate.")
    weight_decay: float = Field(default=0.0, ge=0, description="AdamW decoupled weight decay.")
    betas: tuple[float, float] = Field(default=(0.9, 0.999), description="AdamW (beta1, beta2).")
    grad_clip: float | None = Field(
        default=1.0, gt=0, description="Max global L2 norm of each step's gradient; None disables clipping (the norm is still logged)."
    )
    logprob_chunk_size: int = Field(
        default=1024, gt=0, description="Tokens per chunk of the LM head in log-prob and entropy passes (memory O(chunk x vocab))."
    )

    # Training-inference mismatch (RECIPE 5).
    behaviour_policy: Literal["engine", "trainer"] = Field(
        default="trainer",
        description="pi_old of the ratio: 'engine' uses the rollout engine's log-probs (saves nothing here, since the "
        "trainer pass runs for the metrics anyway, but matches recipes that trust aligned engines); 'trainer' "
        "recomputes them with the trainer before the first inner step and corrects the mismatch with `correction`.",
    )
    correction: Literal["none", "token_tis", "token_mis", "seq_tis", "seq_mis", "geo_mis"] = Field(
        default="seq_mis", description="Rollout correction weights rho = pi_trainer / pi_engine (see training.rl.mismatch)."
    )
    correction_threshold: float = Field(default=2.0, ge=1, description="C of the correction: cap or acceptance range [1/C, C].")
    max_vllm_kl: float | None = Field(
        default=None, gt=0, description="Skip the update (report skipped=1) when the batch's vllm_kl exceeds this; None: never skip."
    )

    # KL toward the reference policy (RECIPE 6).
    kl_coef: float = Field(default=0.0, ge=0, description="KL coefficient; 0 (the default) turns KL off and needs no reference model.")
    kl_placement: Literal["reward", "loss"] = Field(
        default="reward", description="'reward': k1 per sequence subtracted from the reward; 'loss': a KL loss term."
    )
    kl_estimator: Literal["k1", "k2", "k3", "mse"] = Field(
        default="k1", description="k1 in the reward; k2 (or bounded mse, or k3 with a warning) as a loss; k1 as a loss is refused."
    )

    # Entropy (RECIPE 7).
    cov_method: Literal["none", "clip_cov", "kl_cov"] = Field(
        default="none", description="Keep entropy alive: Clip-Cov detaches, KL-Cov penalizes, the top-covariance tokens."
    )
    cov_fraction: float = Field(default=2e-4, ge=0, le=1, description="Fraction of response tokens Clip-Cov / KL-Cov act on.")
    cov_bounds: tuple[float, float] = Field(
        default=(1.0, 5.0), description="Clip-Cov candidates: tokens with cov strictly between these (lower, upper)."
    )
    kl_cov_coef: float = Field(default=1.0, ge=0, description="KL-Cov coefficient on |logp - old_logp| of the selected tokens.")

    temperature: float = Field(
        default=1.0, gt=0, description="Sampling temperature of the rollouts; the trainer's log-probs use logits / temperature."
    )

    @model_validator(mode="after")
    def _check(self) -> "RLAlgoConfig":
        if self.aggregation == "seq_sum" and self.max_tokens is None:
            raise ValueError("aggregation='seq_sum' needs max_tokens (the response-length budget that divides each sum)")
        if self.cov_bounds[0] >= self.cov_bounds[1]:
            raise ValueError(f"cov_bounds must be (lower, upper) with lower < upper, got {self.cov_bounds}")
        if not all(0.0 <= b < 1.0 for b in self.betas):
            raise ValueError(f"betas must each be in [0, 1), got {self.betas}")
        # Refuse k1 as a loss (zero expected gradient) and warn on k3 as a loss, even at kl_coef=0,
        # so a preset that only later raises the coefficient fails now rather than mid-run.
        check_kl_placement(self.kl_placement, self.kl_estimator)
        return self
