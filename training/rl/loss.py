"""The RL loss as one pure function of precomputed inputs (prime-rl's LossInputs / LossOutputs).

Everything algorithm-specific is decided ONCE per outer iteration, at theta_k, and stored as
tensors in `LossInputs`: the advantages (KL-in-reward shaping included), pi_old, the policy
loss's per-token weights (rollout correction x Clip-Cov keep mask), the KL loss's reference and
behaviour log-probs with the correction's keep factor, and KL-Cov's selection. The inner-step
loop of `training.rl.update` then slices the inputs to each micro-batch and calls
`compute_loss(logp, inputs, settings)`; which terms exist is read off the data (a None tensor
means "no such term"), and the scalars that shape them live in the frozen `LossSettings`.

Micro-batching: `compute_loss` returns the micro-batch's SHARE of the full-batch loss. Each
term's micro-batch aggregate is multiplied by (micro-batch count / full-batch count) of its own
denominator (tokens for token_mean, sequences with response tokens otherwise; sequences for the
sequence-level KL), so the sum over micro-batches is exactly the full-batch loss: for
token_mean, sum_mb (S_mb / N_mb) (N_mb / N) = sum_mb S_mb / N. Called on the whole batch the
factors are 1.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from torch import Tensor

from passband.training.rl.config import RLAlgoConfig
from passband.training.rl.algebra.covariance import KL_COV_CLIP, kl_cov_penalty
from passband.training.rl.algebra.kl import kl_loss
from passband.training.rl.algebra.objectives import masked_aggregate, policy_loss


@dataclass(frozen=True)
class LossSettings:
    """The scalars of the loss, resolved from `RLAlgoConfig` by `loss_settings`."""

    level: str
    clip_low: float
    """The surrogate's lower clip: the config's, or none under KL-Cov (`KL_COV_CLIP`)."""
    clip_high: float
    aggregation: str
    max_tokens: int | None
    kl_coef: float
    kl_estimator: str
    kl_level: str
    kl_weight_cap: float | None
    """Cap of the KL loss's off-policy weight: the correction's C, None (uncapped) without one."""
    kl_cov_coef: float
    dual_clip: float | None = None
    """c of the dual clip for A < 0 (`policy_loss`); None: none (always under KL-Cov, whose surrogate is unclipped)."""


def loss_settings(cfg: RLAlgoConfig) -> LossSettings:
    # KL-Cov replaces the trust region by its penalty: the surrogate is not clipped (covariance.py).
    clip_low, clip_high = KL_COV_CLIP if cfg.cov_method == "kl_cov" else (cfg.clip_low, cfg.clip_high)
    return LossSettings(
        level=cfg.level, clip_low=clip_low, clip_high=clip_high, aggregation=cfg.aggregation,
        max_tokens=cfg.max_tokens, kl_coef=cfg.kl_coef, kl_estimator=cfg.kl_estimator, kl_level=cfg.kl_level,
        kl_weight_cap=None if cfg.correction == "none" else cfg.correction_threshold, kl_cov_coef=cfg.kl_cov_coef,
        dual_clip=None if cfg.cov_method == "kl_cov" else cfg.dual_clip,
    )


@dataclass(frozen=True)
class LossInputs:
    """Everything the loss holds fixed over the inner steps; `[B, T]` / `[B]` on the model's device.

    B rows of the rollout batch, T the padded response width. Rows not trained on have mask 0.
    """

    mask: Tensor
    """`[B, T]` 0/1: response tokens of the rows trained on (valid, in a kept group)."""
    advantages: Tensor
    """`[B]` per-sequence advantages, KL-in-reward shaping included."""
    old_logp: Tensor
    """`[B, T]` pi_old of the ratio (trainer at theta_k, or the engine)."""
    weights: Tensor
    """`[B, T]` the policy loss's per-token weights: rollout correction x Clip-Cov keep mask."""
    num_tokens: float
    """Full-batch count of response tokens under `mask` (token_mean's denominator)."""
    num_sequences: float
    """Full-batch count of rows with a response token under `mask`."""
    ref_logp: Tensor | None = None
    """`[B, T]` reference log-probs when KL is a loss; None: no KL loss term."""
    behaviour_logp: Tensor | None = None
    """`[B, T]` the engine's log-probs: it drew the tokens, so it is the KL loss's behaviour policy."""
    kl_keep: Tensor | None = None
    """`[B, T]` 0/1: the rollout correction's keep factor (weight > 0), applied to the KL loss."""
    kl_cov_selected: Tensor | None = None
    """`[B, T]` 0/1 KL-Cov's choice at theta_k over the whole batch; None without KL-Cov."""

    def rows(self, index: Tensor, width: int) -> "LossInputs":
        """The inputs of rows `index` (`[mb]` long), cut to the first `width` response positions.

        The full-batch counts stay: they are the denominators of the micro-batch's share.
        """
        def cut(tensor: Tensor | None) -> Tensor | None:
            if tensor is None:
                return None
            return tensor[index] if tensor.dim() == 1 else tensor[index, :width]

        return replace(self, **{name: cut(getattr(self, name)) for name in _PER_ROW_FIELDS})


