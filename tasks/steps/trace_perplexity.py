"""Prefect task: the student's perplexity on kept SFT traces (the computation is
training/evaluation/perplexity.py `trace_perplexities`); the curate flow can cap it."""

from __future__ import annotations

from pathlib import Path

from prefect import task
from prefect.cache_policies import NONE


@task(name="trace-perplexity", cache_policy=NONE)
def trace_perplexities(model_dir: str, prompts: list[str], completions: list[str],
                       system: str | None = None, micro_batch_size: int = 8,
                       episodes: list[tuple[list[int], list[int]] | None] | None = None,
                       trust_remote_code: bool = False) -> list[float]:
    """exp(mean NLL per response token) of each completion given its prompt, one per trace,
    under the model in `model_dir` (loaded here, freed after); a trace with an episode's
    (input_ids, loss_mask) is scored on its sampled tokens. `trust_remote_code`: the model's own code
    allowed (EngineConfig.trust_remote_code)."""
    from passband.training.evaluation import perplexity
    from passband.training.model_source import load_causal_lm, load_tokenizer

    if not prompts:
        return []
    model = load_causal_lm(Path(model_dir), trust_remote_code=trust_remote_code).eval()
    tokenizer = load_tokenizer(Path(model_dir), trust_remote_code)
    values = perplexity.trace_perplexities(model, tokenizer, prompts, completions, system,
                                           micro_batch_size, episodes)
    del model
    return values
