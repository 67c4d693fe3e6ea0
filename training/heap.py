"""Give freed heap memory back to the OS (glibc), so a process's RSS follows what it still holds.

glibc's malloc serves an allocation below its mmap threshold from a heap (an arena; up to 8 per
core, one per thread that allocates) and keeps the chunk when it is freed, for reuse. The threshold
starts at 128 KiB and rises to the size of the largest mmapped chunk freed so far (up to 32 MiB),
so after the first large free, tensors of a few MiB (the trainer's per-layer activations, the
engine's step buffers) come from heaps and stay resident after they are freed: RSS then holds the
high-water mark of past phases, and a process that idles while its neighbour peaks (the engine
while the trainer trains, in the RL flow) adds its stale heap to the machine's peak.
`malloc_trim(0)` returns every whole free page of every arena (glibc >= 2.8 also inside the heaps,
with madvise).

A trim between phases cannot help inside one: a backward frees the forward's activations in another order than
it made them and allocates gradients between them, so the heap fragments while the step runs and its peak RSS
holds pages no tensor uses, more the longer the micro-batch (issue 69 first read it as an N-squared term in the
memory model). The trainers' `heap` setting (`use_heap`): "return" fixes the threshold at 1 MiB, so every block of
that size and more is mmapped and its free unmaps it, and the RSS follows the live tensors; "keep" is glibc's
default; "auto" returns for micro-batches of `LONG_MICRO_BATCH_TOKENS` tokens a rank and more. Measured
(docs/benchmarks.md, "Long sequences: one SFT step's peak by activation checkpointing"), one SFT step of the
shipped model with every-layer checkpointing, peak RSS less RSS before loading, keep -> return: 2K 2.95 -> 2.71
GiB, 4K 4.34 -> 2.70, 8K 6.15 -> 2.70. The price is a page fault for every page of every new block: steady-state
2K steps ran 20-45% slower with "return", which is why short micro-batches keep.

The GPU's counterpart, `release_device_memory`: torch's CUDA allocator keeps freed blocks reserved
the way malloc keeps freed chunks, and an engine beside the trainer needs them back.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import os
import platform
from typing import Literal

HeapSetting = Literal["auto", "keep", "return"]
"""What a trainer's freed tensors do on the CPU (glibc): stay in the heap for reuse, or go back to the system."""
M_MMAP_THRESHOLD, M_TRIM_THRESHOLD = -3, -1  # mallopt's parameter numbers (glibc's malloc.h)
RETURN_MMAP_THRESHOLD = 1 << 20  # "return": blocks of 1 MiB and more mmapped; smaller ones stay in the heap
# "keep" after "return": where glibc's dynamic thresholds settle once a training step has freed its first large
# blocks (DEFAULT_MMAP_THRESHOLD_MAX on 64-bit, and twice that for the trim threshold)
KEEP_MMAP_THRESHOLD = 32 << 20
LONG_MICRO_BATCH_TOKENS = 4096  # "auto" returns from here: at 4K a step's heap kept 1.6 GiB of fragments
_returning = False  # whether this process's threshold is fixed at RETURN_MMAP_THRESHOLD (mallopt cannot be read)


def trim_heap() -> bool:
    """malloc_trim(0) on this process: True if memory was returned; False also where libc is not glibc."""
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    trim = getattr(libc, "malloc_trim", None)  # glibc only (musl has none)
    return bool(trim is not None and trim(0))


def heap_returns(setting: HeapSetting, tokens_per_rank: int) -> bool:
    """Whether a trainer whose micro-batches hold up to `tokens_per_rank` tokens on each rank returns its freed
    blocks ("auto": from LONG_MICRO_BATCH_TOKENS, where the fragments outweigh the page faults)."""
    return setting == "return" or (setting == "auto" and tokens_per_rank >= LONG_MICRO_BATCH_TOKENS)


def use_heap(setting: HeapSetting, tokens_per_rank: int) -> bool:
    """Set this process's glibc thresholds for `heap_returns(setting, tokens_per_rank)` (the module docstring's
    why), at a trainer's start or a stage's; returns whether freed blocks are now returned. Nothing is changed
    off glibc (musl, macOS), or where `MALLOC_MMAP_THRESHOLD_` is in the environment (glibc read the user's own
    value at start), or when the process already has what is asked: "keep" in a process that never returned
    leaves glibc's dynamic default as it was."""
    global _returning
    returns = heap_returns(setting, tokens_per_rank)
    if platform.libc_ver()[0] != "glibc" or "MALLOC_MMAP_THRESHOLD_" in os.environ or returns == _returning:
        return _returning
    libc = ctypes.CDLL(None)
    if returns:
        libc.mallopt(M_MMAP_THRESHOLD, RETURN_MMAP_THRESHOLD)
    else:
        libc.mallopt(M_MMAP_THRESHOLD, KEEP_MMAP_THRESHOLD)
        libc.mallopt(M_TRIM_THRESHOLD, 2 * KEEP_MMAP_THRESHOLD)
    _returning = returns
    return returns


def release_device_memory() -> None:
    """This process's freed GPU memory back to the driver, at every hand-over from a trainer to an engine
    and when a trainer closes (issue 67 item 1).

    torch keeps freed CUDA blocks reserved for its next allocations, and a vLLM engine starting in
    another process measures the device's free memory and refuses below total x memory_fraction
    (vllm/v1/worker/utils.py request_memory); one waking from sleep mode allocates from the driver too.
    `gc.collect()` first frees what only reference cycles kept (an autograd graph held by a frame or a
    loss in a cycle), then `empty_cache` returns every unused block. What is still referenced (a live
    model, AdamW's moments) stays: the caller drops those first. A no-op where CUDA never started."""
    import torch

    gc.collect()
    torch.cuda.empty_cache()
