"""Seconds per RL update under the settings that shape its compute, side by side on one batch.

The trainer check's random-weight model, fixed rollout batch and timed updates (scripts/gpu_check_trainers.py
`rl_check`), each variant on a fresh copy of the same weights, one warm-up update then `--updates` timed ones:

    .venv/bin/python scripts/bench_rl_update_settings.py                    # SmolLM2's shape, fp32, 8 x (64 + 192)
    .venv/bin/python scripts/bench_rl_update_settings.py --precision bf16_autocast

Variants: the default (eager attention, 256-token log-prob chunks, activation checkpointing), SDPA,
SDPA with 4096-token chunks, eager without checkpointing. Prints each variant's seconds and its
speed over the default's.
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gpu_check_trainers as check  # noqa: E402  (a sibling script: the same model and batch)

VARIANTS = {
    "default (eager, chunk 256, checkpointing)": {},
    "sdpa": {"attention": "sdpa"},
    "sdpa, chunk 4096": {"attention": "sdpa", "logprob_chunk_size": 4096},
    "eager, no checkpointing": {"activation_checkpointing": False},
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shape", choices=sorted(check.SHAPES), default="smollm2")
    parser.add_argument("--precision", choices=["fp32", "bf16_autocast"], default="fp32")
    parser.add_argument("--prompt-len", type=int, default=64)
    parser.add_argument("--response-len", type=int, default=192)
    parser.add_argument("--prompts", type=int, default=1, help="prompts of the batch (x 8 rollouts each)")
    parser.add_argument("--updates", type=int, default=2, help="timed updates per variant (after one warm-up)")
    args = parser.parse_args()

    check.use_checkout()
    import torch

    base = check.build_model(args.shape, seed=0)
    base.set_attn_implementation("eager")
    batch = check.rollout_batch(base, args.prompt_len, args.response_len, args.prompts, 8,
                                check.SHAPES[args.shape]["vocab_size"])
    default = None
    for name, settings in VARIANTS.items():
        # the check's own timed loop, on a fresh copy of the same weights; on the CPU its attention is eager
        seconds = check.rl_check(copy.deepcopy(base), torch.device("cpu"), args.precision, batch, args.updates,
                                 **settings)["rl_update_seconds"]
        median = statistics.median(seconds)
        default = default or median
        timed = " ".join(f"{s:.1f}" for s in seconds)
        print(f"{name}: {timed} s; speed over the default {default / median:.2f}x", flush=True)

if __name__ == "__main__":
    main()
