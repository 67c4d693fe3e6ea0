"""One RL update: S optimizer steps of the clipped surrogate on a fixed batch of scored rollouts.

Called by the flow between rollouts and weight sync (docs/recipe.md section 4-7). Order of work:
1. No-grad passes of the trainer over every row with response tokens: log-probs at theta_k (the
   vllm_kl metrics, trainer perplexity, the rollout-correction weights, and pi_old when
   behaviour_policy is 'trainer') and token entropy from the same forward's hidden states.
   Invalid rows are scored too, only for `vllm_kl_all` (truncated outputs are where the mismatch
   grows); they never get gradient. The reference model's log-probs too when KL is on.
2. Advantages per group from the rewards (minus the group-centred k1 penalty when KL is in the
   reward, not scaled by the reward std).
3. Everything algorithm-specific is computed once into a `training.rl.loss.LossInputs`
   (advantages, pi_old, correction x Clip-Cov weights, the KL loss's reference/behaviour
   log-probs and keep factor, KL-Cov's selection) and `LossSettings` (`_loss_inputs`).
4. S inner steps over the FIXED inputs; each accumulates micro-batch gradients of
   `compute_loss` (each micro-batch's share of the full-batch loss, see training/rl/loss.py)
   and takes one optimizer step. The loop has no algorithm branches.

One forward instead of two (cfg.fused_scoring, `_fuses_scoring`): with one inner step, theta_k is
the step's own theta, so its forward already computes pi_old. When nothing needs the whole
batch's log-probs before the loss (no KL in the reward, no Clip-/KL-Cov selection, no max_vllm_kl
skip, no correction_denominator 'kept'), the rows to be trained skip pass 1: the inner step takes pi_old (detached) and the
correction, both per row, from each micro-batch's forward before that micro-batch's loss, and
pass 1's metrics are read off the same log-probs afterwards. The ratio is exp(logp -
logp.detach()) = 1 exactly, as TRL's at num_iterations=1; only rows that are not trained (invalid
ones, dropped groups) still get a no-grad pass. Saves one forward of the batch (~20% of training).

Rows whose gradient is exactly zero (cfg.skip_zero_gradient_rows, `_zero_gradient_rows`): a trained
row with advantage exactly 0, under a config with no term that reaches such rows (no KL loss, no
KL-Cov), is not forwarded or backwarded in the inner steps. It stays in the loss inputs, so the
normalizers are the whole batch's, and the trained rows are chunked in two parts (with gradient, without)
whether or not the second is skipped, so the other micro-batches and the update are the same bit for
bit. Its pi_old is still computed (fused: a no-grad pass of the skipped rows only): Clip-Cov's
batch-wide centring and count, the max_vllm_kl gate and the diagnostics read every row's log-probs.

Invalid rows (unparsable/truncated) are never trained on: their mask is 0 in `LossInputs`, and
entropy, perplexity, vllm_kl and the correction are over valid rows only.

Memory: every pass goes micro-batch by micro-batch through `response_logprobs` (chunked LM
head), and entropy through `entropy_from_hidden` (chunked): no [tokens, vocab] logits exist for
more than one chunk at a time. Dropout must be off in `model` (RL needs the trainer's
log-probs at theta_k to be deterministic); this module does not change train/eval mode.

Packed rows (cfg.pack_rows; 'auto', the default: wherever packing is exact for the model): each micro-batch's rows run through the decoder as one sequence
(`packed_response_logprobs`: no padding, position ids restarting per row, the varlen attention kernel, set for the
whole update by `_attention_for`), and come back as the same `[mb, w]` log-probs and entropy: the micro-batches,
the loss inputs and every term of the loss are as in the padded path (tests/test_rl_packed_rows.py).

Token-budget micro-batches (cfg.micro_batch_tokens, `_micro_batches`): every pass's micro-batches hold up to a
budget of decoder tokens instead of a number of rows, dealt so that every torchrun rank runs as many micro-batches
with about as many tokens (training/rl/batches/micro_batches.py); only the grouping changes, the loss does not
(tests/test_rl_token_budget.py).

Precision (cfg.precision): every trainer forward, the no-grad scoring pass and the inner steps
alike, goes through `_forward_logprobs`, under bf16 autocast or in fp32; pi_old and pi_theta are
therefore computed at the same precision and the first inner step's ratio is exactly 1.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import AbstractContextManager as ContextManager, nullcontext
from dataclasses import dataclass

import torch
from torch import Tensor

from passband.training.heap import trim_heap, use_heap
from passband.training.logprobs import ResponseLogprobs, packed_response_logprobs, pad_rows, response_logprobs
from passband.training.rl.algebra.advantages import group_advantages, zero_variance_groups
from passband.training.rl.batches.batching import RolloutBatch
from passband.training.rl.batches.micro_batches import token_budget_micro_batches
from passband.training.lora.adapters import adapters_disabled
from passband.training.rl.config import RLAlgoConfig
from passband.training.rl.algebra.covariance import clip_cov_keep_mask, kl_cov_selection
from passband.training.rl.algebra.entropy import entropy_from_hidden
from passband.training.rl.algebra.kl import kl_reward_penalty
from passband.training.rl.loss import LossInputs, LossSettings, compute_loss, loss_settings
from passband.training.rl.algebra.mismatch import (effective_sample_size, importance_weights, mismatch_kl, mismatch_stats,
                                           rejection_fractions, response_perplexity)
from passband.training.rl.ranks import merge_rows, own_chunks, through_root
from passband.training.rl.monitoring.rollout_metrics import rollout_metrics
from passband.training.rl.update_metrics import BatchMetrics, StepsMetrics, ThetaKMetrics, UpdateMetrics, summarize_steps
from passband.training.runtime.settings import Precision
from passband.training.runtime.device import fused_on
from passband.training.runtime.distributed import data_parallel_size, full_norm, sequence_parallel_size, trainer_mesh
from passband.training.runtime.mesh import sequence_parallel_group
from passband.training.runtime.packed_rows import packing_refusal
from passband.training.runtime.ulysses import gather_sequence
from passband.training.runtime.precision import autocast_for, resolve_precision
from passband.training.runtime.varlen_attention import varlen_attention

__all__ = ["LossInputs", "RolloutBatch", "advantages_with_kl", "build_optimizer", "rl_update"]


def build_optimizer(model: torch.nn.Module, cfg: RLAlgoConfig) -> torch.optim.Optimizer:
    """cfg.optimizer over the trainable parameters (training/optim/: AdamW, or Muon and AdamW) with the config's
    lr, betas and weight decay; AdamW fused on CUDA."""
    from passband.training.optim.optimizer import build_optimizer as build

    device = next(p.device for p in model.parameters() if p.requires_grad)
    return build(model, cfg.optimizer, cfg.lr, cfg.weight_decay, cfg.betas, fused=bool(fused_on(device)))


def advantages_with_kl(
    rewards: Tensor,
    valid: Tensor,
    group_size: int,
    cfg: RLAlgoConfig,
    trainer_logp: Tensor | None = None,
    ref_logp: Tensor | None = None,
    mask: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """(advantages `[B]`, the KL-shaped rewards `[B]`: the verifier's rewards minus the penalty).

    With KL in the reward (kl_coef > 0, placement 'reward') the penalty is
    p_i = kl_coef * sum over response tokens of (trainer_logp - ref_logp) (k1, detached), and
      A_i = group_advantages(r)_i - (p_i - mean_group(p)),
    the verifier's advantage (std-scaled if cfg.scale_by_std) minus the group-centred penalty,
    NOT divided by the group's reward std: dividing r - p by std(r - p) would rescale the KL
    coefficient by a per-group factor (docs/recipe.md section 6), large in nearly-solved groups. The
    centring is a baseline (E[grad log pi] = 0), so the expected gradient is still
    kl_coef times the reverse-KL gradient. A sequence the policy made likelier than the
    reference did than its group-mates gets a lower advantage.
    rewards: `[B]`, NaN allowed where `valid` is False; trainer_logp/ref_logp/mask: `[B, T]`.
    """
    advantages = group_advantages(rewards, group_size, cfg.scale_by_std, cfg.eps, valid)
    if cfg.kl_coef > 0 and cfg.kl_placement == "reward":
        if trainer_logp is None or ref_logp is None or mask is None:
            raise ValueError("KL in the reward needs trainer_logp, ref_logp and mask")
        penalty = kl_reward_penalty(trainer_logp, ref_logp, mask, cfg.kl_coef)
        advantages = advantages - group_advantages(penalty, group_size, scale_by_std=False, valid=valid)
        rewards = rewards - penalty
    return advantages, rewards


def _micro_batches(batch: RolloutBatch, rows: list[int], cfg: RLAlgoConfig) -> list[list[int]]:
    """`rows` in micro-batches: cfg.micro_batch_tokens decoder tokens each, dealt evenly across the trainer ranks
    (training/rl/batches/micro_batches.py), or else cfg.micro_batch_size rows each, rows of similar length
    together (sorted by prompt + response length, stable). A padded micro-batch is padded to its own longest row,
    so in rollout order (one prompt's G samples per micro-batch, a 128-token ramble padding seven short answers)
    most of its tokens can be padding. Every row's share of the loss is its own, so the grouping changes nothing
    but the order in which gradients are summed."""
    lengths = [len(p) + len(r) for p, r in zip(batch.prompt_ids, batch.response_ids)]
    if cfg.micro_batch_tokens is not None:
        # dealt over the data-parallel ranks: an SP group's ranks run the same micro-batches, each a shard of it
        return token_budget_micro_batches(rows, lengths, cfg.micro_batch_tokens, data_parallel_size(), cfg.pack_rows,
                                          cfg.pad_to_multiple)
    by_length = sorted(rows, key=lambda row: lengths[row])
    size = cfg.micro_batch_size
    return [by_length[start : start + size] for start in range(0, len(by_length), size)]


def _chunks(batch: RolloutBatch, parts: list[list[int]], cfg: RLAlgoConfig) -> list[list[int]]:
    """`_micro_batches` of each part on its own, in order: no micro-batch mixes two parts. The trained rows
    with gradient and those without (`_zero_gradient_rows`) are two parts, so leaving the latter out leaves
    every other micro-batch, its padding and its GEMM shapes as they were: the same gradient bit for bit.
    (Under ranks with a token budget each part's micro-batches are dealt on their own, a multiple of the ranks
    where the rows allow, so every part starts at rank 0.)"""
    return [chunk for part in parts for chunk in _micro_batches(batch, part, cfg)]


def _zero_gradient_rows(cfg: RLAlgoConfig, rows: list[int], advantages: Tensor) -> list[int]:
    """The rows of `rows` whose loss has exactly zero gradient: advantage exactly 0, where no term reaches
    such rows (`RLAlgoConfig.zero_gradient_skip_blocker`; [] where one does). Their backward is all zeros
    (every term is A, finite factors and the detached weights multiplied), which adds nothing to a gradient."""
    if cfg.zero_gradient_skip_blocker() is not None:
        return []
    is_zero = (advantages == 0).tolist()
    return [i for i in rows if is_zero[i]]


def _fuses_scoring(cfg: RLAlgoConfig) -> bool:
    """Whether pi_old can come from the one inner step's own forward (module docstring): every use
    of the trainer's log-probs before the loss is then per row (the correction weights) or absent."""
    return (cfg.fused_scoring and cfg.num_inner_steps == 1 and cfg.cov_method == "none" and cfg.max_vllm_kl is None
            and not (cfg.kl_coef > 0 and cfg.kl_placement == "reward")
            # 'kept' divides by the tokens the whole batch's correction keeps, which the first micro-batch's
            # loss cannot know before the later micro-batches are forwarded.
            and cfg.correction_denominator == "all")


def _forward_logprobs(model: torch.nn.Module, batch: RolloutBatch, chunk: list[int], cfg: RLAlgoConfig,
                      precision: Precision, hidden: list[Tensor] | None = None) -> ResponseLogprobs:
    """The one trainer forward of RL: pi_old (scoring pass) and pi_theta (inner steps) both come from
    here, so they share precision and chunking and the first step's ratio is exactly 1. Under bf16
    autocast the decoder's matmuls run in bf16; the LM head and log-softmax stay fp32
    (`logprobs_of_tokens`). Backward runs outside the autocast context, as torch prescribes.
    hidden: when given, receives the decoder's final hidden states `[mb, L, H]` (`[1, N, H]` packed) (a forward
    hook), from which `_chunk_entropy` computes the entropy without another forward. cfg.pack_rows: the rows in
    one sequence (`packed_response_logprobs`), the same `[mb, w]` log-probs up to float rounding."""
    handle = None
    # Ulysses (training/runtime/ulysses.py): each rank forwards its shard of the packed rows (`_attention_for`
    # refuses it unpacked); the entropy's hidden states are the whole pack's, gathered.
    sequence_group = sequence_parallel_group(trainer_mesh(model.lm_head.weight.device.type))
    if hidden is not None:
        handle = model.model.register_forward_hook(
            lambda _m, _args, out: hidden.append(gather_sequence(out.last_hidden_state, sequence_group)))
    try:
        with autocast_for(precision, model.lm_head.weight.device):
            def run(lm: torch.nn.Module) -> tuple[Tensor, Tensor]:
                prompts, responses = [batch.prompt_ids[i] for i in chunk], [batch.response_ids[i] for i in chunk]
                if cfg.pack_rows:
                    out = packed_response_logprobs(lm, prompts, responses, batch.temperature, cfg.logprob_chunk_size,
                                                   cfg.pad_to_multiple, sequence_group)
                else:
                    out = response_logprobs(lm, prompts, responses, batch.temperature, cfg.logprob_chunk_size,
                                            cfg.pad_to_multiple)
                return out.logp, out.mask

            logp, mask = through_root(model, run)
            return ResponseLogprobs(logp=logp, mask=mask)
    finally:
        if handle is not None:
            handle.remove()


def _response_hidden(hidden: Tensor, prompt_ids: list[list[int]], response_ids: list[list[int]], width: int,
                     packed: bool = False) -> Tensor:
    """[mb, width, H] final hidden states at the positions that predict each response token; `hidden` is
    `[mb, L, H]`, or `[1, N, H]` when `packed` (row i from the sum of the earlier rows' lengths on)."""
    out = hidden.new_zeros(len(response_ids), width, hidden.shape[-1])
    row_start = 0
    for i, (prompt, response) in enumerate(zip(prompt_ids, response_ids)):
        start = len(prompt) - 1  # hidden state t predicts token t + 1
        if packed:
            out[i, : len(response)] = hidden[0, row_start + start : row_start + start + len(response)]
            row_start += len(prompt) + len(response)
        else:
            out[i, : len(response)] = hidden[i, start : start + len(response)]
    return out


@torch.no_grad()
def _chunk_entropy(model: torch.nn.Module, batch: RolloutBatch, chunk: list[int], hidden: Tensor, mask: Tensor,
                   cfg: RLAlgoConfig) -> Tensor:
    """Token entropy `[mb, w]` of the rows `chunk` from their forward's final hidden states `[mb, L, H]`."""
    responses = _response_hidden(hidden.detach(), [batch.prompt_ids[i] for i in chunk],
                                 [batch.response_ids[i] for i in chunk], mask.shape[1], cfg.pack_rows) / batch.temperature
    return through_root(model, lambda lm: (
        entropy_from_hidden(responses, lm.lm_head.weight, mask, cfg.logprob_chunk_size, reduction="none"),))[0]


@torch.no_grad()
def _scoring_pass(
    model: torch.nn.Module, batch: RolloutBatch, chunks: list[list[int]], width: int, cfg: RLAlgoConfig,
    with_entropy: bool, precision: Precision,
) -> tuple[Tensor, Tensor]:
    """Log-probs and token entropy `[B, width]` (0 outside `chunks`) of `model` at its current weights,
    one forward per micro-batch of `chunks`.

    The entropy reuses the hidden states of the log-prob forward, so one forward serves both and
    the log-probs are exactly those that `response_logprobs` computes in the inner steps.
    """
    device = model.lm_head.weight.device
    logp = torch.zeros(batch.num_rows, width, device=device)
    entropy = torch.zeros(batch.num_rows, width, device=device)
    own_rows = []
    for chunk, counts in own_chunks(chunks, device):  # all of them in one process; this rank's share under ranks
        captured: list[Tensor] = []
        out = _forward_logprobs(model, batch, chunk, cfg, precision, captured if with_entropy else None)
        chunk_entropy = _chunk_entropy(model, batch, chunk, captured[0], out.mask, cfg) if with_entropy else None
        if not counts:  # a rank's padding pass: it joined the others' collectives, its values are not used
            continue
        index = torch.tensor(chunk).to(device)
        chunk_width = out.logp.shape[1]
        logp[index, :chunk_width] = out.logp
        if with_entropy:
            entropy[index, :chunk_width] = chunk_entropy
        own_rows += chunk
    every_row = [row for chunk in chunks for row in chunk]
    merge_rows(logp, own_rows, every_row)
    merge_rows(entropy, own_rows, every_row)
    return logp, entropy


def _score_rows(model: torch.nn.Module, batch: RolloutBatch, valid_parts: list[list[int]], invalid_rows: list[int],
                width: int, cfg: RLAlgoConfig, precision: Precision) -> tuple[Tensor, Tensor]:
    """`_scoring_pass` of the valid rows (log-probs and entropy), each of `valid_parts` chunked on its own as
    the inner steps chunk it (`_chunks`), and of `invalid_rows` (log-probs only): `[B, width]`, 0 elsewhere."""
    logp, entropy = _scoring_pass(model, batch, _chunks(batch, valid_parts, cfg), width, cfg, True, precision)
    invalid = _scoring_pass(model, batch, _micro_batches(batch, invalid_rows, cfg), width, cfg, False, precision)[0]
    return logp + invalid, entropy


def _loss_inputs(
    cfg: RLAlgoConfig, mask: Tensor, advantages: Tensor, trainer_logp: Tensor, engine_logp: Tensor,
    correction: Tensor, ref_logp: Tensor | None, generator: torch.Generator | None,
) -> LossInputs:
    """Everything algorithm-specific, decided once at theta_k (all `[B, T]` but advantages `[B]`).

    mask: the training mask (valid rows of kept groups); correction: `importance_weights` at theta_k.
    With correction_denominator 'kept' the mask, and with it every count the loss divides by, drops the
    tokens the correction rejects (a rejected row has none left): their policy and KL terms are 0 either way,
    and KL-Cov's penalty leaves them too.
    """
    old_logp = trainer_logp if cfg.behaviour_policy == "trainer" else engine_logp
    keep = (correction > 0).to(correction.dtype)  # the correction's rejections, 0/1
    if cfg.correction_denominator == "kept":
        mask = mask * keep
    # With the engine as pi_old the ratio pi_theta/pi_engine already contains rho, so reweighting
    # by rho again would count the mismatch twice: only the correction's rejections apply.
    weights = correction if cfg.behaviour_policy == "trainer" else keep
    if cfg.cov_method == "clip_cov":
        weights = weights * clip_cov_keep_mask(
            trainer_logp, old_logp, advantages, mask, cfg.cov_fraction, cfg.cov_bounds[0], cfg.cov_bounds[1],
            cfg.clip_low, cfg.clip_high, generator,
        )
    kl_in_loss = ref_logp is not None and cfg.kl_placement == "loss"
    return LossInputs(
        mask=mask, advantages=advantages, old_logp=old_logp, weights=weights,
        num_tokens=float((mask > 0).sum()), num_sequences=float(((mask > 0).sum(dim=-1) > 0).sum()),
        ref_logp=ref_logp if kl_in_loss else None,
        # The engine drew the tokens, so a loss-form KL is off-policy even at S = 1 with no correction
        # (docs/recipe.md section 6: any rollout/trainer mismatch); pi_theta/pi_engine is its weight, bounded by the
        # correction (cap C, and 0 where the correction rejected), as the policy loss is.
        behaviour_logp=engine_logp if kl_in_loss else None,
        kl_keep=keep if kl_in_loss else None,
        kl_cov_selected=kl_cov_selection(trainer_logp, advantages, mask, cfg.cov_fraction)
        if cfg.cov_method == "kl_cov" else None,
    )


def _inner_step(model: torch.nn.Module, optimizer: torch.optim.Optimizer, batch: RolloutBatch,
                chunks: list[list[int]], inputs_at: Callable[[Tensor], LossInputs], step_logp: Tensor,
                settings: LossSettings, cfg: RLAlgoConfig, precision: Precision,
                entropy: Tensor | None = None) -> dict[str, float]:
    """One optimizer step on the fixed batch; returns its loss, grad norm and loss metrics.

    chunks: the micro-batches to forward and backward: the trained rows, less the skipped ones
    (`_zero_gradient_rows`), whose share of the loss and of its gradient is exactly 0.
    step_logp `[B, T]` (zeros) receives the detached log-probs of the rows of `chunks` at this step's theta.
    inputs_at(step_logp) gives the loss inputs: fixed in a plain step; in a fused first step they
    are read off step_logp, whose rows of the current micro-batch are filled before its loss.
    entropy: when given `[B, T]`, receives the token entropy of those rows (fused first step).
    """
    optimizer.zero_grad(set_to_none=True)
    params = [p for group in optimizer.param_groups for p in group["params"]]
    own_rows = []
    for chunk, counts in own_chunks(chunks, step_logp.device):  # all in one process; this rank's share under ranks
        hidden: list[Tensor] | None = [] if entropy is not None else None
        out = _forward_logprobs(model, batch, chunk, cfg, precision, hidden)
        if not counts:  # a rank's padding pass (training/rl/ranks.py): the others' collectives, zero gradient
            (out.logp.sum() * 0.0).backward()
            if entropy is not None:
                _chunk_entropy(model, batch, chunk, hidden[0], out.mask, cfg)
            continue
        own_rows += chunk
        index = torch.tensor(chunk).to(out.logp.device)
        width = out.logp.shape[1]
        step_logp[index, :width] = out.logp.detach()
        compute_loss(out.logp, inputs_at(step_logp).rows(index, width), settings, with_metrics=False).loss.backward()
        if entropy is not None:  # after backward: its [chunk, V] logits do not add to the activations' peak
            entropy[index, :width] = _chunk_entropy(model, batch, chunk, hidden[0], out.mask, cfg)
        if cfg.trim_heap and cfg.trim_heap_each_micro_batch:
            del out, hidden  # this micro-batch's last references, so its activations are free to return
            trim_heap()
    every_row = [row for chunk in chunks for row in chunk]
    merge_rows(step_logp, own_rows, every_row)  # under ranks: every rank's copy holds every forwarded row
    if entropy is not None:
        merge_rows(entropy, own_rows, every_row)
    if not chunks:  # every row skipped: their backward would have left zeros, which the step still applies
        for p in params:
            p.grad = torch.zeros_like(p)
    max_norm = cfg.grad_clip if cfg.grad_clip is not None else float("inf")
    grad_norm = float(full_norm(torch.nn.utils.clip_grad_norm_(params, max_norm)))
    _set_scheduled_lr(optimizer, params, cfg)
    optimizer.step()
    # the gradients are spent: freed now, not at the next step's start, so they do not sit beside
    # the engine through the rollouts (4 bytes per trained parameter; training/memory_model.py)
    optimizer.zero_grad(set_to_none=True)
    # The forwarded rows at once (no gradient): their loss is the sum of the micro-batch shares, the
    # full-batch loss (a skipped row's share is 0), and the clip/ratio fractions are over the forwarded
    # rows, not over the last micro-batch; a skipped row's ratio at this theta is never computed.
    index = torch.tensor(sorted(row for chunk in chunks for row in chunk), dtype=torch.long).to(step_logp.device)
    with torch.no_grad():
        full = compute_loss(step_logp[index], inputs_at(step_logp).rows(index, step_logp.shape[1]), settings)
    return {"loss": full.loss.item(), "grad_norm": grad_norm, **full.metrics}


def _set_scheduled_lr(optimizer: torch.optim.Optimizer, params: list[Tensor], cfg: RLAlgoConfig) -> None:
    """Set this step's rate (cfg.lr_factor) from the optimizer's own step count, which a checkpoint keeps, so a
    resumed run continues the schedule where it stopped. A constant rate without warmup leaves the optimizer's lr
    as it was built (`build_optimizer` builds it with cfg.lr; tests build theirs with their own)."""
    if cfg.lr_schedule == "constant" and cfg.lr_warmup_steps == 0:
        return
    from passband.training.optim.optimizer import set_scheduled_lr

    state = optimizer.state.get(params[0], {})  # Muon's matrices count steps as AdamW's weights do
    step = int(state["step"]) if "step" in state else 0  # one read of the device per step on CUDA (fused AdamW)
    set_scheduled_lr(optimizer, cfg.optimizer, cfg.lr, lambda peak: peak * cfg.lr_factor(step))


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
    Clip-Cov's random choice. Returns python floats, `UpdateMetrics.as_dict()` (training/rl/update_metrics.py
    says what each is). With cfg.trim_heap, the heap the update freed (its activations) goes back to the OS
    before returning.
    """
    cfg = cfg.model_copy(update={"pack_rows": packs_rows(model, cfg)})
    longest = max(len(prompt) + len(response) for prompt, response in zip(batch.prompt_ids, batch.response_ids))
    use_heap(cfg.heap, longest // sequence_parallel_size())
    with _attention_for(model, ref_model, cfg):
        metrics = _update(model, ref_model, optimizer, batch, cfg, generator)
    if cfg.trim_heap:
        trim_heap()
    return metrics.as_dict() | {"packed_rows": float(cfg.pack_rows)}


def packs_rows(model: torch.nn.Module, cfg: RLAlgoConfig) -> bool:
    """Whether the update packs its micro-batches' rows: cfg.pack_rows, 'auto' resolved for `model` (packed
    where packing reproduces its padded forward: training/runtime/packed_rows.py: packing_refusal)."""
    refusal = packing_refusal(getattr(model, "lm", model))  # the plain LM under ranks (ShardedPolicy.lm)
    if cfg.pack_rows is True and refusal is not None:
        raise ValueError(f"algo.pack_rows: true, but packed rows would not reproduce this model's forward: {refusal}; "
                         "set algo.pack_rows: auto (padded here) or false")
    return cfg.pack_rows is True or (cfg.pack_rows == "auto" and refusal is None)


def _attention_for(model: torch.nn.Module, ref_model: torch.nn.Module | None, cfg: RLAlgoConfig) -> ContextManager:
    """cfg.pack_rows: the policy and the reference on the varlen kernel for the whole update (its backward and
    the checkpointed layers' recompute included), their own attention back after it; else nothing changes.
    Sequence parallelism splits the packed sequence, so it needs cfg.pack_rows, and the kernel that runs
    head-parallel (varlen_sdpa, whatever the device)."""
    device = model.lm_head.weight.device
    sequence_parallel = sequence_parallel_group(trainer_mesh(device.type)) is not None
    if sequence_parallel and not cfg.pack_rows:
        raise ValueError("distributed.sequence_parallel > 1 needs algo.pack_rows: true (each sequence-parallel "
                         "rank forwards its shard of a micro-batch's packed rows)")
    if not cfg.pack_rows:
        return nullcontext()
    # the plain LM under ranks (ShardedPolicy.lm); the reference is the policy itself under LoRA
    models = list({id(m): m for m in (getattr(m, "lm", m) for m in (model, ref_model) if m is not None)}.values())
    return varlen_attention(models, device, sequence_parallel)


@dataclass(frozen=True)
class _Rows:
    """The batch on the trainer's device: the engine's log-probs and the masks `[B, T]`, and which rows have
    response tokens, valid or not."""

    engine_logp: Tensor
    response_mask: Tensor
    valid: Tensor  # [B] bool
    valid_mask: Tensor  # [B, T] response tokens of valid rows
    valid_rows: list[int]
    invalid_rows: list[int]

    @property
    def width(self) -> int:
        return self.response_mask.shape[1]


def _rows(batch: RolloutBatch, device: torch.device) -> _Rows:
    engine_logp, response_mask = (t.to(device) for t in pad_rows(batch.engine_logp, torch.float32))
    if batch.loss_mask is not None:  # multi-turn: the environment's tokens are context only, never trained on
        response_mask = response_mask * pad_rows(batch.loss_mask, torch.float32)[0].to(device)
    scored_rows = [i for i in range(batch.num_rows) if batch.response_ids[i]]
    valid = torch.tensor(batch.valid, dtype=torch.bool).to(device)
    return _Rows(engine_logp=engine_logp, response_mask=response_mask, valid=valid,
                 valid_mask=response_mask * valid[:, None], valid_rows=[i for i in scored_rows if batch.valid[i]],
                 invalid_rows=[i for i in scored_rows if not batch.valid[i]])


@dataclass(frozen=True)
class _Plan:
    """Phase 2: the advantages `[B]` and which rows train, in which micro-batches."""

    advantages: Tensor
    train_mask: Tensor  # [B, T] response tokens of the trained rows (valid rows of kept groups)
    rows: list[int]  # trained: the normalizers (tokens, sequences) are theirs, skipped rows included
    live: list[int]  # trained rows with gradient
    zero: list[int]  # trained rows whose gradient is exactly 0 (`_zero_gradient_rows`)
    skipped: list[int]  # the zero rows the inner steps do not forward (cfg.skip_zero_gradient_rows)
    untrained: list[int]  # valid rows of dropped groups: scored for the metrics only
    step_chunks: list[list[int]]
    metrics: BatchMetrics


def _score_reference(model: torch.nn.Module, ref_model: torch.nn.Module | None, batch: RolloutBatch, rows: _Rows,
                     cfg: RLAlgoConfig, precision: Precision) -> tuple[Tensor | None, Tensor | None, Tensor | None]:
    """Phase 1, what the advantages need: the reference's log-probs when KL is on (ref_logp, None when off), and
    with KL in the reward theta_k's log-probs and entropy of every valid row, scored first in one part (never
    fused). Returns (ref_logp, trainer_logp, entropy), each `[B, width]` or None."""
    ref_logp = None
    if cfg.kl_coef > 0:
        with adapters_disabled(ref_model):  # with LoRA the reference is the policy's own frozen base
            ref_logp, _ = _scoring_pass(ref_model, batch, _micro_batches(batch, rows.valid_rows, cfg),
                                        rows.width, cfg, False, precision)
    if cfg.kl_coef > 0 and cfg.kl_placement == "reward":
        return (ref_logp, *_score_rows(model, batch, [rows.valid_rows], rows.invalid_rows, rows.width, cfg, precision))
    return ref_logp, None, None


def _plan(batch: RolloutBatch, rows: _Rows, cfg: RLAlgoConfig, trainer_logp: Tensor | None,
          ref_logp: Tensor | None) -> _Plan:
    """Phase 2: advantages, and the rows to train. Zero-variance groups are counted on the verifier's rewards
    (the task signal) and dropped, when asked, by the rewards the advantages use (KL-shaped ones differ)."""
    device, valid = rows.valid.device, rows.valid
    rewards = torch.tensor(batch.rewards, dtype=torch.float32).to(device)
    num_groups = batch.num_rows // batch.group_size
    zero_variance_frac = float(zero_variance_groups(rewards, batch.group_size, valid).sum()) / num_groups
    advantages, rewards = advantages_with_kl(rewards, valid, batch.group_size, cfg, trainer_logp, ref_logp,
                                             rows.valid_mask)
    penalty_mean = None
    if ref_logp is not None and cfg.kl_placement == "reward":
        shaping = torch.tensor(batch.rewards).to(device) - rewards
        penalty_mean = float(shaping[valid].mean()) if bool(valid.any()) else 0.0
    dropped = torch.zeros(num_groups, dtype=torch.bool, device=device)
    if cfg.drop_zero_variance_groups:
        dropped = zero_variance_groups(rewards, batch.group_size, valid)
    is_dropped = dropped.tolist()  # one read of the device, not one per row
    trained = [i for i in rows.valid_rows if not is_dropped[i // batch.group_size]]
    kept = torch.zeros(batch.num_rows, dtype=torch.bool, device=device)
    kept[torch.tensor(trained, dtype=torch.long).to(device)] = True
    train_mask = rows.response_mask * kept[:, None]
    # Trained rows with gradient (`live`) and without (`zero`), chunked apart whether or not the
    # latter are skipped, so skipping them changes no other micro-batch. They stay in `train_mask`:
    # the normalizers (tokens, sequences) are the whole batch's.
    zero = _zero_gradient_rows(cfg, trained, advantages)
    live = [i for i in trained if i not in set(zero)]
    skipped = zero if cfg.skip_zero_gradient_rows else []
    step_chunks = _chunks(batch, [live] if cfg.skip_zero_gradient_rows else [live, zero], cfg)
    in_training = set(trained)
    metrics = BatchMetrics(
        zero_variance_group_frac=zero_variance_frac, kl_reward_penalty_mean=penalty_mean,
        advantages_std=float(advantages[valid].std()) if int(valid.sum()) > 1 else 0.0,
        num_dropped_groups=float(dropped.sum()), num_train_sequences=float(len(trained)),
        num_train_tokens=float(train_mask.sum()), num_skipped_rows=float(len(skipped)),
        num_skipped_tokens=float(sum(len(batch.response_ids[i]) for i in skipped)),
    )
    return _Plan(advantages=advantages, train_mask=train_mask, rows=trained, live=live, zero=zero, skipped=skipped,
                 untrained=[i for i in rows.valid_rows if i not in in_training], step_chunks=step_chunks,
                 metrics=metrics)


def _theta_k_metrics(rows: _Rows, trainer_logp: Tensor, entropy: Tensor, ref_logp: Tensor | None,
                     correction: Tensor, cfg: RLAlgoConfig) -> ThetaKMetrics:
    """theta_k's view of the batch: the mismatch with the engine, perplexity, entropy, KL to the reference."""
    engine_logp, valid_mask = rows.engine_logp, rows.valid_mask
    num_valid_tokens = valid_mask.sum().clamp(min=1)
    return ThetaKMetrics(
        vllm_kl=mismatch_kl(trainer_logp, engine_logp, valid_mask),
        vllm_kl_all=mismatch_kl(trainer_logp, engine_logp, rows.response_mask),
        mismatch_ess=effective_sample_size(trainer_logp, engine_logp, valid_mask),
        trainer_ppl=response_perplexity(trainer_logp, valid_mask),
        entropy=float((entropy * valid_mask).sum() / num_valid_tokens),
        mismatch=mismatch_stats(trainer_logp, engine_logp, valid_mask, correction),
        would_reject=rejection_fractions(trainer_logp, engine_logp, valid_mask, cfg.rejection_bounds()),
        kl_ref_k1=float(((trainer_logp - ref_logp) * valid_mask).sum() / num_valid_tokens)
        if ref_logp is not None else None,
    )


