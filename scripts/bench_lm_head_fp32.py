"""vllm_kl of a bf16 vLLM engine with and without an fp32 LM head, side by side in one run.

    .venv/bin/python scripts/bench_lm_head_fp32.py [--prompts 32] [--tokens 64] [--dtype bfloat16]

The recipe's mismatch fix (docs/recipe.md section 5): keep the logits in fp32 while the body runs
in bf16. Both engines sample the same prompts with the same per-call seed from the shipped
SmolLM2-135M-Instruct; the fp32 transformers model (the trainer) then re-scores every sampled
token, and vllm_kl = mean exp(d) - d - 1 over response tokens, d = log p_trainer - log p_engine.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=32)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--dtype", default="bfloat16", help="the engine body's dtype")
    args = parser.parse_args()

    from passband.curation.suites.source import ProblemSource
    from passband.training.chat import render_prompt
    from passband.training.engines import EngineConfig, SamplingConfig, open_engine
    from passband.training.logprobs import engine_trainer_kl
    from passband.training.model_source import gguf_to_safetensors, load_causal_lm, load_tokenizer, smollm2_gguf_path

    model_dir = gguf_to_safetensors(smollm2_gguf_path(), Path(tempfile.mkdtemp(prefix="bench-model-")))
    tokenizer = load_tokenizer(model_dir)
    rows = ProblemSource(suite="math", num_problems=args.prompts, seed=0).load().rows
    prompts = [render_prompt(tokenizer, row["prompt"]) for row in rows]
    sampling = SamplingConfig(n=1, temperature=1.0, max_tokens=args.tokens, seed=0)
    trainer = load_causal_lm(model_dir).eval()

    results = {}
    for fp32_head in (False, True):
        engine = open_engine(EngineConfig(dtype=args.dtype, lm_head_fp32=fp32_head, kv_cache_gib=1.0), model_dir)
        start = time.perf_counter()
        samples = [group[0] for group in engine.generate(prompts, sampling)]
        seconds = time.perf_counter() - start
        engine.close()
        kl = engine_trainer_kl(trainer, [s.prompt_token_ids for s in samples], [s.token_ids for s in samples],
                               [s.logprobs for s in samples])
        results[fp32_head] = (kl, sum(len(s.token_ids) for s in samples) / seconds)

    print(f"\n{args.dtype} engine, {args.prompts} prompts x {args.tokens} tokens, T=1, vs the fp32 trainer")
    print("| LM head | vllm_kl | tokens/s |\n|---|---|---|")
    for fp32_head, (kl, speed) in results.items():
        print(f"| {'fp32' if fp32_head else args.dtype} | {kl:.3e} | {speed:.0f} |")
    print(f"ratio vllm_kl {args.dtype} head / fp32 head: {results[False][0] / results[True][0]:.2f}")


if __name__ == "__main__":
    main()
