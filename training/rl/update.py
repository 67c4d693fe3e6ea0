"""One RL update: S optimizer steps of the clipped surrogate on a fixed batch of scored rollouts.

Called by the flow between rollouts and weight sync (RECIPE 4-7). Order of work:
1. A no-grad pass of the trainer over the valid rows: log-probs at theta_k (the vllm_kl metric,
   trainer perplexity, the rollout-correction weights, and pi_old when behaviour_policy is
   'trainer') and token entropy from the same forward's hidden states. The reference model's
   log-probs too when KL is on.
2. Advantages per group from the rewards (minus the k1 penalty when KL is in the reward).
3. S inner steps over the FIXED batch (advantages, pi_old and weights stay those of theta_k);
   each step accumulates micro-batch gradients and takes one optimizer step.

Micro-batching: the loss of a micro-batch is the aggregation over its own rows, so it is scaled
by (its count / the full batch's count) before backward, where the count is response tokens
for token_mean and sequences with response tokens for seq_mean/seq_sum (the denominators of
`masked_aggregate`). The sum over micro-batches is then exactly the full-batch loss: for
token_mean, sum_mb (S_mb / N_mb) * (N_mb / N) = sum_mb S_mb / N, whereas an unscaled mean of
micro-batch token means would weigh a short micro-batch's tokens more. Counts are taken from the
training mask (valid rows of kept groups), so rows left out never enter a denominator.

Invalid rows (unparsable/truncated) are never forwarded: they get no gradient and enter no
metric that the trainer computes (vllm_kl, entropy, perplexity are over valid rows only).

Memory: every pass goes micro-batch by micro-batch through `response_logprobs` (chunked LM
head), and entropy through `entropy_from_hidden` (chunked): no [tokens, vocab] logits exist for
more than one chunk at a time. Dropout must be off in `model` (RL needs the trainer's
log-probs at theta_k to be deterministic); this module does not change train/eval mode.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch
from torch import Tensor

from passband.training.logprobs import pad_rows, response_logprobs
from passband.training.rl.advantages import group_advantages, zero_variance_groups
from passband.training.rl.batching import RolloutBatch
from passband.training.rl.config import RLAlgoConfig
from passband.training.rl.covariance import clip_cov_keep_mask, token_covariance
from passband.training.rl.entropy import entropy_from_hidden
from passband.training.rl.kl import kl_loss, kl_reward_penalty
from passband.training.rl.mismatch import importance_weights, mismatch_kl, mismatch_stats, response_perplexity
from passband.training.rl.objectives import masked_aggregate, policy_loss
from passband.training.rl.rollout_metrics import rollout_metrics

__all__ = ["RolloutBatch", "advantages_with_kl", "build_optimizer", "rl_update"]


def build_optimizer(model: torch.nn.Module, cfg: RLAlgoConfig) -> torch.optim.AdamW:
    """AdamW over the trainable parameters with the config's lr, betas and weight decay."""
    params = [p for p in model.parameters() if p.requires_grad]
    return torch.optim.AdamW(params, lr=cfg.lr, betas=cfg.betas, weight_decay=cfg.weight_decay)