_PER_ROW_FIELDS = ("mask", "advantages", "old_logp", "weights", "ref_logp", "behaviour_logp", "kl_keep", "kl_cov_selected")


@dataclass(frozen=True)
class LossOutputs:
    loss: Tensor
    """Scalar with gradient: this slice's share of the full-batch loss."""
    metrics: dict[str, float]
    """policy_loss, kl_loss, kl_cov_loss (this slice's shares) and `policy_loss`'s clip/ratio metrics."""


def _share(count: Tensor, total: float) -> Tensor:
    """count / max(total, 1) as an fp32 `[]` tensor on count's device: the division in float64 and
    one rounding to fp32, as a python float multiplying an fp32 tensor was, without reading the device."""
    return (count.double() / max(total, 1.0)).float()


def compute_loss(logp: Tensor, inputs: LossInputs, settings: LossSettings, with_metrics: bool = True) -> LossOutputs:
    """Policy surrogate + KL loss (when `inputs.ref_logp`) + KL-Cov penalty (when selected).

    logp: `[mb, w]` trainer log-probs with gradient for the rows of `inputs` (a slice from
    `LossInputs.rows`, or the whole batch). with_metrics=False: no metrics (`{}`), and nothing is
    read back from the device, so a micro-batch's loss and backward never wait for it.
    """
    mask = inputs.mask
    sequence_share = _share(((mask > 0).sum(dim=-1) > 0).sum(), inputs.num_sequences)
    if settings.aggregation == "token_mean":
        share = _share((mask > 0).sum(), inputs.num_tokens)
    else:
        share = sequence_share
    policy, metrics = policy_loss(
        logp, inputs.old_logp, inputs.advantages, mask, level=settings.level, clip_low=settings.clip_low,
        clip_high=settings.clip_high, aggregation=settings.aggregation, weights=inputs.weights,
        max_tokens=settings.max_tokens, with_metrics=with_metrics, dual_clip=settings.dual_clip,
    )
    loss = policy * share
    if with_metrics:
        metrics["policy_loss"] = loss.item()
    if inputs.ref_logp is not None:
        kl = kl_loss(
            logp, inputs.ref_logp, mask, settings.kl_coef, settings.kl_estimator, inputs.behaviour_logp,
            settings.aggregation, settings.max_tokens, level=settings.kl_level, keep=inputs.kl_keep,
            weight_cap=settings.kl_weight_cap,
        )
        # The sequence-level KL is a mean over sequences whatever the policy's aggregation.
        kl = kl * (sequence_share if settings.kl_level == "sequence" else share)
        loss = loss + kl
        if with_metrics:
            metrics["kl_loss"] = kl.item()
    if inputs.kl_cov_selected is not None:
        penalty = kl_cov_penalty(logp, inputs.old_logp, inputs.kl_cov_selected, mask, settings.kl_cov_coef)
        kl_cov = masked_aggregate(penalty, mask, settings.aggregation, settings.max_tokens) * share
        loss = loss + kl_cov
        if with_metrics:
            metrics["kl_cov_loss"] = kl_cov.item()
    return LossOutputs(loss=loss, metrics=metrics)


__all__ = ["LossInputs", "LossOutputs", "LossSettings", "compute_loss", "loss_settings"]
