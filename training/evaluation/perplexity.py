"""Perplexity of one model on another model's outputs (RECIPE section 8).

The base model's perplexity on the RL model's responses shows whether RL kept its outputs inside
the base distribution: a value far above the base's perplexity on its own samples means the
candidate now writes text the base finds unlikely.
"""

from __future__ import annotations

import math

import torch

from passband.training.logprobs import response_logprobs


def perplexity_under(
    model: torch.nn.Module,
    prompt_ids: list[list[int]],
    response_ids: list[list[int]],
    temperature: float = 1.0,
    micro_batch_size: int = 8,
) -> float:
    """exp(mean NLL per response token) of `response_ids` given `prompt_ids` under `model`.

    The mean is over all response tokens of all pairs (a long response weighs more than a short
    one), so the value does not depend on `micro_batch_size`. Empty responses add no tokens.
    Runs without grad and in eval mode; the model's training flag is restored afterwards.
    """
    if len(prompt_ids) != len(response_ids):
        raise ValueError(f"perplexity_under: {len(prompt_ids)} prompts but {len(response_ids)} responses")
    if micro_batch_size < 1:
        raise ValueError(f"perplexity_under: micro_batch_size must be >= 1, got {micro_batch_size}")
    for index, prompt in enumerate(prompt_ids):
        if not prompt:
            # The first response token is predicted from the last prompt position; none exists.
            raise ValueError(f"perplexity_under: prompt {index} is empty; it needs at least one token")
    pairs = [(p, r) for p, r in zip(prompt_ids, response_ids) if r]
    if not pairs:
        raise ValueError("perplexity_under: every response is empty, so perplexity is undefined")

    was_training = model.training
    model.eval()
    nll_sum = 0.0  # nats, summed over response tokens (float64 on the host: many micro-batches)
    num_tokens = 0
    with torch.no_grad():
        for start in range(0, len(pairs), micro_batch_size):
            batch = pairs[start : start + micro_batch_size]
            scored = response_logprobs(
                model, [p for p, _ in batch], [r for _, r in batch], temperature=temperature
            )
            nll_sum -= float((scored.logp.double() * scored.mask).sum())  # logp is 0 on padding
            num_tokens += int(scored.mask.sum())
    model.train(was_training)
    return math.exp(nll_sum / num_tokens)
