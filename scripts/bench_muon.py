"""Muon's cost on SmolLM2-135M's shape (random weights, one process, the CPU): the Newton-Schulz time inside
one Muon+AdamW optimizer step (its 210 hidden matrices, timed by wrapping the step's own call) against the
whole step, torch's AdamW step, and one bf16-autocast forward+backward of `--tokens` tokens, side by side in one
run, for Newton-Schulz in bfloat16 and in float32; and the optimizer state each keeps.

    nice .venv/bin/python scripts/bench_muon.py --repeats 3 --tokens 1024
"""

from __future__ import annotations

import argparse
import statistics
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
    args = parser.parse_args()
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


if __name__ == "__main__":
    main()
