"""Peak resident memory of this process per phase, from the kernel's high-water mark.

Linux keeps one RSS high-water mark per process (VmHWM in /proc/self/status); writing 5 to
/proc/self/clear_refs resets it to the current RSS. Reset when a phase starts, read when it ends:
the peak of that phase alone, including transient allocations no sampler would catch. The RL flow
logs them per iteration (`memory/<phase>_peak_gb`), so a run shows whether rollouts, training or
the weight sync set its peak. Without /proc (not Linux) phases record nothing.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

STATUS, CLEAR_REFS = Path("/proc/self/status"), Path("/proc/self/clear_refs")
RESET_HIGH_WATER_MARK = "5"  # proc(5), /proc/pid/clear_refs


def high_water_mark_gb() -> float:
    """This process's peak RSS (GB) since it started or since the last reset."""
    return _status_gb(STATUS.read_text(), "VmHWM")


def resident_gb() -> dict[str, float]:
    """This process's resident memory now (GB), by kind: `anon` (heap, tensors), `file` (mapped
    files: libraries, mmapped weights) and `shmem` (shared memory); they sum to its RSS. Empty
    without /proc."""
    if not STATUS.exists():
        return {}
    status = STATUS.read_text()
    return {kind: _status_gb(status, f"Rss{kind.capitalize()}") for kind in ("anon", "file", "shmem")}


def _status_gb(status: str, field: str) -> float:
    return int(re.search(rf"{field}:\s+(\d+) kB", status).group(1)) * 1024 / 1e9


class PhasePeaks:
    """Peak RSS (GB) of named, non-overlapping phases of this process."""

    def __init__(self) -> None:
        self.peaks_gb: dict[str, float] = {}

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Record the peak RSS while the body runs as `name` (the larger, when it runs again)."""
        if not CLEAR_REFS.exists():
            yield
            return
        CLEAR_REFS.write_text(RESET_HIGH_WATER_MARK)
        yield
        self.peaks_gb[name] = max(self.peaks_gb.get(name, 0.0), high_water_mark_gb())