def _update(model: torch.nn.Module, ref_model: torch.nn.Module | None, optimizer: torch.optim.Optimizer,
            batch: RolloutBatch, cfg: RLAlgoConfig, generator: torch.Generator | None) -> UpdateMetrics:
    """`rl_update` without the heap trim: score, advantages, steps (the module docstring's order of work)."""
    start = time.perf_counter()
    if cfg.kl_coef > 0 and ref_model is None:
        raise ValueError(f"kl_coef={cfg.kl_coef} needs a ref_model (the frozen reference policy)")
    rollouts = rollout_metrics(batch)
    precision = resolve_precision(cfg.precision, model.lm_head.weight.device)
    rows = _rows(batch, model.lm_head.weight.device)
    threshold, threshold_low = cfg.correction_bounds()

    def correction_of(trainer_logp: Tensor) -> Tensor:
        return importance_weights(trainer_logp, rows.engine_logp, rows.valid_mask, cfg.correction, threshold,
                                  threshold_low)

    # 1. theta_k's view of the batch (no grad), over EVERY row with response tokens: invalid rows
    # get no gradient, but their mismatch is measured (vllm_kl_all). They are scored in a pass of
    # their own, and the valid rows in the parts the inner steps chunk them in (`_chunks`): the first
    # step's log-probs then equal pi_old bit for bit (KL-Cov's |logp - old_logp| has a sign(float
    # noise) gradient at 0 otherwise, and micro-batch invariance would depend on where invalid rows
    # sit). KL in the reward needs every row's log-probs for the advantages, so it scores first, in one
    # part. Fused (module docstring): the rows to be trained are scored by the first step's own forward.
    def score(parts: list[list[int]]) -> tuple[Tensor, Tensor]:
        return _score_rows(model, batch, parts, rows.invalid_rows, rows.width, cfg, precision)

    ref_logp, trainer_logp, entropy = _score_reference(model, ref_model, batch, rows, cfg, precision)
    # 2. Advantages, and which rows train.
    plan = _plan(batch, rows, cfg, trainer_logp, ref_logp)
    fused = _fuses_scoring(cfg)
    if not fused and trainer_logp is None:
        trainer_logp, entropy = score([plan.live, plan.zero, plan.untrained])

    # 3. Everything algorithm-specific, once; the inner steps only evaluate `compute_loss`. Fused:
    # the one step reads pi_old and the correction off its own forward, micro-batch by micro-batch
    # (every input is per row there), and theta_k's metrics follow from the same log-probs. The rows
    # it skips are scored without gradient, chunked as the step would have, so every metric below
    # still covers every valid row, with the values the unskipped update reports.
    settings = loss_settings(cfg)
    steps = []
    train_start = time.perf_counter()
    if fused:
        trainer_logp, entropy = score([plan.skipped, plan.untrained])
        if plan.rows:
            def inputs_at(logp: Tensor) -> LossInputs:
                return _loss_inputs(cfg, plan.train_mask, plan.advantages, logp, rows.engine_logp, correction_of(logp),
                                    ref_logp, generator)

            steps.append(_inner_step(model, optimizer, batch, plan.step_chunks, inputs_at, trainer_logp, settings,
                                     cfg, precision, entropy))
    correction = correction_of(trainer_logp)
    theta_k = _theta_k_metrics(rows, trainer_logp, entropy, ref_logp, correction, cfg)

    if (cfg.max_vllm_kl is not None and theta_k.vllm_kl > cfg.max_vllm_kl) or not plan.rows:
        return UpdateMetrics(rollouts=rollouts, batch=plan.metrics, theta_k=theta_k, steps=None,
                             seconds=time.perf_counter() - start)
    inputs = _loss_inputs(cfg, plan.train_mask, plan.advantages, trainer_logp, rows.engine_logp, correction, ref_logp,
                          generator)
    for _ in range(cfg.num_inner_steps - len(steps)):
        steps.append(_inner_step(model, optimizer, batch, plan.step_chunks, lambda _logp: inputs,
                                 torch.zeros_like(trainer_logp), settings, cfg, precision))
    return UpdateMetrics(rollouts=rollouts, batch=plan.metrics, theta_k=theta_k,
                         steps=_steps_metrics(batch, plan, steps, optimizer, cfg, time.perf_counter() - train_start),
                         seconds=time.perf_counter() - start)


def _steps_metrics(batch: RolloutBatch, plan: _Plan, steps: list[dict[str, float]], optimizer: torch.optim.Optimizer,
                   cfg: RLAlgoConfig, train_seconds: float) -> StepsMetrics:
    num_forward_tokens = sum(len(batch.prompt_ids[i]) + len(batch.response_ids[i]) for chunk in plan.step_chunks
                             for i in chunk)
    return StepsMetrics(summary=summarize_steps(steps), lr=float(optimizer.param_groups[0]["lr"]),
                        train_tokens_per_s=num_forward_tokens * cfg.num_inner_steps / max(train_seconds, 1e-9))
