"""scripts/bench_long_context.py on a tiny Llama (3 query heads, 1 KV head: SmolLM2's uneven split at SP = 2).

An SP = 2 point runs 2 gloo ranks under torchrun through the trainers' sequence-parallel path: each rank holds
half the sequence's tokens, and the SFT step's loss and the RL update's perplexity are the one process's (an SP = 2
forward that left out the other rank's tokens in attention, or counted a shard's loss twice, would differ). The RSS cap kills a point whole.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "bench_long_context.py"
TOKENS = 256


def _bench():
    spec = importlib.util.spec_from_file_location("bench_long_context", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory) -> Path:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=128, intermediate_size=96, num_hidden_layers=2, max_position_embeddings=1024,
                         tie_word_embeddings=True, num_attention_heads=3, num_key_value_heads=1, hidden_size=48)
    out = tmp_path_factory.mktemp("tiny")
    LlamaForCausalLM(config).save_pretrained(out)
    return out


@pytest.mark.slow  # three launches, two of them torchrun's: ~40 s on 2 cores
@pytest.mark.parametrize("phase", ["sft", "rl"])
def test_sp2_ranks_hold_half_the_tokens_and_compute_the_one_process_loss(tiny_dir, phase):
    bench = _bench()
    cap = 8 * bench.GIB
    one = bench.run_point(tiny_dir, TOKENS, "every-layer", 1, phase, "return", cap)
    ranks = bench.run_point(tiny_dir, TOKENS, "every-layer", 2, phase, "return", cap)
    assert [r["rank"] for r in ranks] == [0, 1]
    assert [r["local_tokens"] for r in one + ranks] == [TOKENS, TOKENS // 2, TOKENS // 2]
    for r in ranks:
        assert abs(r["check"] - one[0]["check"]) < 1e-5 * max(1.0, abs(one[0]["check"]))
        assert r["peak"] > r["before"] > 0


def test_a_point_over_the_cap_is_killed(tiny_dir):
    bench = _bench()
    # 50 MiB: torchrun's agent alone passes it while importing torch
    assert bench.run_point(tiny_dir, TOKENS, "none", 2, "sft", "keep", 50 * 2**20).startswith("killed: RSS passed the")
