"""Perplexity of one model on another model's outputs (docs/recipe.md section 8).

The base model's perplexity on the RL model's responses shows whether RL kept its outputs inside
the base distribution: a value far above the base's perplexity on its own samples means the
candidate now writes text the base finds unlikely.
"""

from __future__ import annotations

import torch

from passband.training.logprobs import pooled_perplexity, sequence_logprobs, sequence_perplexities


def spread_subset(rows: list, limit: int | None) -> list:
    """At most `limit` of `rows`, evenly spaced over the whole list (every row when `limit` is None
    or not below its length): rows in eval-set order then cover every set. Two lists of equal
    length in the same problem order (a model's samples and its baseline's) give the same positions."""
    if limit is None or limit >= len(rows):
        return list(rows)
    return [rows[i * len(rows) // limit] for i in range(limit)]


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
    """
    return pooled_perplexity(sequence_logprobs(model, prompt_ids, response_ids, temperature, micro_batch_size))


def trace_perplexities(model: torch.nn.Module, tokenizer, prompts: list, completions: list[str],
                       system: str | None = None, micro_batch_size: int = 8,
                       episodes: list[tuple[list[int], list[int]] | None] | None = None) -> list[float]:
    """The student's perplexity on each SFT trace (docs/recipe.md section 2: a trace far from what
    the student would write itself teaches it less). Tokens are exactly what SFT trains on
    (training.chat): the response tokens and the end-of-turn token, given the chat-templated prompt;
    the end-of-turn token also keeps every response non-empty. A trace given as an episode's
    (input_ids, loss_mask) (`episodes[i]`, None for a text trace) is scored as SFT trains it: on the
    tokens its mask marks, each given everything before it (tool results and feedback included)."""
    from passband.training.chat import encode_prompt

    if len(prompts) != len(completions):
        raise ValueError(f"trace_perplexities: {len(prompts)} prompts but {len(completions)} completions")
    episodes = episodes or [None] * len(prompts)
    prompt_ids, response_ids, masks = [], [], []
    for prompt, completion, episode in zip(prompts, completions, episodes, strict=True):
        if episode is None:
            prompt_ids.append(encode_prompt(tokenizer, prompt, system))
            response_ids.append(tokenizer(completion, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id])
            masks.append(None)
        else:
            input_ids, loss_mask = episode
            start = loss_mask.index(1)  # the first sampled token: everything before it is the opening prompt
            prompt_ids.append(list(input_ids[:start]))
            response_ids.append(list(input_ids[start:]))
            masks.append(torch.tensor(loss_mask[start:], dtype=torch.bool))
    logps = sequence_logprobs(model, prompt_ids, response_ids, micro_batch_size=micro_batch_size)
    return sequence_perplexities([lp if mask is None else lp[mask] for lp, mask in zip(logps, masks)])
