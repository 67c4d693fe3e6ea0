"""Packed against padded RL micro-batches (algo.pack_rows, issue 68) on a long-tailed batch: update tokens/s and
peak memory, side by side in one run, each path in a process of its own (its peak RSS is its own).

The batch: `--prompts` prompts x G=8 responses on the shipped SmolLM2-135M, response lengths log-normal (median
`--median`, sigma 1) capped at `--max-tokens`, the first of each group at the cap (the tail); engine log-probs the
model's own. Each path runs one warm-up update, then `--updates` timed ones (rl_update, fp32 by default, the
config's defaults otherwise: micro_batch_size 8, activation checkpointing, seq-MIS). tokens/s counts the real
tokens (prompt + response) of the trained rows per second of update; the padded tokens are reported beside it.

    nice .venv/bin/python scripts/bench_rl_packing.py --max-tokens 1024
"""

from __future__ import annotations

import argparse
import json
import math
import resource
import subprocess
import sys
import time
from pathlib import Path


def long_tailed_lengths(num_prompts: int, group_size: int, median: float, max_tokens: int, seed: int) -> list[int]:
    import torch

    gen = torch.Generator().manual_seed(seed)
    return [max_tokens if g == 0 else min(max_tokens, max(1, round(math.exp(math.log(median) + float(
        torch.randn(1, generator=gen)))))) for _ in range(num_prompts) for g in range(group_size)]


def child(args: argparse.Namespace) -> None:
    import torch

    from passband.training.logprobs import sequence_logprobs
    from passband.training.model_source import gguf_to_safetensors, load_causal_lm, smollm2_gguf_path
    from passband.training.rl.batches.batching import RolloutBatch
    from passband.training.rl.config import RLAlgoConfig
    from passband.training.rl.trainer import load_policy
    from passband.training.rl.update import build_optimizer, rl_update

    torch.manual_seed(0)
    model_dir = Path(args.model_dir)
    if not (model_dir / "config.json").exists():
        gguf_to_safetensors(smollm2_gguf_path(), model_dir)
    cfg = RLAlgoConfig(precision=args.precision, pack_rows=args.path == "packed", lr=1e-6)
    model = load_policy(model_dir, cfg)
    group_size = 8
    lengths = long_tailed_lengths(args.prompts, group_size, args.median, args.max_tokens, seed=1)
    gen = torch.Generator().manual_seed(2)
    vocab = model.config.vocab_size
    prompts = [torch.randint(0, vocab, (48,), generator=gen).tolist() for _ in range(args.prompts)]
    prompt_ids = [prompts[i // group_size] for i in range(len(lengths))]
    response_ids = [torch.randint(0, vocab, (n,), generator=gen).tolist() for n in lengths]
    engine = [lp.tolist() for lp in sequence_logprobs(load_causal_lm(model_dir).eval(), prompt_ids, response_ids)]
    batch = RolloutBatch(prompt_ids=prompt_ids, response_ids=response_ids, engine_logp=engine,
                         rewards=[float(i % 3 == 0) for i in range(len(lengths))], valid=[True] * len(lengths),
                         tasks=["math"] * len(lengths), group_size=group_size)
    optimizer = build_optimizer(model, cfg)
    rl_update(model, None, optimizer, batch, cfg)  # warm-up
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    seconds = []
    for _ in range(args.updates):
        start = time.perf_counter()
        rl_update(model, None, optimizer, batch, cfg)
        seconds.append(time.perf_counter() - start)
    real = sum(len(p) + len(r) for p, r in zip(prompt_ids, response_ids))
    # the padded path's decoder tokens: micro-batches of 8 rows sorted by length, each padded to its longest
    # (rounded up to pad_to_multiple); packed: each micro-batch's real tokens rounded up once
    order = sorted(range(len(lengths)), key=lambda i: len(prompt_ids[i]) + lengths[i])
    padded_tokens = 0
    for start in range(0, len(order), cfg.micro_batch_size):
        rows = [len(prompt_ids[i]) + lengths[i] for i in order[start : start + cfg.micro_batch_size]]
        padded_tokens += len(rows) * -(-max(rows) // cfg.pad_to_multiple) * cfg.pad_to_multiple
    print(json.dumps({"path": args.path, "seconds": seconds, "real_tokens": real, "padded_tokens": padded_tokens,
                      "peak_rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e9,
                      "peak_rss_before_timed_gb": rss_before / 1e9, "lengths": sorted(lengths)}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=2)
    parser.add_argument("--median", type=float, default=64.0)
    parser.add_argument("--max-tokens", type=int, default=1024)
    parser.add_argument("--updates", type=int, default=1)
    parser.add_argument("--precision", default="fp32", choices=["fp32", "bf16_autocast"])
    parser.add_argument("--model-dir", default=str(Path.home() / ".cache" / "passband-bench" / "smollm2"))
    parser.add_argument("--path", choices=["padded", "packed"], help="(internal) run one path in this process")
    args = parser.parse_args()
    if args.path:
        child(args)
        return
    results = []
    for path in ("padded", "packed"):
        command = [sys.executable, __file__, "--path", path, *sys.argv[1:]]
        out = subprocess.run(command, check=True, capture_output=True, text=True).stdout
        results.append(json.loads(out.strip().splitlines()[-1]))
    print(f"response lengths (sorted): {results[0]['lengths']}")
    print(f"real tokens {results[0]['real_tokens']}, padded path's decoder tokens {results[0]['padded_tokens']}")
    print("| path | s/update (median) | real tokens/s | peak RSS GB |")
    print("|---|---|---|---|")
    for r in results:
        median = sorted(r["seconds"])[len(r["seconds"]) // 2]
        print(f"| {r['path']} | {median:.2f} | {r['real_tokens'] / median:.0f} | {r['peak_rss_gb']:.2f} |")
    speedup = sorted(results[0]["seconds"])[len(results[0]["seconds"]) // 2] / sorted(
        results[1]["seconds"])[len(results[1]["seconds"]) // 2]
    print(f"packed / padded speed: {speedup:.2f}x")


if __name__ == "__main__":
    main()
