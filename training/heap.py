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
"""

from __future__ import annotations

import ctypes
import ctypes.util


def trim_heap() -> bool:
    """malloc_trim(0) on this process: True if memory was returned; False also where libc is not glibc."""
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    trim = getattr(libc, "malloc_trim", None)  # glibc only (musl has none)
    return bool(trim is not None and trim(0))
