"""Muon's cost on SmolLM2-135M's shape (random weights, one process, the CPU): the Newton-Schulz time inside
one Muon+AdamW optimizer step (its 210 hidden matrices, timed by wrapping the step's own call) against the
whole step, torch's AdamW step, and one bf16-autocast forward+backward of `--tokens` tokens, side by side in one
run, for Newton-Schulz in bfloat16 and in float32; and the optimizer state each keeps.

    nice .venv/bin/python scripts/bench_muon.py --repeats 3 --tokens 1024

With `--ranks 1 2`: whole SFT steps instead (the SFT loop's own train_step over `--tokens` tokens of 256-token
rows, split over the ranks as the loop splits them, bf16 autocast, then clip and the Muon step), at each rank
count in turn under torchrun (gloo, FSDP2; the cores split evenly between the ranks), one table: per step,
Newton-Schulz, the rest of Muon's orthogonalisation (gathering each matrix to its owner, scattering it back,
waiting for the other ranks), the rest of the optimizer step, and forward+backward, each as seconds and as a
share of the whole step (rank 0's; Newton-Schulz also as the most any rank spent).

    nice .venv/bin/python scripts/bench_muon.py --ranks 1 2 --tokens 1024 --repeats 2
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import torch

from passband.training.optim.config import OptimizerConfig
from passband.training.optim.groups import split_parameters
from passband.training.optim.memory import optimizer_state_bytes
from passband.training.optim.newton_schulz import newton_schulz
from passband.training.optim import optimizer as optimizer_module
from passband.training.optim.optimizer import build_optimizer


def median_seconds(fn, repeats: int) -> float:
    fn()  # warm: allocations, thread pools
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--tokens", type=int, default=1024, help="tokens of the forward+backward timed beside it (0: none)")
    parser.add_argument("--ranks", type=int, nargs="+", default=None,
                        help="time whole SFT steps at these rank counts instead (module docstring)")
    parser.add_argument("--rank-worker", action="store_true", help=argparse.SUPPRESS)  # one launched rank
    parser.add_argument("--ns-dtype", default="bfloat16", choices=["bfloat16", "float32"],
                        help="Newton-Schulz dtype of the --ranks steps")
    args = parser.parse_args()
    if args.rank_worker:
        return rank_worker(args.tokens, args.repeats, args.ns_dtype)
    if args.ranks:
        return steps_by_ranks(args.ranks, args.tokens, args.repeats, args.ns_dtype)
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
                         num_attention_heads=9, num_key_value_heads=3, tie_word_embeddings=True)
    torch.manual_seed(0)
    model = LlamaForCausalLM(config).float()
    generator = torch.Generator().manual_seed(1)
    for parameter in model.parameters():
        parameter.grad = torch.randn(parameter.shape, generator=generator) * 1e-3
    muon_matrices = [parameter.grad for _, parameter in split_parameters(model)[0]]

    def timed_newton_schulz(*args, **kwargs):  # the step's own calls, timed
        start = time.perf_counter()
        result = newton_schulz(*args, **kwargs)
        ns_seconds[-1] += time.perf_counter() - start
        return result
    optimizer_module.newton_schulz = timed_newton_schulz
    shapes = {name: tuple(parameter.shape) for name, parameter in model.named_parameters()}
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; {len(muon_matrices)} Muon matrices, "
          f"{sum(m.numel() for m in muon_matrices) / 1e6:.1f}M of {sum(p.numel() for p in model.parameters()) / 1e6:.1f}M weights")

    forward_backward = None
    if args.tokens:
        ids = torch.randint(0, config.vocab_size, (1, args.tokens), generator=generator)

        def run_forward_backward() -> None:
            with torch.autocast("cpu", dtype=torch.bfloat16):
                model(input_ids=ids, labels=ids).loss.backward()
        grads = [p.grad.clone() for p in model.parameters()]
        forward_backward = median_seconds(run_forward_backward, args.repeats)
        for parameter, grad in zip(model.parameters(), grads):
            parameter.grad = grad
    adamw = build_optimizer(model, OptimizerConfig(), lr=1e-9, weight_decay=0.0)
    adamw_step = median_seconds(adamw.step, args.repeats)
    adamw_bytes = optimizer_state_bytes(shapes, OptimizerConfig())
    print(f"{'NS dtype':>9} | {'NS s':>7} | {'Muon step s':>11} | {'NS/step':>7} | {'AdamW step s':>12} | "
          f"{'Muon/AdamW':>10} | {'fwd+bwd s':>9} | {'NS/fwd+bwd':>10} | state MB (AdamW {adamw_bytes / 1e6:.0f})", flush=True)
    for dtype in ("bfloat16", "float32"):
        muon_config = OptimizerConfig(name="muon", newton_schulz_dtype=dtype)
        muon = build_optimizer(model, muon_config, lr=1e-9, weight_decay=0.0)
        ns_seconds = []
        step = median_seconds(lambda: ns_seconds.append(0.0) or muon.step(), args.repeats)
        ns = statistics.median(ns_seconds[1:])  # the same steps' own Newton-Schulz time, warm-up left out
        fb = f"{forward_backward:9.2f} | {ns / forward_backward:10.2f}" if forward_backward else f"{'-':>9} | {'-':>10}"
        print(f"{dtype:>9} | {ns:7.2f} | {step:11.2f} | {ns / step:7.2f} | {adamw_step:12.3f} | {step / adamw_step:10.1f} | "
              f"{fb} | {optimizer_state_bytes(shapes, muon_config) / 1e6:.0f}", flush=True)


SMOLLM2_SHAPE = dict(vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
                     num_attention_heads=9, num_key_value_heads=3, tie_word_embeddings=True)
ROW_TOKENS = 256


def steps_by_ranks(ranks: list[int], tokens: int, repeats: int, ns_dtype: str) -> None:
    """Launch this script under torchrun at each rank count, one after another; print their table."""
    cores = os.cpu_count() or 1
    rows = []
    for nproc in ranks:
        env = {**os.environ, "OMP_NUM_THREADS": str(max(1, cores // nproc))}
        done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node",
                               str(nproc), __file__, "--rank-worker", "--tokens", str(tokens), "--repeats",
                               str(repeats), "--ns-dtype", ns_dtype], env=env, capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"{nproc} ranks failed:\n{done.stderr[-4000:]}")
        rows.append(json.loads([line for line in done.stdout.splitlines() if line.startswith("{")][-1]))
        print(f"{nproc} ranks done: {rows[-1]}", flush=True)
    print(f"\nSFT step of {tokens} tokens ({ROW_TOKENS}-token rows), SmolLM2-135M's shape, Muon with Newton-Schulz in "
          f"{ns_dtype}, bf16 autocast; median of {repeats} steps after one warm-up; seconds (share of the step)")
    print("| ranks (threads each) | whole step s | Newton-Schulz | NS, most on a rank | gather/scatter + waits | "
          "rest of the optimizer step | forward+backward | clip |")
    print("|---|---|---|---|---|---|---|---|")
    for row in rows:
        step = row["step_s"]

        def part(name: str) -> str:
            return f"{row[name]:.2f} ({row[name] / step:.2f})"
        print(f"| {row['ranks']} ({row['threads']}) | {step:.2f} | {part('newton_schulz_s')} | "
              f"{part('newton_schulz_max_s')} | {part('exchange_s')} | {part('optimizer_rest_s')} | "
              f"{part('forward_backward_s')} | {part('clip_s')} |")


def rank_worker(tokens: int, repeats: int, ns_dtype: str) -> None:
    """One rank of `steps_by_ranks` (or the one process): time the SFT loop's step, print rank 0's medians."""
    import torch.distributed as dist
    from transformers import LlamaConfig, LlamaForCausalLM

    from passband.training.optim import optimizer as optimizer_module
    from passband.training.runtime.distributed import (close_process_group, full_norm, open_process_group, rank,
                                                       shard_for_training, world_size)
    from passband.training.runtime.varlen_attention import resolve_attention
    from passband.training.sft.loop import train_step
    from passband.training.sft.model_loss import PackedLMLoss
    from passband.training.sft.packing import SFTExample

    open_process_group(1800.0)
    device = torch.device("cpu")
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(**SMOLLM2_SHAPE))
    loss_module = shard_for_training(PackedLMLoss(model, 256, resolve_attention("auto", device), "bf16_autocast"),
                                     device, "bf16_autocast")
    optimizer = build_optimizer(model, OptimizerConfig(name="muon", newton_schulz_dtype=ns_dtype), lr=1e-9,
                                weight_decay=0.0)
    generator = torch.Generator().manual_seed(1)  # every rank the same rows: train_step splits them
    examples = [SFTExample(torch.randint(0, SMOLLM2_SHAPE["vocab_size"], (ROW_TOKENS,), generator=generator).tolist(),
                           [1] * ROW_TOKENS) for _ in range(max(1, tokens // ROW_TOKENS))]
    timed = {"newton_schulz_s": 0.0, "orthogonalize_s": 0.0}
    newton_schulz, orthogonalize = optimizer_module.newton_schulz, optimizer_module.orthogonalize

    def timed_call(name: str, fn):  # the optimizer's own calls, timed
        def call(*args, **kwargs):
            start = time.perf_counter()
            result = fn(*args, **kwargs)
            timed[name] += time.perf_counter() - start
            return result
        return call
    optimizer_module.newton_schulz = timed_call("newton_schulz_s", newton_schulz)
    optimizer_module.orthogonalize = timed_call("orthogonalize_s", orthogonalize)
    steps = []
    for _ in range(repeats + 1):
        timed.update(newton_schulz_s=0.0, orthogonalize_s=0.0)
        start = time.perf_counter()
        train_step(loss_module, examples, ROW_TOKENS, ROW_TOKENS, 0, device, world_size(), rank())
        backward_done = time.perf_counter()
        full_norm(torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0))
        clip_done = time.perf_counter()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        done = time.perf_counter()
        steps.append({"step_s": done - start, "forward_backward_s": backward_done - start,
                      "clip_s": clip_done - backward_done, "newton_schulz_s": timed["newton_schulz_s"],
                      "exchange_s": timed["orthogonalize_s"] - timed["newton_schulz_s"],
                      "optimizer_rest_s": done - clip_done - timed["orthogonalize_s"]})
    row = {name: statistics.median(step[name] for step in steps[1:]) for name in steps[0]}  # warm-up left out
    per_rank = [row["newton_schulz_s"]] * world_size()
    if world_size() > 1:
        dist.all_gather_object(per_rank, row["newton_schulz_s"])
    row |= {"newton_schulz_max_s": max(per_rank), "ranks": world_size(), "threads": torch.get_num_threads()}
    if rank() == 0:
        print(json.dumps(row), flush=True)
    close_process_group()


if __name__ == "__main__":
    main()
