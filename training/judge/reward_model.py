"""A reward model scoring rollouts: a sequence-classification checkpoint (num_labels=1) reads the
prompt and the completion as one chat (the tokenizer's template when it has one), and its logit
becomes the reward sigmoid(logit) in (0, 1), status `pass` at 1.0 and `fail` below it as a user
function's number is (curation/catalog/reward_function.py).

The pairs are tokenized here, once, and both engines read those ids: transformers in the flow's
process, `batch_size` pairs per forward pass, right-padded, the logit the model's own pooling (the
last non-pad token for the Llama/Qwen classifiers), so a padded pair scores as it does alone; or
vLLM's pooling runner (`engine: vllm`), which batches by itself and pools the last token too. Both
run in float32 and take the sigmoid of the logit here, so one model gives one score either way.
"""

from __future__ import annotations

import functools
from typing import Any

from passband.curation.catalog.reward_function import as_result
from passband.curation.catalog.reward_model import RewardModelConfig
from passband.curation.verifiers.result import VerifyResult


@functools.cache  # one tokenizer per checkpoint per process
def _tokenizer(model: str) -> Any:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model)
    if tokenizer.pad_token is None:  # Llama-family tokenizers ship none; the classifier finds the last real token
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


@functools.cache  # one model per config per process: loaded at the first batch it scores
def _transformers_model(config: RewardModelConfig) -> Any:
    import torch
    from transformers import AutoModelForSequenceClassification

    from passband.training.runtime.device import resolve_device

    model = AutoModelForSequenceClassification.from_pretrained(config.model, torch_dtype=torch.float32)
    if model.config.num_labels != 1:
        raise ValueError(f"reward model {config.model}: {model.config.num_labels} labels; a scalar reward model has 1")
    model.config.pad_token_id = _tokenizer(config.model).pad_token_id
    return model.to(resolve_device(config.device)).eval()


@functools.cache  # one engine per config per process, started at the first batch it scores
def _vllm_model(config: RewardModelConfig) -> Any:
    from vllm import LLM

    llm = LLM(model=config.model, runner="pooling", dtype="float32", max_model_len=config.max_length,
              max_num_seqs=config.batch_size, kv_cache_memory_bytes=int(config.kv_cache_gib * 2**30),
              enforce_eager=True)  # one prefill per pair and no decode steps: compiling would only cost start-up
    if llm.llm_engine.model_config.hf_config.num_labels != 1:
        raise ValueError(f"reward model {config.model}: {llm.llm_engine.model_config.hf_config.num_labels} labels; "
                         "a scalar reward model has 1")
    return llm


def pair_text(tokenizer: Any, prompt: str, completion: str) -> str:
    """The (prompt, completion) pair as the model reads it."""
    if tokenizer.chat_template:
        return tokenizer.apply_chat_template([{"role": "user", "content": prompt},
                                              {"role": "assistant", "content": completion}], tokenize=False)
    return f"{prompt}\n{completion}"


def pair_ids(config: RewardModelConfig, prompts: list[str], completions: list[str]) -> list[list[int]]:
    """Each pair's token ids, its first `max_length` kept (the completion's tail is what is cut)."""
    tokenizer = _tokenizer(config.model)
    texts = [pair_text(tokenizer, prompt, completion) for prompt, completion in zip(prompts, completions, strict=True)]
    return tokenizer(texts, add_special_tokens=False, truncation=True, max_length=config.max_length).input_ids


def transformers_logits(config: RewardModelConfig, ids: list[list[int]]) -> list[float]:
    """The model's logit of each pair, `batch_size` pairs per forward pass."""
    import torch

    model, tokenizer = _transformers_model(config), _tokenizer(config.model)
    logits: list[float] = []
    for start in range(0, len(ids), config.batch_size):
        batch = tokenizer.pad({"input_ids": ids[start:start + config.batch_size]}, return_tensors="pt")
        with torch.inference_mode():
            logits.extend(model(**batch.to(model.device)).logits[:, 0].float().tolist())  # one transfer per batch
    return logits


def vllm_logits(config: RewardModelConfig, ids: list[list[int]]) -> list[float]:
    """The model's logit of each pair from vLLM's pooling runner (classify, no activation)."""
    from vllm import PoolingParams
    from vllm.inputs import TokensPrompt

    outputs = _vllm_model(config).encode([TokensPrompt(prompt_token_ids=pair) for pair in ids], use_tqdm=False,
                                         pooling_task="classify", pooling_params=PoolingParams(use_activation=False))
    return [float(output.outputs.data[0]) for output in outputs]


def score_with_model(config: RewardModelConfig, prompts: list[str], completions: list[str]) -> list[VerifyResult]:
    """One result per (prompt, completion) pair, by the reward model `config` names."""
    import torch

    ids = pair_ids(config, prompts, completions)
    logits = (vllm_logits if config.engine == "vllm" else transformers_logits)(config, ids)
    return [as_result(reward) for reward in torch.sigmoid(torch.tensor(logits, dtype=torch.float32)).tolist()]
