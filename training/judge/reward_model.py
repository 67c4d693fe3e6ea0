"""A reward model scoring rollouts: a sequence-classification checkpoint (num_labels=1) reads the
prompt and the completion as one chat (the tokenizer's template when it has one), and its logit
becomes the reward sigmoid(logit) in (0, 1), status `pass` at 1.0 and `fail` below it as a user
function's number is (curation/catalog/reward_function.py).

Batched `batch_size` pairs at a time, right-padded; the logit is the model's own pooling (the
last non-pad token for the Llama/Qwen classifiers), so a padded pair scores as it does alone.
"""

from __future__ import annotations

import functools
from typing import Any

from passband.curation.catalog.reward_function import as_result
from passband.curation.catalog.reward_model import RewardModelConfig
from passband.curation.verifiers.result import VerifyResult


@functools.cache  # one model per config per process: loaded at the first batch it scores
def _load(config: RewardModelConfig) -> tuple[Any, Any]:
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from passband.training.sft.device import resolve_device

    tokenizer = AutoTokenizer.from_pretrained(config.model)
    model = AutoModelForSequenceClassification.from_pretrained(config.model, torch_dtype=torch.float32)
    if model.config.num_labels != 1:
        raise ValueError(f"reward model {config.model}: {model.config.num_labels} labels; a scalar reward model has 1")
    if tokenizer.pad_token is None:  # Llama-family tokenizers ship none; the classifier finds the last real token
        tokenizer.pad_token = tokenizer.eos_token
    model.config.pad_token_id = tokenizer.pad_token_id
    return model.to(resolve_device(config.device)).eval(), tokenizer


def pair_text(tokenizer: Any, prompt: str, completion: str) -> str:
    """The (prompt, completion) pair as the model reads it."""
    if tokenizer.chat_template:
        return tokenizer.apply_chat_template([{"role": "user", "content": prompt},
                                              {"role": "assistant", "content": completion}], tokenize=False)
    return f"{prompt}\n{completion}"


def score_with_model(config: RewardModelConfig, prompts: list[str], completions: list[str]) -> list[VerifyResult]:
    """One result per (prompt, completion) pair, by the reward model `config` names."""
    import torch

    model, tokenizer = _load(config)
    texts = [pair_text(tokenizer, prompt, completion) for prompt, completion in zip(prompts, completions, strict=True)]
    rewards: list[float] = []
    for start in range(0, len(texts), config.batch_size):
        batch = tokenizer(texts[start:start + config.batch_size], return_tensors="pt", padding=True, truncation=True,
                          max_length=config.max_length, add_special_tokens=False)
        with torch.inference_mode():
            logits = model(**batch.to(model.device)).logits[:, 0]  # [batch]
        rewards.extend(torch.sigmoid(logits.float()).tolist())  # one transfer per batch
    return [as_result(reward) for reward in rewards]
