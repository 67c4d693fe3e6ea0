"""Trainer-side log-probs of given responses: the other half of the mismatch metric and of RL.

The engine reports log p_engine(token) from its processed distribution (logits / temperature);
here the torch model recomputes the same quantity, chunk by chunk along tokens so the
[tokens, vocab] logits tensor is never materialized (see training/sft/chunked_loss.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from passband.training.sft.chunked_loss import DEFAULT_CHUNK_SIZE, logprobs_of_tokens


@dataclass
class ResponseLogprobs:
    """Per-token log-probs of a batch of responses, right-padded."""

    logp: torch.Tensor
    """[B, T] fp32 log-probs of the response tokens (0 on padding)."""
    mask: torch.Tensor
    """[B, T] 1.0 on response tokens, 0.0 on padding."""


def pad_rows(rows: list[list[float]] | list[list[int]], dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-pad ragged rows into ([B, T] values, [B, T] 0/1 mask)."""
    width = max((len(r) for r in rows), default=0)
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
) -> ResponseLogprobs:
    """log p_model(response_t | prompt, response_<t) / temperature-scaled, for one micro-batch.

    Differentiable when grad is enabled (RL calls it inside its loss). `model` is a HF causal LM
    whose `.model` returns final hidden states and whose `.lm_head` holds the [V, H] head.
    """
    if len(prompt_ids) != len(response_ids):
        raise ValueError(f"{len(prompt_ids)} prompts but {len(response_ids)} responses")
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0 to define log-probs, got {temperature}")
    device = model.lm_head.weight.device
    sequences = [p + r for p, r in zip(prompt_ids, response_ids)]
    input_ids, attention = pad_rows(sequences, torch.long)
    hidden = model.model(input_ids=input_ids.to(device), attention_mask=attention.to(device)).last_hidden_state
    # Token r_t sits at position len(prompt) + t and is predicted by the hidden state just before it.
    rows, cols, targets = [], [], []
    for i, (prompt, response) in enumerate(zip(prompt_ids, response_ids)):
        start = len(prompt) - 1
        rows += [i] * len(response)
        cols += range(start, start + len(response))
        targets += response
    selected = hidden[torch.tensor(rows, dtype=torch.long), torch.tensor(cols, dtype=torch.long)]  # [N, H]
    flat = logprobs_of_tokens(
        selected / temperature, model.lm_head.weight, torch.tensor(targets, device=device), chunk_size
    )
    width = max((len(r) for r in response_ids), default=0)
    logp = torch.zeros(len(response_ids), width, dtype=torch.float32, device=device)
    _, mask = pad_rows(response_ids, torch.long)
    mask = mask.to(device)
    logp = logp.masked_scatter(mask.bool(), flat)
    return ResponseLogprobs(logp=logp, mask=mask)
