"""What makes the trainers GPU trainers, checked on a bare CUDA image (issue 50 item 6).

    python scripts/gpu_check_trainers.py                     # CUDA when present: SmolLM2-135M's shape
    python scripts/gpu_check_trainers.py --device cpu --shape tiny   # what CI and tests/ run
    PYTHONPATH=DIR python scripts/gpu_check_trainers.py --trl       # and TRL's row beside ours (DIR: trl)

The GPU machines this can run on have torch with CUDA, transformers and peft, but no vLLM, Prefect or
MLflow and no network, and our package is not installed there: so this script imports nothing from
flows/ or tasks/ (it says so at the end) and maps `passband.training` onto the checkout itself. Only
pydantic must come as a wheel besides (the trainer configs are pydantic models).

Models built from a config with random weights (no checkpoint can travel there):
1. a matmul peak measured in this run (bf16 on CUDA, fp32 on the CPU), the yardstick of MFU;
2. SFT steps in one process (packed micro-batches, accumulation, clip, AdamW fused on CUDA) at the
   trainer's device and precision: tokens/s, MFU (6 x parameters x tokens per step), peak device memory;
3. RL updates on one fixed rollout batch (random prompts and responses, the engine's log-probs
   those of the start weights): the same figures;
4. on a tiny model, log-probs and one update at the device's precision against the CPU's in fp32:
   the largest log-prob difference and the relative difference of the weight change;
5. 2 and 3 again on one FSDP2 rank (`fsdp_` figures), sharded as torchrun's ranks shard them;
6. with --trl, TRL's GRPOTrainer on the same shape, batch and precision (scripts/gpu_check_trl.py):
   its step, generation and update seconds, and our update's speed over its update's.
7. the hand-over to an engine: CUDA memory reserved by torch's allocator after the trainers, and after
   the release the trainers make before an engine starts (training/heap.py release_device_memory).
Each phase prints its `name: value` lines and appends one JSON line to `--out`/gpu_check.jsonl (default
$OUT) as soon as it ends; a phase that fails is recorded and the next one runs (scripts/gpu_check_common.py).
The last line holds every figure as one JSON object; the exit status is 1 if a phase failed.
"""

from __future__ import annotations

import argparse
import copy
import os
import sys
import time
import types
from pathlib import Path

from gpu_check_common import Phases, reset_peak, synchronize  # this script's folder is sys.path[0]

ROOT = Path(__file__).resolve().parents[1]
SHAPES = {  # LlamaConfig keywords; smollm2 = HuggingFaceTB/SmolLM2-135M-Instruct's config.json
    "tiny": dict(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                 num_attention_heads=4, num_key_value_heads=2),
    "smollm2": dict(vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
                    num_attention_heads=9, num_key_value_heads=3, rope_theta=100000.0),
    "qwen1.5b": dict(vocab_size=151936, hidden_size=1536, intermediate_size=8960, num_hidden_layers=28,
                     num_attention_heads=12, num_key_value_heads=2, rope_theta=1000000.0),
}


def use_checkout() -> None:
    """`passband.<folder>` is this checkout's <folder>, as the installed package maps it (pyproject)."""
    package = types.ModuleType("passband")
    package.__path__ = [str(ROOT)]
    sys.modules["passband"] = package


def build_model(shape: str, seed: int):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(**SHAPES[shape], max_position_embeddings=4096, tie_word_embeddings=True)
    return LlamaForCausalLM(config).eval()  # eval: no dropout, deterministic log-probs (as the RL trainer)


def matmul_peak_tflops(device, seconds: float = 1.0) -> float:
    """Dense matmul throughput measured here: bf16 on CUDA (the tensor cores MFU is quoted against), fp32 on the CPU."""
    import torch

    size, dtype = (8192, torch.bfloat16) if device.type == "cuda" else (1024, torch.float32)
    a = torch.randn(size, size, device=device, dtype=dtype)
    b = torch.randn(size, size, device=device, dtype=dtype)
    a @ b  # warm-up
    synchronize(device)
    runs, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        a @ b
        runs += 1
    synchronize(device)
    return 2 * size**3 * runs / (time.perf_counter() - start) / 1e12


def random_ids(generator, vocab: int, length: int) -> list[int]:
    import torch

    return torch.randint(0, vocab, (length,), generator=generator).tolist()


