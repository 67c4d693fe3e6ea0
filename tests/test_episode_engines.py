"""Engines continue token-id prompts (issue 55): a multi-turn episode's context goes to the engine
as the exact token ids, and a prompt given as ids samples what its text would."""

from __future__ import annotations

from pathlib import Path

import pytest

from passband.training.chat import encode_prompt, render_prompt
from passband.training.engines import EngineConfig, SamplingConfig, open_engine
from passband.training.episodes.environment import EpisodeBudget
from passband.training.episodes.math_python import MathPythonEnvironment
from passband.training.episodes.rollout import run_episodes
from passband.training.model_source import load_tokenizer

QUESTIONS = ["What is 2 + 3?", "Name a prime number."]


def check_token_prompts(engine, tokenizer) -> None:
    """Keyed prompts given as ids sample exactly what their text samples, and say so in prompt_token_ids."""
    texts = [render_prompt(tokenizer, q) for q in QUESTIONS]
    ids = [encode_prompt(tokenizer, q) for q in QUESTIONS]
    sampling = SamplingConfig(n=2, temperature=1.0, max_tokens=6, seed=4)
    keys = ["k/0", "k/1"]
    from_text = engine.generate(texts, sampling, prompt_keys=keys)
    from_ids = engine.generate(ids, sampling, prompt_keys=keys)
    assert [[s.token_ids for s in g] for g in from_ids] == [[s.token_ids for s in g] for g in from_text]
    assert [g[0].prompt_token_ids for g in from_ids] == ids
    # a continuation: the prompt plus a sampled turn and more, fed back as ids, is kept token for token
    context = ids[0] + from_text[0][0].token_ids + tokenizer.encode("\nmore", add_special_tokens=False)
    (group,) = engine.generate([context], sampling.model_copy(update={"n": 1}), prompt_keys=["k/2"])
    assert group[0].prompt_token_ids == context


def check_episodes(engine, tokenizer) -> None:
    """Two real episodes of math with Python: mask and log-probs aligned, 1 exactly on sampled tokens."""
    environment = MathPythonEnvironment()
    rows = [{"id": f"p{i}", "prompt": f"What is {i + 2} times 7? Answer with just the number.", "reference": str(7 * (i + 2))}
            for i in range(2)]
    results = run_episodes(engine, tokenizer, [environment.open(row) for row in rows], ["p0", "p1"],
                           SamplingConfig(max_tokens=32, temperature=1.0, seed=1), EpisodeBudget(max_turns=2, max_tokens=160))
    for result in results:
        tokens = result.tokens
        assert len(tokens.token_ids) == len(tokens.loss_mask) == len(tokens.logprobs) <= 160
        assert all(lp < 0 or mask for lp, mask in zip(tokens.logprobs, tokens.loss_mask))  # env tokens: 0.0
        assert all(lp == 0.0 for lp, mask in zip(tokens.logprobs, tokens.loss_mask) if not mask)
        assert result.status != "continue" and 1 <= result.num_turns <= 2


def test_hf_engine_continues_token_prompts(smollm2_dir: Path) -> None:
    tokenizer = load_tokenizer(smollm2_dir)
    check_token_prompts(open_engine(EngineConfig(kind="hf", dtype="float32"), smollm2_dir), tokenizer)


@pytest.mark.slow
def test_hf_engine_runs_tool_episodes(smollm2_dir: Path) -> None:
    """Slow: the tool instructions make a ~700-token prompt, decoded turn by turn by transformers."""
    tokenizer = load_tokenizer(smollm2_dir)
    check_episodes(open_engine(EngineConfig(kind="hf", dtype="float32"), smollm2_dir), tokenizer)


@pytest.mark.slow
def test_vllm_engine_continues_token_prompts(smollm2_dir: Path) -> None:
    """Slow: a vLLM engine's start-up (minutes on the shared 2-core box)."""
    tokenizer = load_tokenizer(smollm2_dir)
    engine = open_engine(EngineConfig(kv_cache_gib=0.2, max_model_len=1024), smollm2_dir)
    try:
        check_token_prompts(engine, tokenizer)
        check_episodes(engine, tokenizer)
    finally:
        engine.close()
