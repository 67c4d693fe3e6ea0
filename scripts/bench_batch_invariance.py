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
--repeats > 1 the variants alternate (before, queued, after, then again, each round starting one
variant later, so none always runs first) and each prints its median and every measurement: on a
shared box the load moves between rounds, and alternating spreads it over the variants alike.
"""

from __future__ import annotations

import argparse
import json
import statistics
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
    print(f"{args.dtype}, {args.prompts} prompts x 4 samples x {args.tokens} tokens, median of {args.repeats}")
    for mode in args.modes:
        rates: dict[str, list[float]] = {variant: [] for variant in VARIANTS}
        for round_ in range(args.repeats):
            for variant in VARIANTS[round_ % 3:] + VARIANTS[:round_ % 3]:
                child = subprocess.run([sys.executable, __file__, "--one", mode, variant, "--model-dir", str(model_dir),
                                        "--dtype", args.dtype, "--prompts", str(args.prompts), "--tokens", str(args.tokens)],
                                       check=True, capture_output=True, text=True)
                rates[variant].append(json.loads(child.stdout.strip().splitlines()[-1]))
                print(f"{mode:3s} round {round_ + 1} {variant}: {rates[variant][-1]:.1f} tok/s", flush=True)
        median = {variant: statistics.median(rates[variant]) for variant in VARIANTS}
        print(f"{mode:3s} median " + ", ".join(f"{v} {median[v]:.1f} tok/s" for v in VARIANTS)
              + f"; queued/before {median['queued'] / median['before']:.3f}, after/before {median['after'] / median['before']:.3f}"
              + "; each: " + "; ".join(f"{v} " + " ".join(f"{r:.1f}" for r in rates[v]) for v in VARIANTS),
              flush=True)


if __name__ == "__main__":
    main()