def advantages_with_kl(
    rewards: Tensor,
    valid: Tensor,
    group_size: int,
    cfg: RLAlgoConfig,
    trainer_logp: Tensor | None = None,
    ref_logp: Tensor | None = None,
    mask: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """(advantages `[B]`, the rewards they were computed from `[B]`).

    With KL in the reward (kl_coef > 0, placement 'reward') the rewards are first lowered by
    kl_coef * sum over response tokens of (trainer_logp - ref_logp) (k1, detached), so a
    sequence the policy made likelier than the reference did gets a lower advantage.
    rewards: `[B]`, NaN allowed where `valid` is False; trainer_logp/ref_logp/mask: `[B, T]`.
    """
    if cfg.kl_coef > 0 and cfg.kl_placement == "reward":
        if trainer_logp is None or ref_logp is None or mask is None:
            raise ValueError("KL in the reward needs trainer_logp, ref_logp and mask")
        rewards = rewards - kl_reward_penalty(trainer_logp, ref_logp, mask, cfg.kl_coef)
    return group_advantages(rewards, group_size, cfg.scale_by_std, cfg.eps, valid), rewards


def _micro_batches(rows: list[int], size: int) -> list[list[int]]:
    return [rows[start : start + size] for start in range(0, len(rows), size)]


def _response_hidden(hidden: Tensor, prompt_ids: list[list[int]], response_ids: list[list[int]], width: int) -> Tensor:
    """[mb, width, H] final hidden states at the positions that predict each response token."""
    out = hidden.new_zeros(len(response_ids), width, hidden.shape[-1])
    for i, (prompt, response) in enumerate(zip(prompt_ids, response_ids)):
        start = len(prompt) - 1  # hidden state t predicts token t + 1
        out[i, : len(response)] = hidden[i, start : start + len(response)]
    return out


@torch.no_grad()
def _scoring_pass(
    model: torch.nn.Module, batch: RolloutBatch, rows: list[int], width: int, cfg: RLAlgoConfig, with_entropy: bool
) -> tuple[Tensor, Tensor]:
    """Log-probs and token entropy `[B, width]` (0 outside `rows`) of `model` at its current weights.

    The entropy reuses the hidden states of the log-prob forward (captured by a forward hook on
    the decoder), so one forward serves both and the log-probs are exactly those that
    `response_logprobs` computes in the inner steps.
    """
    device = model.lm_head.weight.device
    logp = torch.zeros(batch.num_rows, width, device=device)
    entropy = torch.zeros(batch.num_rows, width, device=device)
    for chunk in _micro_batches(rows, cfg.micro_batch_size):
        prompts = [batch.prompt_ids[i] for i in chunk]
        responses = [batch.response_ids[i] for i in chunk]
        captured: list[Tensor] = []
        handle = model.model.register_forward_hook(lambda _m, _args, out: captured.append(out.last_hidden_state))
        try:
            out = response_logprobs(model, prompts, responses, cfg.temperature, cfg.logprob_chunk_size)
        finally:
            handle.remove()
        index = torch.tensor(chunk, device=device)
        chunk_width = out.logp.shape[1]
        logp[index, :chunk_width] = out.logp
        if with_entropy:
            hidden = _response_hidden(captured[0], prompts, responses, chunk_width) / cfg.temperature
            entropy[index, :chunk_width] = entropy_from_hidden(
                hidden, model.lm_head.weight, out.mask, cfg.logprob_chunk_size, reduction="none"
            )
    return logp, entropy


def _kl_cov_selection(logp: Tensor, advantages: Tensor, mask: Tensor, fraction: float) -> Tensor:
    """0/1 `[B, T]`: KL-Cov's top max(1, int(fraction * N)) response tokens by covariance.

    Chosen once per outer iteration over the WHOLE batch at theta_k (the centring of the
    covariance is batch-wide, so a per-micro-batch choice would depend on micro_batch_size).
    """
    num_tokens = int((mask > 0).sum())
    num_selected = 0 if fraction == 0.0 or num_tokens == 0 else max(1, int(fraction * num_tokens))
    cov = torch.where(mask > 0, token_covariance(logp, advantages, mask), torch.full_like(logp, -torch.inf))
    selected = torch.zeros(logp.numel(), device=logp.device)
    selected[torch.topk(cov.reshape(-1), num_selected).indices] = 1.0
    return selected.reshape(logp.shape)


@dataclass
class _FixedBatch:
    """Everything the inner steps hold fixed, as `[B, T]` / `[B]` tensors on the model's device."""

    rows: list[int]
    """Rows trained on: valid, in a kept group, with at least one response token."""
    mask: Tensor
    """0/1 training mask: response tokens of `rows`, 0 elsewhere."""
    advantages: Tensor
    old_logp: Tensor
    weights: Tensor
    """Per-token loss weights: rollout correction times Clip-Cov's keep mask."""
    ref_logp: Tensor | None
    behaviour_logp: Tensor | None
    """pi_behaviour of the KL loss's importance weight; None when on-policy."""
    kl_cov_selected: Tensor | None
    normalizer: float
    """The full batch's aggregation count (tokens or sequences), see the module docstring."""


def _aggregation_count(mask: Tensor, aggregation: str) -> float:
    if aggregation == "token_mean":
        return float((mask > 0).sum())
    return float(((mask > 0).sum(dim=-1) > 0).sum())


def _micro_batch_loss(model: torch.nn.Module, batch: RolloutBatch, fixed: _FixedBatch, chunk: list[int],
                      cfg: RLAlgoConfig) -> tuple[Tensor, Tensor]:
    """(scaled loss of one micro-batch, its log-probs `[mb, w]` detached)."""
    out = response_logprobs(model, [batch.prompt_ids[i] for i in chunk], [batch.response_ids[i] for i in chunk],
                            cfg.temperature, cfg.logprob_chunk_size)
    index = torch.tensor(chunk, device=out.logp.device)
    width = out.logp.shape[1]

    def rows_of(full: Tensor) -> Tensor:
        return full[index, :width]

    mask = rows_of(fixed.mask)
    loss, _ = policy_loss(
        out.logp, rows_of(fixed.old_logp), fixed.advantages[index], mask, level=cfg.level, clip_low=cfg.clip_low,
        clip_high=cfg.clip_high, aggregation=cfg.aggregation, weights=rows_of(fixed.weights), max_tokens=cfg.max_tokens,
    )
    if fixed.ref_logp is not None and cfg.kl_placement == "loss":
        behaviour = None if fixed.behaviour_logp is None else rows_of(fixed.behaviour_logp)
        loss = loss + kl_loss(out.logp, rows_of(fixed.ref_logp), mask, cfg.kl_coef, cfg.kl_estimator, behaviour,
                              cfg.aggregation, cfg.max_tokens)
    if fixed.kl_cov_selected is not None:
        log_ratio = torch.where(mask > 0, out.logp - rows_of(fixed.old_logp), torch.zeros_like(out.logp))
        penalty = cfg.kl_cov_coef * log_ratio.abs() * rows_of(fixed.kl_cov_selected)
        loss = loss + masked_aggregate(penalty, mask, cfg.aggregation, cfg.max_tokens)
    scale = _aggregation_count(mask, cfg.aggregation) / fixed.normalizer
    return loss * scale, out.logp.detach()


def _inner_step(model: torch.nn.Module, optimizer: torch.optim.Optimizer, batch: RolloutBatch, fixed: _FixedBatch,
                cfg: RLAlgoConfig) -> dict[str, float]:
    """One optimizer step on the fixed batch; returns its loss, grad norm and policy-loss metrics."""
    optimizer.zero_grad(set_to_none=True)
    step_logp = torch.zeros_like(fixed.old_logp)  # [B, T] at this step's theta, for the metrics
    total_loss = 0.0
    for chunk in _micro_batches(fixed.rows, cfg.micro_batch_size):
        loss, logp = _micro_batch_loss(model, batch, fixed, chunk, cfg)
        loss.backward()
        total_loss += loss.item()
        step_logp[torch.tensor(chunk, device=logp.device), : logp.shape[1]] = logp
    params = [p for group in optimizer.param_groups for p in group["params"]]
    max_norm = cfg.grad_clip if cfg.grad_clip is not None else float("inf")
    grad_norm = float(torch.nn.utils.clip_grad_norm_(params, max_norm))
    optimizer.step()
    with torch.no_grad():
        _, metrics = policy_loss(
            step_logp, fixed.old_logp, fixed.advantages, fixed.mask, level=cfg.level, clip_low=cfg.clip_low,
            clip_high=cfg.clip_high, aggregation=cfg.aggregation, weights=fixed.weights, max_tokens=cfg.max_tokens,
        )
    return {"loss": total_loss, "grad_norm": grad_norm, **metrics}


def _summarize_steps(steps: list[dict[str, float]]) -> dict[str, float]:
    """Last-step values under the plain names, means over steps as `_mean`; ratio extremes over all steps."""
    summary = {name: value for name, value in steps[-1].items()}
    for name in ("loss", "grad_norm", "clip_frac_low", "clip_frac_high", "ratio_mean"):
        summary[f"{name}_mean"] = sum(step[name] for step in steps) / len(steps)
    summary["ratio_max"] = max(step["ratio_max"] for step in steps)
    summary["ratio_min"] = min(step["ratio_min"] for step in steps)
    return summary


def rl_update(
    model: torch.nn.Module,
    ref_model: torch.nn.Module | None,
    optimizer: torch.optim.Optimizer,
    batch: RolloutBatch,
    cfg: RLAlgoConfig,
    generator: torch.Generator | None = None,
) -> dict[str, float]:
    """Train `model` in place on `batch` for cfg.num_inner_steps optimizer steps; return metrics.

    ref_model: the frozen reference policy, required when cfg.kl_coef > 0. generator: seeds
    Clip-Cov's random choice. Returns python floats: the per-task rollout metrics of
    `rollout_metrics`; vllm_kl, trainer_ppl, entropy (nats, mean over valid response tokens),
    mismatch_* (`mismatch_stats` of the correction); zero_variance_group_frac, advantages_std,
    num_dropped_groups, num_train_sequences, num_train_tokens; per inner step, the last step's
    loss, grad_norm (before clipping), clip_frac_low/high, ratio_mean, with `_mean` over steps,
    and ratio_max/min over steps; lr, train_tokens_per_s, seconds; skipped = 1.0 when no step
    was taken (vllm_kl above cfg.max_vllm_kl, or no response token to train on).
    """
    start = time.perf_counter()
    if cfg.kl_coef > 0 and ref_model is None:
        raise ValueError(f"kl_coef={cfg.kl_coef} needs a ref_model (the frozen reference policy)")
    metrics = rollout_metrics(batch)
    device = model.lm_head.weight.device
    engine_logp, response_mask = (t.to(device) for t in pad_rows(batch.engine_logp, torch.float32))
    width = response_mask.shape[1]
    valid_rows = [i for i in range(batch.num_rows) if batch.valid[i] and batch.response_ids[i]]
    valid = torch.tensor(batch.valid, dtype=torch.bool, device=device)
    valid_mask = response_mask * valid[:, None]  # [B, T] response tokens of valid rows

    # 1. theta_k's view of the batch (no grad).
    trainer_logp, entropy = _scoring_pass(model, batch, valid_rows, width, cfg, with_entropy=True)
    num_valid_tokens = valid_mask.sum().clamp(min=1)
    correction = importance_weights(trainer_logp, engine_logp, valid_mask, cfg.correction, cfg.correction_threshold)
    metrics.update({
        "vllm_kl": mismatch_kl(trainer_logp, engine_logp, valid_mask),
        "trainer_ppl": response_perplexity(trainer_logp, valid_mask),
        "entropy": float((entropy * valid_mask).sum() / num_valid_tokens),
        **{f"mismatch_{name}": value for name, value in mismatch_stats(trainer_logp, engine_logp, valid_mask, correction).items()},
    })
    ref_logp = None
    if cfg.kl_coef > 0:
        ref_logp, _ = _scoring_pass(ref_model, batch, valid_rows, width, cfg, with_entropy=False)
        metrics["kl_ref_k1"] = float(((trainer_logp - ref_logp) * valid_mask).sum() / num_valid_tokens)

    # 2. Advantages. Zero-variance groups are counted on the verifier's rewards (the task
    # signal) and dropped, when asked, by the rewards the advantages use (KL-shaped ones differ).
    rewards = torch.tensor(batch.rewards, dtype=torch.float32, device=device)
    num_groups = batch.num_rows // batch.group_size
    metrics["zero_variance_group_frac"] = float(zero_variance_groups(rewards, batch.group_size, valid).sum()) / num_groups
    advantages, rewards = advantages_with_kl(rewards, valid, batch.group_size, cfg, trainer_logp, ref_logp, valid_mask)
    if ref_logp is not None and cfg.kl_placement == "reward":
        shaping = torch.tensor(batch.rewards, device=device) - rewards
        metrics["kl_reward_penalty_mean"] = float(shaping[valid].mean()) if bool(valid.any()) else 0.0
    dropped = torch.zeros(num_groups, dtype=torch.bool, device=device)
    if cfg.drop_zero_variance_groups:
        dropped = zero_variance_groups(rewards, batch.group_size, valid)
    rows = [i for i in valid_rows if not bool(dropped[i // batch.group_size])]
    kept = torch.zeros(batch.num_rows, dtype=torch.bool, device=device)
    kept[torch.tensor(rows, dtype=torch.long, device=device)] = True
    train_mask = response_mask * kept[:, None]
    metrics.update({
        "advantages_std": float(advantages[valid].std()) if int(valid.sum()) > 1 else 0.0,
        "num_dropped_groups": float(dropped.sum()),
        "num_train_sequences": float(len(rows)),
        "num_train_tokens": float(train_mask.sum()),
    })

    too_far = cfg.max_vllm_kl is not None and metrics["vllm_kl"] > cfg.max_vllm_kl
    if too_far or not rows:
        metrics.update({"skipped": 1.0, "seconds": time.perf_counter() - start})
        return metrics

    # 3. What the inner steps hold fixed.
    old_logp = trainer_logp if cfg.behaviour_policy == "trainer" else engine_logp
    # With the engine as pi_old the ratio pi_theta/pi_engine already contains rho, so reweighting
    # by rho again would count the mismatch twice: only the correction's rejections apply.
    weights = correction if cfg.behaviour_policy == "trainer" else (correction > 0).to(correction.dtype)
    if cfg.cov_method == "clip_cov":
        weights = weights * clip_cov_keep_mask(
            trainer_logp, old_logp, advantages, train_mask, cfg.cov_fraction, cfg.cov_bounds[0], cfg.cov_bounds[1],
            cfg.clip_low, cfg.clip_high, generator,
        )
    off_policy = cfg.num_inner_steps > 1 or cfg.correction != "none"
    fixed = _FixedBatch(
        rows=rows, mask=train_mask, advantages=advantages, old_logp=old_logp, weights=weights, ref_logp=ref_logp,
        # The tokens were drawn by the engine: pi_theta/pi_engine is the KL loss's exact per-token weight.
        behaviour_logp=engine_logp if off_policy else None,
        kl_cov_selected=_kl_cov_selection(trainer_logp, advantages, train_mask, cfg.cov_fraction)
        if cfg.cov_method == "kl_cov" else None,
        normalizer=_aggregation_count(train_mask, cfg.aggregation),
    )

    train_start = time.perf_counter()
    steps = [_inner_step(model, optimizer, batch, fixed, cfg) for _ in range(cfg.num_inner_steps)]
    train_seconds = time.perf_counter() - train_start
    num_forward_tokens = sum(len(batch.prompt_ids[i]) + len(batch.response_ids[i]) for i in rows)
    metrics.update(_summarize_steps(steps))
    metrics.update({
        "skipped": 0.0,
        "lr": float(optimizer.param_groups[0]["lr"]),
        # Prompt + response tokens through forward and backward, over the S inner steps.
        "train_tokens_per_s": num_forward_tokens * cfg.num_inner_steps / max(train_seconds, 1e-9),
        "seconds": time.perf_counter() - start,
    })
    return metrics
