"""Document-isolated attention for packed rows, without a [T, T] mask (SFT's packs and RL's packed rows).

A packed micro-batch is flattened to one row of B*T tokens whose documents (and padding tails) are
given by `cu_seqlens` (SFT: training/sft/packing.py; RL: training/runtime/packed_rows.py). Two kernels
keep each document to itself:

- "flash_attention_2" (CUDA with `flash_attn` installed): transformers' own varlen path, which
  takes `cu_seq_lens_q/k` and `max_length_q/k` as forward kwargs and calls `flash_attn_varlen_func`.
- "varlen_sdpa" (anywhere): `varlen_sdpa_attention` below, registered with transformers'
  AttentionInterface: one causal `scaled_dot_product_attention` per document. With `is_causal=True`
  and no mask, SDPA runs its flash kernel (CPU and CUDA alike), whose memory is O(T * head_dim), so
  the whole call is linear in the pack length; the cost is one kernel launch per document per layer.

On CUDA the kernel SDPA takes depends on the dtype: the trainer's default precision there is
bf16_autocast (precision.resolve_precision), so q, k and v arrive in bf16 and the flash kernel runs
(grouped KV heads included, `enable_gqa`). `precision: fp32` on CUDA is an explicit choice: flash has no
fp32 kernel, and with grouped KV heads SDPA may fall back to its math kernel, whose memory grows with
each document's length squared; that setting is for agreement checks on short documents, not long
packs (docs/scaling.md). Unmeasured on a GPU yet: scripts/gpu_check_trainers.py's SFT row is the check.

Why not flex attention on CPU: in torch 2.13 `flex_attention` raises "FlexAttention does not support
backward on CPU", so it cannot train there; on CUDA flash-attn's varlen kernel is the better choice.

Ulysses sequence parallelism (training/runtime/ulysses.py): a forward that passes `sequence_parallel_group`
(its rank's shard of the pack's tokens, the pack's global `cu_seqlens`) has this kernel run between the two
all-to-alls, head-parallel over the whole pack. Only this kernel reads that argument (transformers'
flash_attention_2 would ignore it and attend within the shard), so `resolve_attention` and `varlen_attention`
pick it whenever sequence parallelism is on.

The dense [B, 1, T, T] mask (`packing.block_causal_mask`) stays only as the tests' reference.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Literal

import torch
import torch.nn.functional as F
from torch.distributed import ProcessGroup
from transformers import AttentionInterface

from passband.training.runtime.ulysses import head_parallel_attention

AttentionSetting = Literal["auto", "varlen_sdpa", "flash_attention_2"]
VARLEN_SDPA = "passband_varlen_sdpa"  # the name registered with transformers' AttentionInterface


def varlen_sdpa_attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    cu_seq_lens_q: torch.Tensor | None = None,
    sequence_parallel_group: ProcessGroup | None = None,
    **kwargs: object,
) -> tuple[torch.Tensor, None]:
    """Causal attention within each document of one flattened row.

    query: [1, H, N, D]; key, value: [1, Hkv, N, D] (Hkv divides H: grouped-query attention);
    cu_seq_lens_q: [num_docs + 1] int32 document boundaries over the N tokens. Returns the
    transformers attention contract: output [1, N, H, D] and no attention weights.
    sequence_parallel_group: the N tokens are this rank's shard of the pack, `cu_seq_lens_q` the whole
    pack's boundaries: attention runs head-parallel over the pack (`ulysses.head_parallel_attention`).
    """
    if cu_seq_lens_q is None or attention_mask is not None or query.shape[0] != 1:
        raise ValueError(
            f"{VARLEN_SDPA} serves packed training only: one flattened row, no attention_mask, and "
            "cu_seq_lens_q (training/sft/model_loss.py, training/logprobs.py: packed_response_logprobs); use attn_implementation='sdpa' elsewhere"
        )
    lengths = cu_seq_lens_q.diff().tolist()
    if sequence_parallel_group is not None:
        return head_parallel_attention(_per_document, query, key, value, sequence_parallel_group, lengths=lengths,
                                       scaling=scaling, dropout=dropout), None
    return _per_document(query, key, value, lengths, scaling, dropout), None


def _per_document(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, lengths: list[int],
                  scaling: float | None, dropout: float) -> torch.Tensor:
    """One causal SDPA per document of `lengths` tokens: [1, H, N, D] q and [1, Hkv, N, D] k, v -> [1, N, H, D]."""
    pieces = [
        # split (not slicing) so backward concatenates the pieces' gradients instead of adding
        # one zero-padded [1, H, N, D] gradient per document.
        F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scaling, dropout_p=dropout, enable_gqa=True)
        for q, k, v in zip(query.split(lengths, dim=2), key.split(lengths, dim=2), value.split(lengths, dim=2))
    ]
    return torch.cat(pieces, dim=2).transpose(1, 2)  # [1, N, H, D]


AttentionInterface.register(VARLEN_SDPA, varlen_sdpa_attention)


def resolve_attention(setting: AttentionSetting, device: torch.device, sequence_parallel: bool = False) -> str:
    """The transformers attn_implementation for `setting` on `device`.

    "auto": flash-attn's varlen kernel on CUDA when `flash_attn` is installed, else varlen_sdpa; varlen_sdpa
    under sequence parallelism, the kernel that runs head-parallel (module docstring).
    """
    if sequence_parallel:
        if setting == "flash_attention_2":
            raise ValueError("attention='flash_attention_2' does not run under sequence parallelism "
                             "(distributed.sequence_parallel > 1); use 'auto' or 'varlen_sdpa'")
        return VARLEN_SDPA
    if setting == "auto":
        flash = device.type == "cuda" and importlib.util.find_spec("flash_attn") is not None
        return "flash_attention_2" if flash else VARLEN_SDPA
    if setting == "flash_attention_2" and device.type != "cuda":
        raise ValueError(f"attention='flash_attention_2' needs a CUDA device, got {device}; use 'auto' or 'varlen_sdpa'")
    return "flash_attention_2" if setting == "flash_attention_2" else VARLEN_SDPA


@contextmanager
def varlen_attention(models: list[torch.nn.Module], device: torch.device,
                     sequence_parallel: bool = False) -> Iterator[None]:
    """Every model of `models` on the varlen kernel ("auto": `resolve_attention`) inside the block, its own
    attention implementation back after it. The block must hold the backward too: activation checkpointing
    recomputes the layers' forward there, with the varlen kwargs and no mask, which only the varlen kernel
    reads as causal-per-document (eager and sdpa would read it as full attention over the pack).
    `sequence_parallel`: varlen_sdpa whatever the device (`resolve_attention`)."""
    kernel = resolve_attention("auto", device, sequence_parallel)
    previous = [model.config._attn_implementation for model in models]
    try:
        for model in models:
            model.set_attn_implementation(kernel)
        yield
    finally:
        for model, implementation in zip(models, previous):
            model.set_attn_implementation(implementation)
