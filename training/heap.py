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
holds pages no tensor uses, more the longer the sequence (issue 69 first read it as an N-squared term in the
memory model). `return_freed_host_memory` fixes the threshold at 1 MiB in a trainer's process: every block of
that size and more is mmapped and its free unmaps it, so the RSS follows the live tensors. Measured
(docs/benchmarks.md, "Long sequences: one SFT step's peak by activation checkpointing"): one SFT step of 4K
tokens with every-layer checkpointing peaked at 3.91 GiB of RSS with glibc's default, 2.24 GiB with it.

The GPU's counterpart, `release_device_memory`: torch's CUDA allocator keeps freed blocks reserved
the way malloc keeps freed chunks, and an engine beside the trainer needs them back.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import os
import platform

M_MMAP_THRESHOLD = -3  # mallopt's parameter number for the mmap threshold (glibc's malloc.h)
TRAINER_MMAP_THRESHOLD = 1 << 20  # blocks of 1 MiB and more are mmapped; smaller ones stay in the heap, reused cheaply


def trim_heap() -> bool:
    """malloc_trim(0) on this process: True if memory was returned; False also where libc is not glibc."""
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    trim = getattr(libc, "malloc_trim", None)  # glibc only (musl has none)
    return bool(trim is not None and trim(0))


def return_freed_host_memory() -> bool:
    """Fix glibc's mmap threshold at `TRAINER_MMAP_THRESHOLD` for this process (the module docstring's why), at a
    trainer's start; True when set. False, and nothing changed, off glibc (musl, macOS) or where
    `MALLOC_MMAP_THRESHOLD_` is in the environment: glibc read the user's own value at start."""
    if platform.libc_ver()[0] != "glibc" or "MALLOC_MMAP_THRESHOLD_" in os.environ:
        return False
    return ctypes.CDLL(None).mallopt(M_MMAP_THRESHOLD, TRAINER_MMAP_THRESHOLD) == 1


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
