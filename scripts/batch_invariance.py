"""Is vLLM's sampling batch-invariant here? The invariance matrix, dtype x engine process x case.

    .venv/bin/python scripts/batch_invariance.py [--prompts 8] [--n 4] [--tokens 48]
        [--dtypes bfloat16 float32] [--modes in out]

For each engine dtype and each engine mode (`in`: engine core in this process, `out`: in its own,
vLLM's multiprocessing), a fresh engine on the shipped SmolLM2-135M-Instruct samples keyed prompts
in one call, then again, split into two calls, and interleaved with as many other prompts
(training/engines/invariance.py), and prints for each case `invariant` or where the tokens (or,
tokens equal, the log-probs' bits) first part from the one-call sampling, and a digest of the one
call's tokens and log-probs (equal digests: two engines sampled the same bits). Each combination runs in a
process of its own, as a flow's engine would.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def prompts(tokenizer, count: int, offset: int) -> list[str]:
    from passband.training.chat import render_prompt
    from passband.training.engines.invariance import probe_questions

    return [render_prompt(tokenizer, question) for question in probe_questions(count, offset)]


def one(model_dir: Path, dtype: str, mode: str, num_prompts: int, n: int, tokens: int, today: bool) -> dict:
    """The three cases of one engine, in this process: {case: Difference as a dict, or None}, seconds."""
    from passband.training.engines import EngineConfig, SamplingConfig, open_engine
    from passband.training.engines.invariance import batch_invariance
    from passband.training.engines.vllm_engine import VLLMEngine
    from passband.training.model_source import load_tokenizer

    if today:  # the engine before issue #56: the core steps while the requests still arrive, split KV
        VLLMEngine._run_whole = lambda self, prompts, params: self.llm.generate(prompts, params, use_tqdm=True)

    tokenizer = load_tokenizer(model_dir)
    engine = open_engine(EngineConfig(dtype=dtype, in_process=mode == "in", kv_cache_gib=0.5, max_model_len=512,
                                      split_kv_attention=today), model_dir)
    start = time.perf_counter()
    together, cases = batch_invariance(engine, prompts(tokenizer, num_prompts, 0),
                                       prompts(tokenizer, num_prompts, 100),
                                       SamplingConfig(n=n, temperature=1.0, max_tokens=tokens, seed=0))
    seconds = time.perf_counter() - start
    engine.close()
    bits = json.dumps([[s.token_ids, s.logprobs] for key in together for s in together[key]])
    return {"cases": {case: None if d is None else dataclasses.asdict(d) for case, d in cases.items()},
            "seconds": seconds, "digest": hashlib.sha256(bits.encode()).hexdigest()[:12]}


def describe(difference: dict | None) -> str:
    if difference is None:
        return "invariant"
    d = difference
    first, second = (f"{d['first']:.9g}", f"{d['second']:.9g}") if d["kind"] == "logprob" else (int(d["first"]), int(d["second"]))
    return (f"{d['kind']} {first} -> {second} at {d['key']}/s{d['sample_index']} pos {d['position']}"
            f" ({d['num_samples_differing']} samples differ)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--n", type=int, default=4)
    parser.add_argument("--tokens", type=int, default=48)
    parser.add_argument("--dtypes", nargs="+", default=["bfloat16", "float32"])
    parser.add_argument("--modes", nargs="+", default=["in", "out"])
    parser.add_argument("--today", action="store_true", help="sample as before issue #56 (no queueing)")
    parser.add_argument("--model-dir", type=Path, help="a converted SmolLM2 checkpoint (default: convert one)")
    parser.add_argument("--one", nargs=2, help=argparse.SUPPRESS)  # the child's dtype and mode
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one(args.model_dir, *args.one, args.prompts, args.n, args.tokens, args.today)))
        return
    from passband.training.model_source import gguf_to_safetensors, smollm2_gguf_path

    model_dir = args.model_dir or gguf_to_safetensors(smollm2_gguf_path(), Path(tempfile.mkdtemp(prefix="bi-model-")))
    print(f"{args.prompts} prompts x {args.n} samples x <= {args.tokens} tokens at T=1, keyed seeds"
          f"{' as before issue #56 (split-KV attention, no queueing)' if args.today else ''}")
    for dtype in args.dtypes:
        for mode in args.modes:
            child = subprocess.run([sys.executable, __file__, "--one", dtype, mode, "--model-dir", str(model_dir),
                                    "--prompts", str(args.prompts), "--n", str(args.n), "--tokens", str(args.tokens)]
                                   + ["--today"] * args.today,
                                   capture_output=True, text=True)
            if child.returncode != 0:
                sys.exit(f"{dtype} {mode} failed:\n{child.stderr[-3000:]}")
            result = json.loads(child.stdout.strip().splitlines()[-1])
            for case, difference in result["cases"].items():
                print(f"{dtype:9s} {mode:3s} {case:6s} {describe(difference)}", flush=True)
            print(f"{dtype:9s} {mode:3s} ({result['seconds']:.0f} s sampling; one call's samples {result['digest']})",
                  flush=True)


if __name__ == "__main__":
    main()
