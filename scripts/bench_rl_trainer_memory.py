"""Where the RL trainer's memory goes: RSS of one process after each stage of an RL update.

One batch shaped like the issue-16 config (P=6 prompts x G=8, prompts of --prompt-tokens, responses
of --response-tokens, random token ids: memory and time do not depend on the values) through
`rl_update` on the real model. Each variant runs in its own process, so its RSS high-water mark
(ru_maxrss) is its own; stages: imports, model loaded, optimizer built (AdamW state is allocated
lazily, at the first step), peak of the update, and seconds of the update.

    .venv/bin/python scripts/bench_rl_trainer_memory.py --model DIR
    .venv/bin/python scripts/bench_rl_trainer_memory.py --model DIR --variant precision=fp32
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def rss_gb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() / 1e9


def peak_gb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e9


def one(model_dir: Path, overrides: dict, prompt_tokens: int, response_tokens: int, steps: int) -> dict:
    import torch

    stages = {"python + torch": rss_gb()}
    from passband.training.rl.batching import RolloutBatch
    from passband.training.rl.config import RLAlgoConfig
    from passband.training.rl.trainer import open_trainer
    from passband.training.rl.update import rl_update

    stages["imports"] = rss_gb()
    algo = RLAlgoConfig(lr=1e-5, micro_batch_size=8, **overrides)
    trainer = open_trainer(model_dir, ["math"], algo)
    stages["model + optimizer (no state yet)"] = rss_gb()
    gen = torch.Generator().manual_seed(0)
    vocab = trainer.model.config.vocab_size
    prompts, responses = [], []
    for _ in range(6):
        prompt = torch.randint(0, vocab, (prompt_tokens,), generator=gen).tolist()
        for _ in range(8):
            prompts.append(prompt)
            responses.append(torch.randint(0, vocab, (response_tokens,), generator=gen).tolist())
    batch = RolloutBatch(prompt_ids=prompts, response_ids=responses,
                         engine_logp=[[-1.0] * response_tokens for _ in responses],
                         rewards=[float(i % 3 == 0) for i in range(48)], valid=[True] * 48, tasks=["math"] * 48,
                         group_size=8)
    seconds = []
    for _ in range(steps):
        start = time.perf_counter()
        metrics = rl_update(trainer.model, trainer.ref_model, trainer.optimizer, batch, algo)
        seconds.append(time.perf_counter() - start)
        stages[f"after update {len(seconds)}"] = rss_gb()
    peak_before_sync = peak_gb()
    with tempfile.TemporaryDirectory() as scratch:  # the weight sync's save (tasks/rl.py: push_weights)
        trainer.model.save_pretrained(Path(scratch) / "weights")
    stages["after weight-sync save"] = rss_gb()
    stages["peak before the save"] = peak_before_sync
    return {"variant": overrides, "stages_gb": stages, "peak_gb": peak_gb(), "update_s": seconds,
            "skipped": metrics["skipped"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, required=True, help="A safetensors checkpoint dir (the real model).")
    parser.add_argument("--variant", action="append", default=[], metavar="KEY=VALUE[,KEY=VALUE]",
                        help="RLAlgoConfig overrides of one variant (repeatable; default: fp32 and bf16_autocast).")
    parser.add_argument("--prompt-tokens", type=int, default=60)
    parser.add_argument("--response-tokens", type=int, default=128)
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        print(json.dumps(one(args.model, json.loads(args.child), args.prompt_tokens, args.response_tokens, args.steps)))
        return
    variants = args.variant or ["precision=fp32", "precision=bf16_autocast"]
    for variant in variants:
        overrides = {}
        for item in variant.split(","):
            key, value = item.split("=", 1)
            overrides[key] = json.loads(value) if value[:1] in "0123456789-[{tf" and value not in ("fp32",) else value
        out = subprocess.run([sys.executable, __file__, "--model", str(args.model), "--child", json.dumps(overrides),
                              "--prompt-tokens", str(args.prompt_tokens), "--response-tokens",
                              str(args.response_tokens), "--steps", str(args.steps)],
                             capture_output=True, text=True, check=True).stdout
        result = json.loads(out.strip().splitlines()[-1])
        stages = ", ".join(f"{name} {gb:.2f}" for name, gb in result["stages_gb"].items())
        print(f"{variant}: peak {result['peak_gb']:.2f} GB; RSS after: {stages}; update s: "
              + " ".join(f"{s:.1f}" for s in result["update_s"]), flush=True)


if __name__ == "__main__":
    main()
