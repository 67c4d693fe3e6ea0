"""Mixed precision for the trainers (SFT and RL): bf16 autocast over fp32 master weights.

Parameters, gradients and AdamW moments stay fp32; inside `autocast_for` the matmuls (linear
layers, attention) run in bf16, which halves their memory traffic and uses the bf16 units (CUDA
tensor cores; AVX512-BF16/AMX on CPU). Backward runs outside the context, as torch prescribes:
autograd replays each op in the dtype its forward used. The LM head and log-softmax are kept in
fp32 by `chunked_loss` (see there), so the loss itself is not rounded to bf16.
"""

from __future__ import annotations

import contextlib

import torch

from passband.training.runtime.settings import Precision, PrecisionSetting


def resolve_precision(setting: PrecisionSetting, device: torch.device) -> Precision:
    """"auto": bf16 autocast on CUDA and on CPUs with native bf16 matmul (oneDNN says so), else fp32."""
    if setting != "auto":
        return setting
    if device.type == "cuda" or (device.type == "cpu" and torch.ops.mkldnn._is_mkldnn_bf16_supported()):
        return "bf16_autocast"
    return "fp32"


def autocast_for(precision: Precision, device: torch.device) -> contextlib.AbstractContextManager:
    """The forward's context: bf16 autocast on `device`, or nothing for fp32.

    Autocast's weight cache is off: it keeps a bf16 copy of every weight for the whole forward and,
    under activation checkpointing, for the recomputation too, which set the RL trainer's peak
    (scripts/bench_rl_trainer_memory.py, 2 cores: forward + backward peak 4.29 -> 3.93 GB, seconds
    per update within the run-to-run spread). Without it each matmul casts its weight when it runs;
    the bf16 values are the same, so are the log-probs."""
    if precision == "bf16_autocast":
        return torch.autocast(device.type, dtype=torch.bfloat16, cache_enabled=False)
    return contextlib.nullcontext()
