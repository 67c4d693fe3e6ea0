"""A KV cache sized to the batch the engine will hold, instead of a fixed number of GiB.

The RL engine lives beside the trainer, and vLLM allocates (and on CPU touches) its whole KV
cache at start-up, so every GiB it reserves is RAM the trainer does not get. A rollout batch needs
P x G sequences of at most (prompt + max_tokens) tokens each, each rounded up to whole blocks
(vLLM's CPU backend pages KV in blocks of 128 tokens; CUDA's of 16): for SmolLM2-135M in bf16
(30 layers x 3 KV heads x 64 dims x K and V x 2 bytes = 23 KB per token), 48 sequences of
<= 256 tokens need 0.26 GiB where the fixed default reserved 1-2 GiB.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from passband.training.memory_model import ModelShape
from passband.training.memory_model import kv_bytes_per_token as shape_kv_bytes_per_token

BLOCK_TOKENS = 128
"""vLLM's KV block on the CPU backend (the larger of CPU's 128 and CUDA's 16, so either fits)."""


def kv_bytes_per_token(model_dir: Path, dtype: str) -> int:
    """K and V of one token over every layer, from the checkpoint's config.json (Llama-family keys)."""
    shape = ModelShape.from_hf_config(json.loads((Path(model_dir) / "config.json").read_text()))
    return shape_kv_bytes_per_token(shape, dtype)


NULL_BLOCKS = 1
"""Blocks vLLM's pool holds back for good (BlockPool's null block): it checks that the cache less one
block holds a max_model_len sequence (vllm/v1/core/kv_cache_utils.py: check_enough_kv_cache_memory
subtracts `_pool_bytes_per_block`), and a batch never gets that block either."""


def batch_kv_cache_gib(model_dir: Path, dtype: str, num_sequences: int, max_sequence_tokens: int) -> float:
    """GiB of KV cache that holds `num_sequences` sequences of up to `max_sequence_tokens` tokens at
    once, each in whole blocks (a group's shared prompt blocks are counted once per sequence: slack),
    plus the block vLLM holds back. A whole number of blocks of whole bytes: vLLM divides the bytes
    it is given by a block's, so no rounding loses one."""
    blocks = num_sequences * math.ceil(max_sequence_tokens / BLOCK_TOKENS) + NULL_BLOCKS
    return blocks * BLOCK_TOKENS * kv_bytes_per_token(model_dir, dtype) / 2**30


def rollout_kv_cache_gib(model_dir: Path, dtype: str, tokenizer: Any, prompts: list[Any], system_prompt: str | None,
                         num_sequences: int, max_tokens: int, max_model_len: int) -> float:
    """`batch_kv_cache_gib` for a rollout batch of `num_sequences` drawn from `prompts` (chat prompts,
    rendered with `system_prompt`): the longest rendered prompt + `max_tokens` per sequence, and never
    less than one `max_model_len` sequence beside the null block (vLLM refuses a cache that cannot
    hold one: "... GiB KV cache is needed, which is larger than the available KV cache memory")."""
    from passband.training.chat import encode_prompt

    longest = max(len(encode_prompt(tokenizer, prompt, system_prompt)) for prompt in prompts)
    return max(batch_kv_cache_gib(model_dir, dtype, num_sequences, longest + max_tokens),
               batch_kv_cache_gib(model_dir, dtype, 1, max_model_len))
