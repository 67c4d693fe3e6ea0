"""The student's perplexity on kept SFT traces: a distribution-alignment signal per trace.

A trace the student finds very unlikely (high perplexity) is far from what it would write
itself; the recipe prefers traces from a model aligned to the student, and the curate flow can
cap perplexity. Tokens are exactly what SFT trains on (training.chat): the response tokens and
the end-of-turn token, given the chat-templated prompt.
"""

from __future__ import annotations

from pathlib import Path

from prefect import task
from prefect.cache_policies import NONE


@task(name="trace-perplexity", cache_policy=NONE)
def trace_perplexities(model_dir: str, prompts: list[str], completions: list[str],
                       system: str | None = None, micro_batch_size: int = 8) -> list[float]:
    """exp(mean NLL per response token) of each completion given its prompt, one per trace.

    Traces are scored `micro_batch_size` at a time (one forward per micro-batch, right-padded;
    padding is masked out), which on a CPU is several times faster than one forward per trace.
    """
    import math

    import torch

    from passband.training.chat import encode_prompt
    from passband.training.logprobs import response_logprobs
    from passband.training.model_source import load_causal_lm, load_tokenizer

    if len(prompts) != len(completions):
        raise ValueError(f"trace_perplexities: {len(prompts)} prompts but {len(completions)} completions")
    if not prompts:
        return []
    tokenizer = load_tokenizer(Path(model_dir))
    model = load_causal_lm(Path(model_dir)).eval()
    prompt_ids = [encode_prompt(tokenizer, prompt, system) for prompt in prompts]
    # The end-of-turn token is trained by SFT, so it is scored too; it also keeps every response non-empty.
    response_ids = [tokenizer(completion, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
                    for completion in completions]
    values = []
    with torch.no_grad():
        for start in range(0, len(prompts), micro_batch_size):
            scored = response_logprobs(model, prompt_ids[start : start + micro_batch_size],
                                       response_ids[start : start + micro_batch_size])
            nll = -(scored.logp.double() * scored.mask).sum(dim=1)  # [B] nats; logp is 0 on padding
            values.extend(math.exp(total / count) for total, count in zip(nll.tolist(), scored.mask.sum(dim=1).tolist()))
    del model
    return values
