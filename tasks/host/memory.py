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
    """Peak RSS (GB) of named phases of this process. Phases may nest: a phase's peak is that of its
    own span, the phases inside it excluded (at every boundary the mark is credited to the innermost
    open phase and reset), so a benchmark can wrap its whole run as "other" and the steps inside it
    by name."""

    def __init__(self) -> None:
        self.peaks_gb: dict[str, float] = {}
        self._open: list[str] = []

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Record the peak RSS while the body runs as `name` (the larger, when it runs again)."""
        if not CLEAR_REFS.exists():
            yield
            return
        self._credit_innermost()
        self._open.append(name)
        try:
            yield
        finally:  # an enclosing phase resumes either way: its span must not absorb this one's peak
            self._credit_innermost()
            self._open.pop()

    def _credit_innermost(self) -> None:
        if self._open:
            name = self._open[-1]
            self.peaks_gb[name] = max(self.peaks_gb.get(name, 0.0), high_water_mark_gb())
        CLEAR_REFS.write_text(RESET_HIGH_WATER_MARK)
