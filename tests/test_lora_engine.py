"""LoRA adapters through the engine: a version holding only the adapter, served by vLLM's LoRA support on
the base, samples what the same adapters merged into the weights sample, and the engine's log-probs match the
adapted trainer's."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from passband.training.chat import render_prompt
from passband.training.engines import EngineConfig, SamplingConfig
from passband.training.lora.adapters import attach_adapters
from passband.training.lora.settings import LoraConfig
from passband.training.model_source import load_causal_lm, load_tokenizer
from passband.training.weights.versions import publish_version, version_dir
from test_engine_weight_sync import QUESTIONS, flatten, vllm_kl

GREEDY = SamplingConfig(n=1, temperature=0.0, max_tokens=24, seed=0)


def _adapted_smollm2(smollm2_dir: Path) -> torch.nn.Module:
    """SmolLM2 with rank-8 adapters whose B is nonzero: a policy the adapters moved away from the base."""
    model = attach_adapters(load_causal_lm(smollm2_dir).eval(), LoraConfig(rank=8), seed=0)
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "lora_B" in name:
                parameter.copy_(0.02 * torch.randn(parameter.shape, generator=gen))
    return model


@pytest.mark.slow  # one vLLM engine start and four generate calls on SmolLM2: ~2 min on the 2-core box
def test_adapter_version_samples_as_the_merged_weights(smollm2_dir: Path, tmp_path: Path) -> None:
    from passband.training.engines.vllm_engine import VLLMEngine

    tokenizer = load_tokenizer(smollm2_dir)
    prompts = [render_prompt(tokenizer, q) for q in QUESTIONS]
    model = _adapted_smollm2(smollm2_dir)
    root = tmp_path / "versions"
    publish_version(model, root, 1, "float32", False, keep=2, adapter_only=True)
    publish_version(model, root, 2, "float32", False, keep=2)  # the same policy, merged: full weights
    adapter_files = sorted(p.name for p in version_dir(root, 1).iterdir())
    assert adapter_files == ["adapter_config.json", "adapter_model.safetensors", "manifest.json"]
    adapter_bytes = sum(p.stat().st_size for p in version_dir(root, 1).iterdir())
    merged_bytes = sum(p.stat().st_size for p in version_dir(root, 2).iterdir())
    print(f"\nversion bytes: adapter {adapter_bytes / 2**20:.1f} MiB, merged {merged_bytes / 2**20:.1f} MiB")
    assert adapter_bytes * 20 < merged_bytes

    engine = VLLMEngine(smollm2_dir, EngineConfig(dtype="float32", kv_cache_gib=0.5, max_model_len=512,
                                                  max_lora_rank=8))
    try:
        base = [s.token_ids for s in flatten(engine.generate(prompts, GREEDY))]
        engine.load_weights(version_dir(root, 1))
        served = [s.token_ids for s in flatten(engine.generate(prompts, GREEDY))]
        sampled = flatten(engine.generate(prompts, SamplingConfig(n=2, temperature=1.0, max_tokens=24, seed=0)))
        engine.load_weights(version_dir(root, 2))
        merged = [s.token_ids for s in flatten(engine.generate(prompts, GREEDY))]
    finally:
        engine.close()
    assert served != base  # the adapter is applied ...
    assert served == merged  # ... and samples as the merged weights do
    kl = vllm_kl(model, sampled)  # the engine's log-probs under the adapter are the adapted trainer's
    print(f"vllm_kl adapter-served engine vs adapted fp32 trainer: {kl:.2e}")
    assert abs(kl) < 1e-4
