"""vLLM's sampling rate in bf16 and in fp32 on this machine, side by side, and what `dtype: auto` picks.

    .venv/bin/python scripts/bench_engine_dtype.py [--prompts 16] [--tokens 64]

Each dtype runs in a process of its own (one in-process engine each, as the flows run it), on the
shipped SmolLM2-135M-Instruct: prompts x 4 samples of exactly --tokens tokens at T=1. On a CPU
without native bf16 matmul (AVX2 only) bf16 is emulated and fp32 is several times faster; where
bf16 is native (AVX-512 BF16, AMX) it is the faster one. `auto` (EngineConfig.dtype) picks by that.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def measure(dtype: str, prompts: int, tokens: int) -> float:
    """tokens/s of one in-process vLLM engine in `dtype` (run in this process)."""
    from passband.training.chat import render_prompt
    from passband.training.engines import EngineConfig, SamplingConfig
    from passband.training.engines.vllm_engine import VLLMEngine
    from passband.training.model_source import gguf_to_safetensors, load_tokenizer, smollm2_gguf_path

    model_dir = gguf_to_safetensors(smollm2_gguf_path(), Path(tempfile.mkdtemp(prefix="bench-model-")))
    tokenizer = load_tokenizer(model_dir)
    texts = [render_prompt(tokenizer, f"Tell me a short story about the number {i}.") for i in range(prompts)]
    engine = VLLMEngine(model_dir, EngineConfig(dtype=dtype, max_num_seqs=64, kv_cache_gib=1.0, in_process=True))
    engine.generate(texts[:2], SamplingConfig(n=1, max_tokens=8, ignore_eos=True))  # warm-up
    settings = SamplingConfig(n=4, temperature=1.0, max_tokens=tokens, ignore_eos=True, seed=0)
    start = time.perf_counter()
    groups = engine.generate(texts, settings)
    elapsed = time.perf_counter() - start
    engine.close()
    return sum(len(sample.token_ids) for group in groups for sample in group) / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--one", choices=["bfloat16", "float32"], help=argparse.SUPPRESS)  # the child's dtype
    args = parser.parse_args()
    if args.one:
        print(json.dumps(measure(args.one, args.prompts, args.tokens)))
        return
    from passband.training.engines import EngineConfig

    rates = {}
    for dtype in ("bfloat16", "float32"):
        child = subprocess.run([sys.executable, __file__, "--one", dtype, "--prompts", str(args.prompts),
                                "--tokens", str(args.tokens)], check=True, capture_output=True, text=True)
        rates[dtype] = json.loads(child.stdout.strip().splitlines()[-1])
    print(f"bf16 {rates['bfloat16']:.1f} tok/s, fp32 {rates['float32']:.1f} tok/s, "
          f"fp32/bf16 {rates['float32'] / rates['bfloat16']:.2f}x; auto picks {EngineConfig().resolved_dtype()}")


if __name__ == "__main__":
    main()