def sft_check(model, device, precision: str, seq_len: int, rows: int, steps: int, vocab: int,
              shard: bool = False) -> dict[str, float]:
    """`steps` SFT steps of `rows` examples of `seq_len` tokens (half prompt, half response); with
    `shard`, on one FSDP2 rank (the process group open), as the ranks shard it (`shard_units`)."""
    import torch

    from passband.training.runtime.device import fused_on, peak_memory_mb
    from passband.training.runtime.distributed import shard_units
    from passband.training.sft.loop import train_step
    from passband.training.sft.model_loss import PackedLMLoss
    from passband.training.sft.packing import SFTExample

    generator = torch.Generator().manual_seed(1)
    examples = [SFTExample(random_ids(generator, vocab, seq_len), [0] * (seq_len // 2) + [1] * (seq_len - seq_len // 2))
                for _ in range(rows)]
    model.train()
    previous_attention = model.config._attn_implementation  # PackedLMLoss sets its packed kernel
    loss_module = PackedLMLoss(model, chunk_size=1024, precision=precision)
    if shard:
        loss_module = shard_units(loss_module, device, precision)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5, **fused_on(device))
    seconds, metrics = [], {}
    for _ in range(steps + 1):  # the first step warms up (allocator, kernels) and is not timed
        synchronize(device)
        start = time.perf_counter()
        metrics = train_step(loss_module, examples, seq_len, seq_len * 2, 0, device)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        synchronize(device)
        seconds.append(time.perf_counter() - start)
    model.eval()
    model.set_attn_implementation(previous_attention)
    step_seconds = sum(seconds[1:]) / steps
    return {"sft_tokens_per_s": metrics["num_tokens"] / step_seconds, "sft_step_s": step_seconds,
            "sft_loss": metrics["loss"], "sft_peak_memory_mb": peak_memory_mb(device),
            "sft_tflops": 6 * num_parameters(model) * metrics["num_tokens"] / step_seconds / 1e12}


def rollout_batch(model, prompt_len: int, response_len: int, num_prompts: int, group_size: int, vocab: int):
    """A fixed batch: random prompts and responses, the engine's log-probs the model's own (on-policy)."""
    import torch

    from passband.training.logprobs import response_logprobs
    from passband.training.rl.batches.batching import RolloutBatch

    generator = torch.Generator().manual_seed(2)
    prompts, responses = [], []
    for _ in range(num_prompts):
        prompt = random_ids(generator, vocab, prompt_len)
        for _ in range(group_size):
            prompts.append(prompt)
            responses.append(random_ids(generator, vocab, response_len))
    with torch.no_grad():
        engine = [response_logprobs(model, [p], [r]).logp[0].tolist() for p, r in zip(prompts, responses)]
    rewards = [float(i % 2) for i in range(len(prompts))]  # half right in every group: every row has signal
    return RolloutBatch(prompt_ids=prompts, response_ids=responses, engine_logp=engine, rewards=rewards,
                        valid=[True] * len(prompts), tasks=["math"] * len(prompts), group_size=group_size)


def rl_check(model, device, precision: str, batch, updates: int, shard: bool = False,
             **settings) -> dict[str, float | list[float]]:
    """`updates` RL updates (one inner step each) on `batch`; the first warms up. With `shard`, on one
    FSDP2 rank (the process group open), as the ranks shard the policy (training/rl/ranks.py).
    `settings`: RLAlgoConfig fields over the check's (scripts/bench_rl_update_settings.py varies them)."""
    import torch

    from passband.training.rl.config import RLAlgoConfig
    from passband.training.rl.ranks import ShardedPolicy
    from passband.training.runtime.distributed import shard_units
    from passband.training.rl.update import build_optimizer, rl_update
    from passband.training.runtime.device import peak_memory_mb

    cfg = RLAlgoConfig(**{"precision": precision, "device": device.type, "micro_batch_size": 8, "lr": 1e-6,
                          "trim_heap": False, "attention": rl_attention(device), **settings})
    model.set_attn_implementation(cfg.attention)  # as the RL trainer loads its policy (training/rl/trainer.py)
    if shard:
        model = shard_units(ShardedPolicy(model), device, precision)
    optimizer = build_optimizer(model, cfg)
    seconds, metrics = [], {}
    for index in range(updates + 1):
        synchronize(device)
        start = time.perf_counter()
        metrics = rl_update(model, None, optimizer, batch, cfg, torch.Generator().manual_seed(index))
        synchronize(device)
        seconds.append(time.perf_counter() - start)
    update_seconds = sum(seconds[1:]) / updates
    num_tokens = sum(len(p) + len(r) for p, r in zip(batch.prompt_ids, batch.response_ids))
    return {"rl_tokens_per_s": num_tokens / update_seconds, "rl_update_s": update_seconds, "rl_update_seconds": seconds[1:],
            "rl_loss": metrics["loss"], "rl_vllm_kl": metrics["vllm_kl"], "rl_peak_memory_mb": peak_memory_mb(device),
            # one update = a forward and backward of every token (fused scoring: no separate pass)
            "rl_tflops": 6 * num_parameters(model) * num_tokens / update_seconds / 1e12}


def one_rank_checks(args: argparse.Namespace, device, precision: str, vocab: int) -> dict[str, float]:
    """The SFT steps and the RL updates again on one FSDP2 rank, as torchrun's ranks shard them
    (MixedPrecisionPolicy under bf16): a one-rank process group (NCCL on CUDA, gloo on the CPU), fresh
    weights of the same seed. Every figure is prefixed `fsdp_`; `fsdp_sft_loss` against `sft_loss` is
    the agreement (same weights, batches and steps; fp32 equal to float noise, bf16 to its rounding).
    The RL updates train a fresh model on a batch of its own, as the one-process row does."""
    import torch

    backend = "nccl" if device.type == "cuda" else "gloo"
    torch.distributed.init_process_group(backend, store=torch.distributed.HashStore(), rank=0, world_size=1)
    reset_peak(device)
    figures = sft_check(build_model(args.shape, seed=0).to(device), device, precision, args.seq_len, args.rows,
                        args.steps, vocab, shard=True)
    model = build_model(args.shape, seed=0).to(device)
    model.set_attn_implementation("eager")  # the batch's log-probs, as in main
    batch = rollout_batch(model, args.prompt_len, args.response_len, args.prompts, 8, vocab)
    reset_peak(device)
    figures.update(rl_check(model, device, precision, batch, args.steps, shard=True))
    torch.distributed.destroy_process_group()
    return {f"fsdp_{name}": value for name, value in figures.items()}


def rl_attention(device) -> str:
    """The RL trainer's kernel where the check runs: its default, eager, on the CPU (faster there); on
    CUDA rl/gpu's sdpa (eager keeps every layer's [heads, T, T] probabilities; TRL's row runs sdpa too)."""
    return "sdpa" if device.type == "cuda" else "eager"


def agreement_check(device, precision: str) -> dict[str, float]:
    """A tiny model's log-probs and one update's weight change on `device` at `precision`, against
    the CPU's in fp32: bf16 autocast differs by its rounding, fp32 by summation order only."""
    import torch

    from passband.training.logprobs import response_logprobs
    from passband.training.rl.config import RLAlgoConfig
    from passband.training.rl.update import rl_update
    from passband.training.runtime.precision import autocast_for

    on_cpu = build_model("tiny", seed=3)
    batch = rollout_batch(on_cpu, 12, 20, 2, 4, SHAPES["tiny"]["vocab_size"])
    on_device = copy.deepcopy(on_cpu).to(device)
    for model in (on_cpu, on_device):
        model.set_attn_implementation("eager")  # the RL trainer's default kernel
    with torch.no_grad():
        cpu_logp = response_logprobs(on_cpu, batch.prompt_ids, batch.response_ids).logp
        with autocast_for(precision, device):
            device_logp = response_logprobs(on_device, batch.prompt_ids, batch.response_ids).logp.cpu()
    deltas = []
    for model, where, at in [(on_cpu, torch.device("cpu"), "fp32"), (on_device, device, precision)]:
        before = [p.detach().cpu().clone() for p in model.parameters()]
        cfg = RLAlgoConfig(precision=at, device=where.type, micro_batch_size=4, lr=1e-2, trim_heap=False)
        model.set_attn_implementation(cfg.attention)
        rl_update(model, None, torch.optim.SGD(model.parameters(), lr=1e-2), batch, cfg, torch.Generator().manual_seed(0))
        deltas.append(torch.cat([(p.detach().cpu() - b).flatten() for p, b in zip(model.parameters(), before)]))
    return {"logp_max_abs_diff": float((cpu_logp - device_logp).abs().max()),
            "update_rel_diff": float((deltas[0] - deltas[1]).norm() / deltas[0].norm())}


def modelled_peaks(args: argparse.Namespace, device, precision: str) -> dict[str, float]:
    """What the memory model (training/memory_model.py) says the two checks peak at; main prints each
    beside the measured peak (on CUDA torch's peak allocated; on the CPU the process's peak RSS, which
    holds more than the trainer) and their ratio: the check a GPU run makes of the model."""
    from transformers import LlamaConfig

    from passband.training.memory_model import ModelShape, trainer_memory
    from passband.training.rl.config import RLAlgoConfig

    shape = ModelShape.from_hf_config(LlamaConfig(**SHAPES[args.shape], tie_word_embeddings=True).to_dict())
    rl = RLAlgoConfig(attention=rl_attention(device))  # rl_check's micro-batch 8, attention, checkpointing
    sequence = args.prompt_len + args.response_len
    sft_mb = trainer_memory(shape, precision, 2 * args.seq_len, 1024).peak / 2**20
    rl_mb = trainer_memory(shape, precision, 8 * sequence, rl.logprob_chunk_size, checkpointing=rl.activation_checkpointing,
                           eager_sequence_tokens=sequence if rl.attention == "eager" else None).peak / 2**20
    return {"sft_model_peak_mb": sft_mb, "rl_model_peak_mb": rl_mb}


def num_parameters(model) -> int:
    return sum(p.numel() for p in model.parameters())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    parser.add_argument("--shape", choices=sorted(SHAPES), default="smollm2")
    parser.add_argument("--precision", choices=["auto", "fp32", "bf16_autocast"], default="auto")
    parser.add_argument("--seq-len", type=int, default=1024, help="SFT example length (tokens)")
    parser.add_argument("--rows", type=int, default=8, help="SFT examples per step")
    parser.add_argument("--steps", type=int, default=3, help="timed SFT steps and RL updates (after one warm-up each)")
    parser.add_argument("--prompt-len", type=int, default=128)
    parser.add_argument("--response-len", type=int, default=384)
    parser.add_argument("--prompts", type=int, default=4, help="prompts of the RL batch (x 8 rollouts each)")
    parser.add_argument("--trl", action="store_true", help="also TRL's GRPOTrainer on the same batch (trl importable)")
    parser.add_argument("--out", default=os.environ.get("OUT"),
                        help="folder of gpu_check.jsonl, one line per phase (default $OUT; unset: printed only)")
    args = parser.parse_args()

    use_checkout()
    import torch

    from passband.training.heap import release_device_memory
    from passband.training.runtime.device import resolve_device
    from passband.training.runtime.precision import resolve_precision

    device = resolve_device(args.device)
    precision = resolve_precision(args.precision, device)
    vocab = SHAPES[args.shape]["vocab_size"]
    phases = Phases(args.out)
    figures = phases.figures  # every figure of the phases that ended
    with phases.phase("machine") as found:
        found |= {"device": str(device), "device_name": torch.cuda.get_device_name(device) if device.type == "cuda"
                  else "cpu", "precision": precision, "shape": args.shape, "torch": torch.__version__,
                  "matmul_peak_tflops": matmul_peak_tflops(device)}
    with phases.phase("sft") as found:
        model = build_model(args.shape, seed=0).to(device)
        found["parameters"] = num_parameters(model)
        reset_peak(device)
        found |= sft_check(model, device, precision, args.seq_len, args.rows, args.steps, vocab)
        found["sft_mfu"] = found["sft_tflops"] / figures["matmul_peak_tflops"]
    with phases.phase("rl") as found:
        model = build_model(args.shape, seed=0).to(device)  # the same start weights; SFT's steps do not carry over
        model.set_attn_implementation("eager")  # the RL trainer's default kernel, the batch's log-probs included
        batch = rollout_batch(model, args.prompt_len, args.response_len, args.prompts, 8, vocab)
        reset_peak(device)
        found |= rl_check(model, device, precision, batch, args.steps)
        found["rl_mfu"] = found["rl_tflops"] / figures["matmul_peak_tflops"]
    with phases.phase("handover") as found:
        found["handover_reserved_mb_before"] = reserved_mb(device)
        del model
        release_device_memory()
        found["handover_reserved_mb_after"] = reserved_mb(device)
    with phases.phase("agreement") as found:
        found |= agreement_check(device, precision)
    with phases.phase("fsdp") as found:
        found |= one_rank_checks(args, device, precision, vocab)
        found["fsdp_sft_loss_diff"] = abs(found["fsdp_sft_loss"] - figures["sft_loss"])
    if args.trl:
        with phases.phase("trl") as found:
            from gpu_check_trl import trl_check

            found |= trl_check(build_model(args.shape, seed=0), device, precision, args.prompt_len,
                               args.response_len, args.prompts, args.steps, vocab)
            found["rl_update_speedup_over_trl"] = found["trl_update_s"] / figures["rl_update_s"]
    with phases.phase("memory_model") as found:
        found |= modelled_peaks(args, device, precision)
        for name in ("sft", "rl"):
            found[f"{name}_peak_over_model"] = figures[f"{name}_peak_memory_mb"] / found[f"{name}_model_peak_mb"]
    with phases.phase("imports") as found:
        found["imports_flows_or_tasks"] = any(name.startswith(("passband.flows", "passband.tasks"))
                                              for name in sys.modules)
    return phases.finish()


def reserved_mb(device) -> float:
    """What torch's CUDA allocator holds from the driver (live tensors and its cache); 0 off CUDA."""
    import torch

    return torch.cuda.memory_reserved(device) / 2**20 if device.type == "cuda" else 0.0


if __name__ == "__main__":
    sys.exit(main())
