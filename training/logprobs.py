"""Trainer-side log-probs of given responses: the other half of the mismatch metric and of RL.

The engine reports log p_engine(token) from its processed distribution (logits / temperature);
here the torch model recomputes the same quantity, chunk by chunk along tokens so the
[tokens, vocab] logits tensor is never materialized (see training/runtime/chunked_loss.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch.distributed import ProcessGroup

from passband.training.runtime.chunked_loss import DEFAULT_CHUNK_SIZE, logprobs_of_tokens
from passband.training.runtime.packed_rows import pack_sequences
from passband.training.runtime.ulysses import gather_tokens, keep_in_backward, pack_multiple, shard_counts, token_shard


@dataclass
class ResponseLogprobs:
    """Per-token log-probs of a batch of responses, right-padded."""

    logp: torch.Tensor
    """[B, T] fp32 log-probs of the response tokens (0 on padding)."""
    mask: torch.Tensor
    """[B, T] 1.0 on response tokens, 0.0 on padding."""


def pad_rows(
    rows: list[list[float]] | list[list[int]], dtype: torch.dtype, multiple: int = 1
) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-pad ragged rows into ([B, T] values, [B, T] 0/1 mask), T the longest row rounded up to
    a multiple of `multiple`."""
    width = -(-max((len(r) for r in rows), default=0) // multiple) * multiple
    values = torch.zeros(len(rows), width, dtype=dtype)
    mask = torch.zeros(len(rows), width)
    for i, row in enumerate(rows):
        values[i, : len(row)] = torch.tensor(row, dtype=dtype)
        mask[i, : len(row)] = 1.0
    return values, mask


def response_logprobs(
    model: torch.nn.Module,
    prompt_ids: list[list[int]],
    response_ids: list[list[int]],
    temperature: float = 1.0,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    pad_to_multiple: int = 1,
) -> ResponseLogprobs:
    """log p_model(response_t | prompt, response_<t) / temperature-scaled, for one micro-batch.

    Differentiable when grad is enabled (RL calls it inside its loss). `model` is a HF causal LM
    whose `.model` returns final hidden states and whose `.lm_head` holds the [V, H] head. The
    decoder's input is right-padded to a multiple of `pad_to_multiple` tokens (fewer distinct
    shapes; the padding comes after every real token, so causal attention never reads it).
    """
    _check_rows(prompt_ids, response_ids, temperature)
    device = model.lm_head.weight.device
    sequences = [p + r for p, r in zip(prompt_ids, response_ids)]
    input_ids, attention = pad_rows(sequences, torch.long, pad_to_multiple)
    # use_cache=False: a training forward has no use for the KV cache transformers would otherwise build.
    hidden = model.model(input_ids=input_ids.to(device), attention_mask=attention.to(device),
                         use_cache=False).last_hidden_state
    # Token r_t sits at position len(prompt) + t and is predicted by the hidden state just before it.
    rows, cols, targets = [], [], []
    for i, (prompt, response) in enumerate(zip(prompt_ids, response_ids)):
        start = len(prompt) - 1
        rows += [i] * len(response)
        cols += range(start, start + len(response))
        targets += response
    # Built on the host, moved once: a host index into a device tensor is a copy per call (or an error).
    selected = hidden[torch.tensor(rows, dtype=torch.long).to(device), torch.tensor(cols, dtype=torch.long).to(device)]
    return _padded_logprobs(model, selected, response_ids, targets, temperature, chunk_size)


def packed_response_logprobs(
    model: torch.nn.Module,
    prompt_ids: list[list[int]],
    response_ids: list[list[int]],
    temperature: float = 1.0,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    pad_to_multiple: int = 1,
    sequence_parallel: ProcessGroup | None = None,
) -> ResponseLogprobs:
    """`response_logprobs` with the rows packed into one sequence (training/runtime/packed_rows.py): no padding
    between rows, position ids restarting per row, attention kept inside each row by the varlen kernel, which
    `model` must be set to (training/runtime/varlen_attention.py: varlen_attention). The same [B, T] result,
    equal to the padded forward's up to float rounding; `pad_to_multiple` rounds the pack's length instead.

    `sequence_parallel`: the Ulysses group (training/runtime/ulysses.py). The pack is rounded up to a multiple
    of its degree too, and this rank runs the decoder on its shard of the tokens (global position ids, the
    whole pack's cu_seqlens) and the LM head on the response tokens predicted from that shard; the per-token
    log-probs are gathered over the group, so every rank returns the whole [B, T] and whatever the caller
    computes from it (sequence sums, ratios, the loss) is the one-process value."""
    _check_rows(prompt_ids, response_ids, temperature)
    device = model.lm_head.weight.device
    packed = pack_sequences([p + r for p, r in zip(prompt_ids, response_ids)],
                            pack_multiple(pad_to_multiple, sequence_parallel))
    num_tokens = packed.input_ids.shape[1]
    mine = token_shard(num_tokens, sequence_parallel)  # every token in one process
    cu_seqlens = packed.cu_seqlens.to(device)
    parallel = {} if sequence_parallel is None else {"sequence_parallel_group": sequence_parallel}
    hidden = model.model(input_ids=packed.input_ids[:, mine].to(device),
                         position_ids=packed.position_ids[:, mine].to(device), use_cache=False,
                         cu_seq_lens_q=cu_seqlens, cu_seq_lens_k=cu_seqlens, max_length_q=packed.max_length,
                         max_length_k=packed.max_length, **parallel).last_hidden_state  # [1, this rank's tokens, H]
    positions, targets = [], []
    for start, prompt, response in zip(packed.row_starts, prompt_ids, response_ids):
        first = start + len(prompt) - 1  # the hidden state just before the row's first response token
        positions += range(first, first + len(response))
        targets += response
    own = [i for i, position in enumerate(positions) if mine.start <= position < mine.stop]
    selected = hidden[0, torch.tensor([positions[i] - mine.start for i in own], dtype=torch.long).to(device)]
    flat = _flat_logprobs(model, selected, [targets[i] for i in own], temperature, chunk_size)
    flat = gather_tokens(keep_in_backward(flat, hidden), shard_counts(positions, num_tokens, sequence_parallel),
                         sequence_parallel)
    return _response_rows(flat, response_ids, device)


def _check_rows(prompt_ids: list[list[int]], response_ids: list[list[int]], temperature: float) -> None:
    """The refusals both forwards share: one response per prompt, and a temperature that defines log-probs."""
    if len(prompt_ids) != len(response_ids):
        raise ValueError(f"{len(prompt_ids)} prompts but {len(response_ids)} responses")
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0 to define log-probs, got {temperature}")


def _padded_logprobs(model: torch.nn.Module, selected: torch.Tensor, response_ids: list[list[int]],
                     targets: list[int], temperature: float, chunk_size: int) -> ResponseLogprobs:
    """The log-probs of `targets` from their predicting hidden states `selected` [N, H], right-padded [B, T]."""
    flat = _flat_logprobs(model, selected, targets, temperature, chunk_size)
    return _response_rows(flat, response_ids, model.lm_head.weight.device)


def _flat_logprobs(model: torch.nn.Module, selected: torch.Tensor, targets: list[int], temperature: float,
                   chunk_size: int) -> torch.Tensor:
    """[N] log p(targets) from their predicting hidden states `selected` [N, H], the head chunk by chunk."""
    device = model.lm_head.weight.device
    return logprobs_of_tokens(selected / temperature, model.lm_head.weight,
                              torch.tensor(targets, dtype=torch.long).to(device), chunk_size)


def _response_rows(flat: torch.Tensor, response_ids: list[list[int]], device: torch.device) -> ResponseLogprobs:
    """The responses' log-probs `flat` [N], in row order, right-padded to [B, T] with the responses' mask."""
    width = max((len(r) for r in response_ids), default=0)
    logp = torch.zeros(len(response_ids), width, dtype=torch.float32, device=device)
    _, mask = pad_rows(response_ids, torch.long)
    mask = mask.to(device)
    logp = logp.masked_scatter(mask.bool(), flat)
    return ResponseLogprobs(logp=logp, mask=mask)


@torch.no_grad()
def sequence_logprobs(
    model: torch.nn.Module,
    prompt_ids: list[list[int]],
    response_ids: list[list[int]],
    temperature: float = 1.0,
    micro_batch_size: int = 8,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
) -> list[torch.Tensor]:
    """Per-token log-probs `[len(response_i)]` (fp32, no grad) of every response given its prompt.

    The one micro-batched scoring loop: perplexities (of traces, of another model's outputs) and
    the engine/trainer mismatch are all computed from its output. Responses are scored
    `micro_batch_size` at a time (one forward per micro-batch, right-padded), several times
    faster on a CPU than one forward per sequence; the values do not depend on the grouping.
    The model's training flag is restored afterwards (dropout off while scoring).
    """
    if len(prompt_ids) != len(response_ids):
        raise ValueError(f"{len(prompt_ids)} prompts but {len(response_ids)} responses")
    if micro_batch_size < 1:
        raise ValueError(f"micro_batch_size must be >= 1, got {micro_batch_size}")
    for index, (prompt, response) in enumerate(zip(prompt_ids, response_ids)):
        if response and not prompt:
            # The first response token is predicted from the last prompt position; none exists.
            raise ValueError(f"prompt {index} is empty; it needs at least one token")
    was_training = model.training
    model.eval()
    scored: list[torch.Tensor] = [torch.zeros(0) for _ in response_ids]
    rows = [i for i, response in enumerate(response_ids) if response]  # empty responses have nothing to score
    for start in range(0, len(rows), micro_batch_size):
        chunk = rows[start : start + micro_batch_size]
        out = response_logprobs(model, [prompt_ids[i] for i in chunk], [response_ids[i] for i in chunk],
                                temperature, chunk_size)
        for row, i in enumerate(chunk):
            scored[i] = out.logp[row, : len(response_ids[i])].float().cpu()
    model.train(was_training)
    return scored


def pooled_perplexity(logps: list[torch.Tensor]) -> float:
    """exp(mean NLL per token) over all tokens of all sequences (a long one weighs more)."""
    num_tokens = sum(len(lp) for lp in logps)
    if num_tokens == 0:
        raise ValueError("every response is empty, so perplexity is undefined")
    return math.exp(-sum(float(lp.double().sum()) for lp in logps) / num_tokens)


def sequence_perplexities(logps: list[torch.Tensor]) -> list[float]:
    """exp(mean NLL per token) of each sequence (nan for an empty one)."""
    return [math.exp(-float(lp.double().mean())) if len(lp) else float("nan") for lp in logps]


def engine_trainer_kl(
    model: torch.nn.Module,
    prompt_ids: list[list[int]],
    response_ids: list[list[int]],
    engine_logps: list[list[float]],
    temperature: float = 1.0,
    micro_batch_size: int = 8,
) -> float:
    """vllm_kl of sampled responses (docs/recipe.md section 5): mean over all response tokens of
    exp(d) - d - 1 with d = log p_trainer - log p_engine, the trainer being `model` at the
    engine's weights. Empty responses add no tokens."""
    from passband.training.rl.algebra.mismatch import mismatch_kl

    trainer = sequence_logprobs(model, prompt_ids, response_ids, temperature, micro_batch_size)
    rows = [i for i, response in enumerate(response_ids) if response]
    if not rows:
        return 0.0
    trainer_logp = torch.cat([trainer[i] for i in rows])[None, :]
    engine_logp = torch.tensor([lp for i in rows for lp in engine_logps[i]], dtype=torch.float32)[None, :]
    return mismatch_kl(trainer_logp, engine_logp, torch.ones_like(trainer_logp))
