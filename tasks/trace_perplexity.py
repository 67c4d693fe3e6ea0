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
                       system: str | None = None) -> list[float]:
    """exp(mean NLL per response token) of each completion given its prompt, one per trace."""
    from training.chat import encode_prompt
    from training.evaluation.perplexity import perplexity_under
    from training.model_source import load_causal_lm, load_tokenizer

    if len(prompts) != len(completions):
        raise ValueError(f"trace_perplexities: {len(prompts)} prompts but {len(completions)} completions")
    if not prompts:
        return []
    tokenizer = load_tokenizer(Path(model_dir))
    model = load_causal_lm(Path(model_dir)).eval()
    values = []
    for prompt, completion in zip(prompts, completions):
        prompt_ids = encode_prompt(tokenizer, prompt, system)
        response_ids = tokenizer(completion, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
        values.append(perplexity_under(model, [prompt_ids], [response_ids]))
    del model
    return values
