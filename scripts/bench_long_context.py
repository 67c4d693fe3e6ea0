"""Peak memory of one SFT step on the shipped SmolLM2-135M at long sequences, by activation checkpointing.

    .venv/bin/python scripts/bench_long_context.py --model DIR [--tokens 2048 4096 8192 16384]
        [--modes none selective every-layer] [--cap-gib 8]

`DIR`: the shipped model as a safetensors checkpoint (tests/conftest.py's smollm2_dir makes one:
`passband.training.model_source.gguf_to_safetensors`). Each point (a length and a checkpointing mode) runs
in a process of its own, so its peak RSS is its own: the model loaded in fp32, one sequence of that many
random tokens packed as SFT packs it (the varlen kernel, the LM head in 1024-token chunks), one forward,
backward and AdamW step. Printed per point:
  peak:      the process's peak RSS (GiB), and that peak less the RSS before the model loaded;
  estimate:  the memory model's peak for the same step (training/memory_model.py `trainer_memory`, what
             `passband doctor` prints): weights, gradients, AdamW, activations, the logits chunk;
  seconds:   the one step's wall time (one step, no warm-up: a rough figure on a shared box).
A point whose estimate exceeds `--cap-gib` is not run, and a running point is killed when its RSS passes
the cap (the parent polls it every 0.1 s), so the sweep never pushes a shared machine into swap.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

GIB = 2**30


def rss_bytes(pid: str = "self") -> int:
    with open(f"/proc/{pid}/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize()


def estimate_bytes(tokens: int, mode: str) -> int:
    from passband.training.memory_model import trainer_memory
    from passband.training.model_shapes import PRESET_MODEL_SHAPES
    from passband.training.model_source import SMOLLM2_NAME

    return trainer_memory(PRESET_MODEL_SHAPES[SMOLLM2_NAME], "fp32", tokens, 1024, checkpointing=mode).peak


def child(model_dir: Path, tokens: int, mode: str) -> dict:
    import torch

    from passband.training.heap import trim_heap
    from passband.training.model_source import load_causal_lm
    from passband.training.runtime.activation_checkpointing import enable_checkpointing
    from passband.training.runtime.varlen_attention import VARLEN_SDPA
    from passband.training.sft.model_loss import PackedLMLoss
    from passband.training.sft.packing import SFTExample, collate_packed

    trim_heap()
    before = rss_bytes()
    model = load_causal_lm(model_dir)
    enable_checkpointing(model, mode)
    model.train()
    ids = torch.randint(0, model.config.vocab_size, (tokens,), generator=torch.Generator().manual_seed(0)).tolist()
    batch = collate_packed([SFTExample(ids, [0] * 16 + [1] * (tokens - 16))], [[0]], pad_id=0)
    loss_module = PackedLMLoss(model, 1024, VARLEN_SDPA, "fp32")
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)
    loaded = rss_bytes()
    start = time.perf_counter()
    loss = loss_module(batch.input_ids, batch.position_ids, batch.targets, batch.cu_seqlens) / batch.num_loss_tokens
    loss.backward()
    optimizer.step()
    seconds = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return {"tokens": tokens, "mode": mode, "peak": peak, "before": before, "loaded": loaded, "seconds": seconds,
            "loss": loss.item()}


def run_point(model_dir: Path, tokens: int, mode: str, cap: int) -> dict | str:
    """One point in its own process, killed if its RSS passes `cap`."""
    proc = subprocess.Popen([sys.executable, __file__, "--child", "--model", str(model_dir), "--tokens", str(tokens),
                             "--modes", mode], stdout=subprocess.PIPE, text=True)
    while proc.poll() is None:
        if rss_bytes(str(proc.pid)) > cap:
            proc.kill()
            proc.wait()
            return f"killed: RSS passed the {cap / GIB:.1f} GiB cap"
        time.sleep(0.1)
    out = proc.stdout.read()
    if proc.returncode != 0:
        return f"failed (exit {proc.returncode})"
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, required=True)
    parser.add_argument("--tokens", type=int, nargs="+", default=[2048, 4096, 8192, 16384])
    parser.add_argument("--modes", nargs="+", default=["none", "selective", "every-layer"])
    parser.add_argument("--cap-gib", type=float, default=8.0)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.model, args.tokens[0], args.modes[0])))
        return
    cap = int(args.cap_gib * GIB)
    print("| tokens | checkpointing | peak RSS (GiB) | peak less RSS before loading (GiB) | doctor's estimate (GiB) "
          "| measured / estimate | s/step |")
    print("|---|---|---|---|---|---|---|")
    for tokens in args.tokens:
        for mode in args.modes:
            estimate = estimate_bytes(tokens, mode)
            if estimate > cap:
                print(f"| {tokens} | {mode} | not run: estimate over the {args.cap_gib:g} GiB cap | | "
                      f"{estimate / GIB:.2f} | | |", flush=True)
                continue
            point = run_point(args.model, tokens, mode, cap)
            if isinstance(point, str):
                print(f"| {tokens} | {mode} | {point} | | {estimate / GIB:.2f} | | |", flush=True)
                continue
            used = point["peak"] - point["before"]
            print(f"| {tokens} | {mode} | {point['peak'] / GIB:.2f} | {used / GIB:.2f} | {estimate / GIB:.2f} | "
                  f"{used / estimate:.2f} | {point['seconds']:.1f} |", flush=True)


if __name__ == "__main__":
    main()
