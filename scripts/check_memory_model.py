"""The memory model (training/memory_model.py) against a measured CPU run of the real RL trainer.

    .venv/bin/python scripts/check_memory_model.py --model DIR [--tokens 188] [--sequences 16]

For each variant (fp32 and bf16 autocast, activation checkpointing on and off), in a process of its
own: the trainer on the shipped SmolLM2-135M, one RL update of `--sequences` random sequences of
`--tokens` tokens (prompt + response) at micro-batch 2 and again at micro-batch 8. Measured:
  state:      RSS after the update and malloc_trim, less RSS before the model loaded: the trainer's
              weights and AdamW state (the gradients are freed after the step), against the model's
              `persistent` (16 bytes a parameter less the gradients' 4: weights 4 + AdamW 8);
  per token:  the forward + backward phase's peak RSS (tasks.host.memory.PhasePeaks) at micro-batch
              8 less at 2, over the 6 x `--tokens` tokens between them, against
              `activation_bytes_per_token` (the model counts what autograd saves; RSS also holds what
              the backward allocates while it runs and what malloc keeps, so expect measured >= model).
Prints each figure beside the model's and their ratio.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
from pathlib import Path

VARIANTS = [{"precision": "fp32", "activation_checkpointing": False},
            {"precision": "fp32", "activation_checkpointing": True},
            {"precision": "bf16_autocast", "activation_checkpointing": False},
            {"precision": "bf16_autocast", "activation_checkpointing": True}]


def rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize()


def child(model_dir: Path, variant: dict, tokens: int, sequences: int) -> dict:
    import torch

    from passband.tasks.host.memory import PhasePeaks
    from passband.training.heap import trim_heap
    from passband.training.rl import update
    from passband.training.rl.batches.batching import RolloutBatch
    from passband.training.rl.config import RLAlgoConfig
    from passband.training.rl.trainer import open_trainer

    trim_heap()
    before = rss()
    peaks = {}
    for micro in (2, 8):
        algo = RLAlgoConfig(lr=1e-5, micro_batch_size=micro, device="cpu", **variant)
        trainer = open_trainer(model_dir, ["math"], algo)
        gen = torch.Generator().manual_seed(0)
        vocab = trainer.model.config.vocab_size
        prompt = tokens // 3
        ids = [torch.randint(0, vocab, (tokens,), generator=gen).tolist() for _ in range(sequences)]
        for row in range(sequences):  # groups of 8 share their prompt
            ids[row][:prompt] = ids[row - row % 8][:prompt]
        batch = RolloutBatch(prompt_ids=[row[:prompt] for row in ids], response_ids=[row[prompt:] for row in ids],
                             engine_logp=[[-1.0] * (tokens - prompt)] * sequences,
                             rewards=[float(i % 3 == 0) for i in range(sequences)], valid=[True] * sequences,
                             tasks=["math"] * sequences, group_size=8)
        phases = PhasePeaks()
        inner = update._inner_step

        def measured_step(*args, **kwargs):
            with phases.phase("forward + backward"):
                return inner(*args, **kwargs)

        update._inner_step = measured_step
        update.rl_update(trainer.model, trainer.ref_model, trainer.optimizer, batch, algo)
        update._inner_step = inner
        trim_heap()
        state = rss() - before
        peaks[micro] = phases.peaks_gb["forward + backward"] * 1e9 - before
        del trainer, batch
        trim_heap()
    return {"state": state, "peak_2": peaks[2], "peak_8": peaks[8]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, required=True, help="The shipped model as a safetensors dir.")
    parser.add_argument("--tokens", type=int, default=188, help="Tokens per sequence (prompt + response).")
    parser.add_argument("--sequences", type=int, default=16)
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        print(json.dumps(child(args.model, json.loads(args.child), args.tokens, args.sequences)))
        return
    from passband.training.memory_model import ModelShape, activation_bytes_per_token, trainer_memory

    shape = ModelShape.from_hf_config(json.loads((args.model / "config.json").read_text()))
    print(f"SmolLM2-135M ({shape.parameters} parameters), {args.sequences} sequences x {args.tokens} tokens, CPU")
    for variant in VARIANTS:
        out = subprocess.run([sys.executable, __file__, "--model", str(args.model), "--tokens", str(args.tokens),
                              "--sequences", str(args.sequences), "--child", json.dumps(variant)],
                             capture_output=True, text=True, check=True).stdout
        got = json.loads(out.strip().splitlines()[-1])
        precision, checkpointing = variant["precision"], variant["activation_checkpointing"]
        model_state = trainer_memory(shape, precision, 1, 1).persistent
        model_token = activation_bytes_per_token(shape, precision, "every-layer" if checkpointing else "none",
                                                 args.tokens)  # eager: RL's default
        token = (got["peak_8"] - got["peak_2"]) / (6 * args.tokens)
        print(f"{precision:14s} checkpointing {'on ' if checkpointing else 'off'}: state {got['state'] / 1e9:.3f} GB "
              f"(model {model_state / 1e9:.3f}, x{got['state'] / model_state:.2f}); activations per token "
              f"{token / 1e3:.1f} KB (model {model_token / 1e3:.1f}, x{token / model_token:.2f}); fwd+bwd peak above "
              f"start at micro-batch 2 / 8: {got['peak_2'] / 1e9:.2f} / {got['peak_8'] / 1e9:.2f} GB", flush=True)


if __name__ == "__main__":
    main()
