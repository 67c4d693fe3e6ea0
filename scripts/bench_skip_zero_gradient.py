"""Seconds per RL update with `algo.skip_zero_gradient_rows` on and off, on a batch half of whose groups
have zero variance (docs/recipe.md section 4.3).

P prompts x G=8 random-token responses (lengths 5..--response-tokens) through `rl_update` of the real
model's trainer (`open_trainer`: activation checkpointing, the config's precision), the two settings
alternating on the same batch from the same weights. Printed: median seconds per update of each, the
skipped fraction, and the seconds of the no-grad scoring pass (with fused scoring, the skipped rows'
own forward that keeps vllm_kl / entropy over every row).

    .venv/bin/python scripts/bench_skip_zero_gradient.py --model DIR [--repeats 2] [--set num_inner_steps=2]
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import time
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, required=True, help="A safetensors checkpoint dir (the real model).")
    parser.add_argument("--prompts", type=int, default=6)
    parser.add_argument("--prompt-tokens", type=int, default=60)
    parser.add_argument("--response-tokens", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--set", action="append", default=[], metavar="KEY=JSON", help="RLAlgoConfig override.")
    args = parser.parse_args()

    import torch

    from passband.training.rl import update
    from passband.training.rl.batches.batching import RolloutBatch
    from passband.training.rl.config import RLAlgoConfig
    from passband.training.rl.trainer import open_trainer

    overrides = {key: json.loads(value) for key, value in (item.split("=", 1) for item in args.set)}
    base = RLAlgoConfig(lr=1e-5, **overrides)
    trainer = open_trainer(args.model, ["math"], base)
    start_weights = copy.deepcopy(trainer.model.state_dict())
    gen = torch.Generator().manual_seed(0)
    prompts, responses, rewards = [], [], []
    for group in range(args.prompts):
        prompt = torch.randint(0, trainer.model.config.vocab_size, (args.prompt_tokens,), generator=gen).tolist()
        for i in range(8):
            length = int(torch.randint(5, args.response_tokens + 1, (1,), generator=gen))
            prompts.append(prompt)
            responses.append(torch.randint(0, trainer.model.config.vocab_size, (length,), generator=gen).tolist())
            rewards.append(float(group % 4 == 0) if group % 2 == 0 else float(i % 3 == 0))  # even groups: no signal
    batch = RolloutBatch(prompt_ids=prompts, response_ids=responses, engine_logp=[[-1.0] * len(r) for r in responses],
                         rewards=rewards, valid=[True] * len(rewards), tasks=["math"] * len(rewards), group_size=8)

    scoring: list[float] = []
    plain_scoring = update._scoring_pass

    def timed_scoring(*a, **k):
        start = time.perf_counter()
        out = plain_scoring(*a, **k)
        scoring.append(time.perf_counter() - start)
        return out

    update._scoring_pass = timed_scoring
    results: dict[bool, dict[str, list[float]]] = {True: {"s": [], "scoring_s": []}, False: {"s": [], "scoring_s": []}}
    for _ in range(args.repeats):
        for skip in (False, True):
            trainer.model.load_state_dict(start_weights)
            trainer.optimizer.state.clear()
            cfg = base.model_copy(update={"skip_zero_gradient_rows": skip})
            scoring.clear()
            start = time.perf_counter()
            metrics = update.rl_update(trainer.model, trainer.ref_model, trainer.optimizer, batch, cfg)
            results[skip]["s"].append(time.perf_counter() - start)
            results[skip]["scoring_s"].append(sum(scoring))
            results[skip]["skipped"] = [metrics["num_skipped_rows"], metrics["num_skipped_tokens"],
                                        metrics["num_train_sequences"], metrics["num_train_tokens"]]
    for skip in (False, True):
        r = results[skip]
        rows, tokens, all_rows, all_tokens = r["skipped"]
        print(f"skip={skip!s:5}  update {statistics.median(r['s']):6.2f} s (runs {', '.join(f'{s:.2f}' for s in r['s'])})"
              f"  scoring pass {statistics.median(r['scoring_s']):5.2f} s  skipped {rows:.0f}/{all_rows:.0f} rows, "
              f"{tokens:.0f}/{all_tokens:.0f} response tokens")
    off, on = statistics.median(results[False]["s"]), statistics.median(results[True]["s"])
    print(f"saved {off - on:.2f} s per update ({(off - on) / off:.0%})")


if __name__ == "__main__":
    main()
