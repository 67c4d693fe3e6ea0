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


class CudaPeaks:
    """torch.cuda's peak allocated and reserved memory of this process since the last reset (GB):
    the device-side marks PhasePeaks credits beside RSS where a GPU is present."""

    def read(self) -> dict[str, float]:
        import torch

        return {"cuda_allocated": torch.cuda.max_memory_allocated() / 1e9,
                "cuda_reserved": torch.cuda.max_memory_reserved() / 1e9}

    def reset(self) -> None:
        import torch

        torch.cuda.reset_peak_memory_stats()


def cuda_peaks() -> CudaPeaks | None:
    """A CudaPeaks where torch sees a GPU (and is already imported: no process loads torch to ask)."""
    import sys

    torch = sys.modules.get("torch")
    return CudaPeaks() if torch is not None and torch.cuda.is_available() else None


class PhasePeaks:
    """Peak RSS (GB) of named phases of this process, and with `device` (CudaPeaks) the device's
    peaks beside it. Phases may nest: a phase's peak is that of its own span, the phases inside it
    excluded (at every boundary the mark is credited to the innermost open phase and reset), so a
    benchmark can wrap its whole run as "other" and the steps inside it by name."""

    def __init__(self, device: CudaPeaks | None = None) -> None:
        self.peaks_gb: dict[str, float] = {}
        """phase -> peak RSS."""
        self.device_peaks_gb: dict[str, dict[str, float]] = {}
        """phase -> {"cuda_allocated": GB, "cuda_reserved": GB}."""
        self.device = device
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
            if self.device is not None:
                kept = self.device_peaks_gb.setdefault(name, {})
                for kind, gb in self.device.read().items():
                    kept[kind] = max(kept.get(kind, 0.0), gb)
        CLEAR_REFS.write_text(RESET_HIGH_WATER_MARK)
        if self.device is not None:
            self.device.reset()

    def metrics(self) -> dict[str, float]:
        """`memory/<phase>_peak_gb` per phase, and `memory/<phase>_<cuda_allocated|cuda_reserved>_peak_gb`."""
        out = {f"memory/{phase}_peak_gb": gb for phase, gb in self.peaks_gb.items()}
        for phase, kinds in self.device_peaks_gb.items():
            out |= {f"memory/{phase}_{kind}_peak_gb": gb for kind, gb in kinds.items()}
        return out
