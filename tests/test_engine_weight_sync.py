"""The real model in vLLM and in transformers: engine log-probs agree with the trainer's, and
weights pushed into the live vLLM engine are the ones it samples from afterwards."""

from __future__ import annotations

from pathlib import Path

import torch

from passband.training.chat import render_prompt
from passband.training.engines.hf_engine import HFEngine
from passband.training.engines import EngineConfig, Sample, SamplingConfig
from passband.training.logprobs import pad_rows, response_logprobs
from passband.training.model_source import load_causal_lm, load_tokenizer
from passband.training.rl.algebra.mismatch import mismatch_kl

QUESTIONS = ["What is 3 + 4?", "Name a color.", "Write one word.", "What is 2 + 2?"]
SETTINGS = SamplingConfig(n=4, temperature=1.0, max_tokens=40, seed=0)


def vllm_kl(model: torch.nn.Module, samples: list[Sample]) -> float:
    samples = [s for s in samples if s.token_ids]
    with torch.no_grad():
        trainer = response_logprobs(model, [s.prompt_token_ids for s in samples],
                                    [s.token_ids for s in samples], SETTINGS.temperature)
    engine_logp, _ = pad_rows([s.logprobs for s in samples], torch.float32)
    return mismatch_kl(trainer.logp, engine_logp, trainer.mask)


def flatten(groups: list[list[Sample]]) -> list[Sample]:
    return [s for group in groups for s in group]


def train_away(model: torch.nn.Module, samples: list[Sample], steps: int = 2, lr: float = 5e-3) -> None:
    """Move the weights enough to change log-probs: push down the sampled responses' likelihood."""
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    batch = [s for s in samples if s.token_ids][:4]
    for _ in range(steps):
        out = response_logprobs(model, [s.prompt_token_ids for s in batch], [s.token_ids for s in batch])
        loss = (out.logp * out.mask).sum() / out.mask.sum()  # minimizing log-likelihood
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


def test_hf_engine_logprobs_match_trainer(smollm2_dir: Path) -> None:
    engine = HFEngine(smollm2_dir, EngineConfig(kind="hf", dtype="float32"))
    tokenizer = load_tokenizer(smollm2_dir)
    prompts = [render_prompt(tokenizer, q) for q in QUESTIONS[:2]]
    groups = engine.generate(prompts, SamplingConfig(n=2, temperature=1.0, max_tokens=24, seed=0))
    assert [len(g) for g in groups] == [2, 2]
    assert all(s.finish_reason in {"stop", "length"} for s in flatten(groups))
    # The same fp32 weights and kernels on both sides: only batch padding separates them.
    kl = vllm_kl(engine.model, flatten(groups))
    print(f"\nvllm_kl hf engine vs trainer: {kl:.2e}")
    assert kl < 1e-4


def test_vllm_logprobs_match_trainer_and_weight_sync(smollm2_dir: Path, tmp_path: Path) -> None:
    """At the shipped weights the fp32 engine matches the fp32 trainer to ~1e-9; after the trainer
    moves, the engine releases its packed weights and reloads, it matches the new weights as
    closely and the old ones no more.
    (~2.7 min on a quiet 2-core box.) Measured: -4.2e-10 before, -4.2e-10 vs new and 3.7e-2 vs old
    after. Before the worker extension repacked the tied LM head the gap to the new weights was
    2.2e-3: the stale output projection this test exists to catch."""
    from passband.training.engines.vllm_engine import VLLMEngine

    tokenizer = load_tokenizer(smollm2_dir)
    prompts = [render_prompt(tokenizer, q) for q in QUESTIONS]
    trainer = load_causal_lm(smollm2_dir)
    old = load_causal_lm(smollm2_dir).eval()
    # fp32 in the engine too: the remaining gap is kernels and batching, not precision, so a
    # stale weight shows up as a jump of orders of magnitude (bf16 alone gives ~1.5e-3, measured
    # by the sample flow's vllm_kl).
    engine = VLLMEngine(smollm2_dir, EngineConfig(dtype="float32", kv_cache_gib=0.5, max_model_len=512))
    try:
        before = flatten(engine.generate(prompts, SETTINGS))
        assert len(before) == 16
        kl_before = vllm_kl(old, before)
        print(f"\nvllm_kl at the shipped weights (fp32 engine vs fp32 trainer): {kl_before:.2e}")
        assert abs(kl_before) < 1e-6

        train_away(trainer, before)
        trainer.save_pretrained(tmp_path / "new")
        # as the RL flow does between rollout and sync: every packed handle dropped (122 counted:
        # qkv, o, gate_up and down in each of the 30 layers, plus 2 vocabulary-sized modules), so
        # the reload must rebuild all of them for the checks below to hold
        assert engine.llm.collective_rpc("release_packed_weights") == [4 * 30 + 2]
        engine.load_weights(tmp_path / "new")

        after = flatten(engine.generate(prompts, SETTINGS))
        trainer.eval()
        kl_new = vllm_kl(trainer, after)
        kl_old = vllm_kl(old, after)
        print(f"after sync: vllm_kl vs new weights {kl_new:.2e}, vs old weights {kl_old:.2e}")
        # fp32 on both sides: anything above ~1e-6 is a tensor that did not take the new values
        assert abs(kl_new) < 1e-6
        assert kl_old > 1e-2
    finally:
        engine.close()
