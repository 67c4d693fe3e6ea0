"""What batch-invariant sampling costs: vLLM's tokens/s before and after issue #56, side by side.

    .venv/bin/python scripts/bench_batch_invariance.py [--dtype float32] [--modes out in] [--prompts 16]
        [--tokens 64] [--repeats 1]

Three engines per engine mode (`out`: the core in its own process, curate's and evaluate's default;
`in`: in the flow's process), each in a process of its own on the shipped SmolLM2-135M-Instruct,
sampling prompts x 4 samples of exactly --tokens tokens at T=1 in one call:
  before:  vLLM's defaults as the engine ran them before: split-KV attention, and the core stepping
           while the call's requests still arrive (out of process);
  queued:  every request queued before the first step (the engine's _run_whole), split KV kept;
  after:   queued and split KV off (EngineConfig.split_kv_attention false): the engine as it is now.
Prints tokens/s and the ratios to `before` of the same mode, measured in this one run; with
--repeats > 1 the engines alternate and each keeps its best (the box may be shared).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

VARIANTS = ("before", "queued", "after")


def measure(model_dir: Path, dtype: str, mode: str, variant: str, prompts: int, tokens: int) -> float:
    """tokens/s of one engine in this process."""
    from passband.training.chat import render_prompt
    from passband.training.engines import EngineConfig, SamplingConfig
    from passband.training.engines.vllm_engine import VLLMEngine
    from passband.training.model_source import load_tokenizer

    if variant == "before":
        VLLMEngine._run_whole = lambda self, texts, params: self.llm.generate(texts, params, use_tqdm=False)
    tokenizer = load_tokenizer(model_dir)
    texts = [render_prompt(tokenizer, f"Tell me a short story about the number {i}.") for i in range(prompts)]
    engine = VLLMEngine(model_dir, EngineConfig(dtype=dtype, max_num_seqs=64, kv_cache_gib=1.0, in_process=mode == "in",
                                                split_kv_attention=variant != "after"))
    engine.generate(texts[:2], SamplingConfig(n=1, max_tokens=8, ignore_eos=True))  # warm-up
    start = time.perf_counter()
    groups = engine.generate(texts, SamplingConfig(n=4, temperature=1.0, max_tokens=tokens, ignore_eos=True, seed=0))
    elapsed = time.perf_counter() - start
    engine.close()
    return sum(len(sample.token_ids) for group in groups for sample in group) / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    parser.add_argument("--modes", nargs="+", default=["out", "in"], choices=["out", "in"])
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--model-dir", type=Path, help="a converted SmolLM2 checkpoint (default: convert one)")
    parser.add_argument("--one", nargs=2, help=argparse.SUPPRESS)  # the child's mode and variant
    args = parser.parse_args()
    if args.one:
        print(json.dumps(measure(args.model_dir, args.dtype, *args.one, args.prompts, args.tokens)))
        return
    from passband.training.model_source import gguf_to_safetensors, smollm2_gguf_path

    model_dir = args.model_dir or gguf_to_safetensors(smollm2_gguf_path(), Path(tempfile.mkdtemp(prefix="bench-model-")))
    print(f"{args.dtype}, {args.prompts} prompts x 4 samples x {args.tokens} tokens, best of {args.repeats}")
    for mode in args.modes:
        best = dict.fromkeys(VARIANTS, 0.0)
        for _ in range(args.repeats):
            for variant in VARIANTS:
                child = subprocess.run([sys.executable, __file__, "--one", mode, variant, "--model-dir", str(model_dir),
                                        "--dtype", args.dtype, "--prompts", str(args.prompts), "--tokens", str(args.tokens)],
                                       check=True, capture_output=True, text=True)
                best[variant] = max(best[variant], json.loads(child.stdout.strip().splitlines()[-1]))
        print(f"{mode:3s} " + ", ".join(f"{v} {best[v]:.1f} tok/s" for v in VARIANTS)
              + f"; queued/before {best['queued'] / best['before']:.3f}, after/before {best['after'] / best['before']:.3f}",
              flush=True)


if __name__ == "__main__":
    main()
