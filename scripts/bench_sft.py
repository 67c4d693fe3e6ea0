"""SFT step benchmarks on CPU (or whatever device torch picks): attention memory and precision speed.

memory: peak RSS of one packed forward+backward step of a SmolLM2-135M-shaped Llama (random
weights; same shapes and FLOPs as the shipped model), dense [B,1,T,T] mask vs varlen attention.
Run each point in its own process so ru_maxrss belongs to that point alone:
    nice .venv/bin/python scripts/bench_sft.py memory --path varlen --tokens 8192
speed: tokens/s of full SFT steps (forward, backward, AdamW) in fp32 and bf16 autocast, side by
side in one process, and the achieved GFLOP/s (6 * params * tokens / s) against the bf16 and fp32
matmul peaks measured in the same run:
    nice .venv/bin/python scripts/bench_sft.py speed --steps 4 --rows 4 --row-tokens 512
"""

from __future__ import annotations

import argparse
import resource
import time

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from passband.training.runtime.varlen_attention import VARLEN_SDPA
from passband.training.runtime.chunked_loss import chunked_lm_loss
from passband.training.sft.model_loss import PackedLMLoss
from passband.training.sft.packing import SFTExample, block_causal_mask, collate_packed


def smollm2_shaped(num_layers: int = 30, seed: int = 0) -> LlamaForCausalLM:
    """SmolLM2-135M's architecture (config.json of HuggingFaceTB/SmolLM2-135M-Instruct), random weights.

    Fewer layers keep a memory sweep affordable: the mask is per step, activations per layer.
    """
    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=num_layers,
                         num_attention_heads=9, num_key_value_heads=3, max_position_embeddings=8192,
                         rms_norm_eps=1e-5, rope_theta=100000.0, tie_word_embeddings=True)
    return LlamaForCausalLM(config)


def packed_row(num_tokens: int, vocab: int, seed: int = 0) -> list[SFTExample]:
    """Documents of 1/2, 1/4, 1/8, ... of the row (at least 64 tokens), filling exactly num_tokens."""
    gen = torch.Generator().manual_seed(seed)
    lengths, left = [], num_tokens
    while left > 0:
        length = left if left <= 128 else max(64, left // 2)
        lengths.append(length)
        left -= length
    return [SFTExample(torch.randint(0, vocab, (n,), generator=gen).tolist(), [0] * (n // 4) + [1] * (n - n // 4))
            for n in lengths]


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() / 2**20


def memory(path: str, num_tokens: int, num_layers: int) -> None:
    model = smollm2_shaped(num_layers)
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.train()
    examples = packed_row(num_tokens, model.config.vocab_size)
    batch = collate_packed(examples, [list(range(len(examples)))], pad_id=0)
    base = rss_mb()
    start = time.perf_counter()
    if path == "dense":
        model.set_attn_implementation("sdpa")
        mask = block_causal_mask(batch.segment_ids, torch.float32)  # [1, 1, T, T]
        hidden = model.base_model(input_ids=batch.input_ids, attention_mask=mask, position_ids=batch.position_ids,
                                  use_cache=False).last_hidden_state
        loss = chunked_lm_loss(hidden[0], model.lm_head.weight, batch.targets[0], chunk_size=1024)
    else:
        loss = PackedLMLoss(model, 1024, VARLEN_SDPA)(batch.input_ids, batch.position_ids, batch.targets,
                                                       batch.cu_seqlens)
    loss.backward()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"path={path} layers={num_layers} tokens={num_tokens} docs={len(examples)} rss_before_step_mb={base:.0f} "
          f"peak_rss_mb={peak:.0f} step_peak_minus_before_mb={peak - base:.0f} seconds={time.perf_counter() - start:.1f}")


def matmul_gflops(dtype: torch.dtype, size: int = 2048, repeats: int = 5) -> float:
    a, b = torch.randn(size, size, dtype=dtype), torch.randn(size, size, dtype=dtype)
    a @ b  # warm-up (oneDNN picks and caches its kernel)
    start = time.perf_counter()
    for _ in range(repeats):
        a @ b
    return 2 * size**3 * repeats / (time.perf_counter() - start) / 1e9


def speed(num_steps: int, num_rows: int, row_tokens: int) -> None:
    results = {}
    for precision in ("fp32", "bf16_autocast"):
        model = smollm2_shaped()
        model.train()
        params = sum(p.numel() for p in model.parameters())
        module = PackedLMLoss(model, 1024, VARLEN_SDPA, precision)
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)
        rows = [packed_row(row_tokens, model.config.vocab_size, seed=r) for r in range(num_rows)]
        examples = [e for row in rows for e in row]
        starts = [sum(len(r) for r in rows[:i]) for i in range(num_rows)]
        batch = collate_packed(examples, [list(range(s, s + len(r))) for s, r in zip(starts, rows)], pad_id=0)
        times = []
        for step in range(num_steps + 1):  # step 0 warms up
            start = time.perf_counter()
            loss = module(batch.input_ids, batch.position_ids, batch.targets, batch.cu_seqlens) / batch.num_loss_tokens
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            if step:
                times.append(time.perf_counter() - start)
        seconds = sum(times) / len(times)
        tokens = batch.input_ids.numel()
        results[precision] = (tokens / seconds, 6 * params * tokens / seconds / 1e9, loss.item())
        print(f"{precision}: {tokens} tokens/step, {seconds:.2f} s/step, {tokens / seconds:.0f} tokens/s, "
              f"{6 * params * tokens / seconds / 1e9:.1f} GFLOP/s (6*N*D, N={params / 1e6:.1f}M), last loss {loss.item():.4f}")
    peak_bf16, peak_fp32 = matmul_gflops(torch.bfloat16), matmul_gflops(torch.float32)
    print(f"matmul peak 2048^3: bf16 {peak_bf16:.1f} GFLOP/s, fp32 {peak_fp32:.1f} GFLOP/s")
    print(f"bf16/fp32 tokens/s: {results['bf16_autocast'][0] / results['fp32'][0]:.2f}x; achieved/peak: "
          f"bf16 {results['bf16_autocast'][1] / peak_bf16:.0%} of bf16 peak, fp32 {results['fp32'][1] / peak_fp32:.0%} of fp32 peak; "
          f"threads={torch.get_num_threads()}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    mem = sub.add_parser("memory")
    mem.add_argument("--path", choices=["dense", "varlen"], required=True)
    mem.add_argument("--tokens", type=int, required=True)
    mem.add_argument("--layers", type=int, default=30)
    spd = sub.add_parser("speed")
    spd.add_argument("--steps", type=int, default=4)
    spd.add_argument("--rows", type=int, default=4)
    spd.add_argument("--row-tokens", type=int, default=512)
    args = parser.parse_args()
    if args.command == "memory":
        memory(args.path, args.tokens, args.layers)
    else:
        speed(args.steps, args.rows, args.row_tokens)
