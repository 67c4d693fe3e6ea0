"""Rollout throughput of the vLLM and transformers engines, side by side in one run.

    .venv/bin/python scripts/bench_engines.py [--batches 8 32 64] [--tokens 128] [--dtype bfloat16]

Each engine generates exactly `--tokens` tokens (EOS ignored) for B sequences (B/4 prompts x 4
samples) at T=1; prints tokens/s per engine and batch size and the vLLM/HF ratio. The model is
the shipped SmolLM2-135M-Instruct (converted into a temp dir first).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path


def measure(engine, prompts: list[str], batch: int, tokens: int) -> float:
    from passband.training.engines import SamplingConfig

    settings = SamplingConfig(n=4, temperature=1.0, max_tokens=tokens, ignore_eos=True, seed=0)
    start = time.perf_counter()
    groups = engine.generate(prompts[: batch // 4], settings)
    elapsed = time.perf_counter() - start
    generated = sum(len(s.token_ids) for g in groups for s in g)
    assert generated == batch * tokens, (generated, batch * tokens)
    return generated / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, nargs="+", default=[8, 32, 64])
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--dtype", default="bfloat16", help="both engines run in this dtype")
    args = parser.parse_args()

    from passband.training.chat import render_prompt
    from passband.training.engines.hf_engine import HFEngine
    from passband.training.engines import EngineConfig
    from passband.training.engines.vllm_engine import VLLMEngine
    from passband.training.model_source import gguf_to_safetensors, load_tokenizer, smollm2_gguf_path

    model_dir = gguf_to_safetensors(smollm2_gguf_path(), Path(tempfile.mkdtemp(prefix="bench-model-")))
    tokenizer = load_tokenizer(model_dir)
    prompts = [render_prompt(tokenizer, f"Tell me a short story about the number {i}.") for i in range(64)]
    results: dict[str, dict[int, float]] = {"vllm": {}, "hf": {}}

    vllm = VLLMEngine(model_dir, EngineConfig(dtype=args.dtype, max_num_seqs=max(args.batches), kv_cache_gib=1.0))
    measure(vllm, prompts, 8, 8)  # warm-up
    for batch in args.batches:
        results["vllm"][batch] = measure(vllm, prompts, batch, args.tokens)
    vllm.close()
    hf = HFEngine(model_dir, EngineConfig(kind="hf", dtype=args.dtype), batch_size=max(args.batches) // 4)  # all at once
    measure(hf, prompts, 8, 8)
    for batch in args.batches:
        results["hf"][batch] = measure(hf, prompts, batch, args.tokens)

    print(f"{'sequences':>10} {'vllm tok/s':>12} {'hf tok/s':>10} {'vllm/hf':>8}")
    for batch in args.batches:
        v, h = results["vllm"][batch], results["hf"][batch]
        print(f"{batch:>10} {v:>12.1f} {h:>10.1f} {v / h:>8.2f}")


if __name__ == "__main__":
    main()
