"""Per-phase peak RSS: a phase that briefly holds 400 MB reports it; the next phase, after the
memory is freed, reports the lower level again (the kernel's mark was reset between them)."""

import resource

import numpy as np

from passband.tasks.host.memory import PhasePeaks, high_water_mark_gb, resident_gb

BLOCK_GB = 0.4


def _rss_gb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() / 1e9


def test_each_phase_reports_its_own_peak():
    peaks = PhasePeaks()
    with peaks.phase("quiet"):
        before = _rss_gb()
    with peaks.phase("spike"):
        block = np.ones(int(BLOCK_GB * 1e9 / 8))  # touched: every page resident
        del block  # freed before the phase ends: only the high-water mark saw it
    with peaks.phase("after"):
        after = _rss_gb()
    assert peaks.peaks_gb["spike"] >= before + 0.95 * BLOCK_GB
    assert peaks.peaks_gb["quiet"] < before + 0.05 and peaks.peaks_gb["after"] < after + 0.05
    assert peaks.peaks_gb["after"] < peaks.peaks_gb["spike"] - 0.9 * BLOCK_GB
    assert high_water_mark_gb() < peaks.peaks_gb["spike"]  # the mark was reset after the spike


def test_a_repeated_phase_keeps_its_largest_peak():
    peaks = PhasePeaks()
    with peaks.phase("step"):
        block = np.ones(int(BLOCK_GB * 1e9 / 8))
        del block
    first = peaks.peaks_gb["step"]
    with peaks.phase("step"):
        pass
    assert peaks.peaks_gb["step"] == first


def test_resident_memory_by_kind_sums_to_rss_and_sees_the_heap():
    before = resident_gb()
    block = np.ones(int(BLOCK_GB * 1e9 / 8))
    during = resident_gb()
    assert during["anon"] - before["anon"] >= 0.95 * BLOCK_GB
    assert abs(sum(during.values()) - _rss_gb()) < 0.01
    del block


def test_a_nested_phase_keeps_its_peak_out_of_the_enclosing_one():
    peaks = PhasePeaks()
    with peaks.phase("other"):
        level = _rss_gb()
        with peaks.phase("spike"):
            block = np.ones(int(BLOCK_GB * 1e9 / 8))
            del block
        after_spike = _rss_gb()
    assert peaks.peaks_gb["spike"] >= level + 0.95 * BLOCK_GB
    # The enclosing phase saw its own span before and after the spike, not the spike.
    assert peaks.peaks_gb["other"] < max(level, after_spike) + 0.05
    assert peaks.peaks_gb["other"] < peaks.peaks_gb["spike"] - 0.9 * BLOCK_GB


class FakeDeviceMarks:
    """Stands in for torch.cuda's peak counters (no GPU here): `peak` is what the next read returns."""

    def __init__(self) -> None:
        self.peak, self.resets = 0.0, 0

    def read(self) -> dict[str, float]:
        return {"cuda_allocated": self.peak, "cuda_reserved": 2 * self.peak}

    def reset(self) -> None:
        self.peak, self.resets = 0.0, self.resets + 1


def test_device_peaks_are_credited_per_phase_and_reset_at_each_boundary():
    """The GPU's marks follow the RSS bookkeeping: each phase gets the peak seen in its own span,
    reset at every boundary, nested phases excluded, and come out as memory/<phase>_cuda_*_peak_gb."""
    device = FakeDeviceMarks()
    peaks = PhasePeaks(device)
    with peaks.phase("rollout"):
        device.peak = 3.0
    with peaks.phase("training"):
        device.peak = 7.0
        with peaks.phase("weight_sync"):
            device.peak = 1.0
    with peaks.phase("rollout"):
        device.peak = 2.0  # lower than the first rollout's: the larger is kept
    assert peaks.device_peaks_gb == {"rollout": {"cuda_allocated": 3.0, "cuda_reserved": 6.0},
                                     "training": {"cuda_allocated": 7.0, "cuda_reserved": 14.0},
                                     "weight_sync": {"cuda_allocated": 1.0, "cuda_reserved": 2.0}}
    assert device.resets == 8  # entering and leaving each of the four phases
    metrics = peaks.metrics()
    assert metrics["memory/training_cuda_allocated_peak_gb"] == 7.0
    assert metrics["memory/weight_sync_cuda_reserved_peak_gb"] == 2.0
    assert set(peaks.peaks_gb) == {"rollout", "training", "weight_sync"}  # RSS beside them, as before


def test_no_gpu_no_device_marks():
    from passband.tasks.host.memory import cuda_peaks

    assert cuda_peaks() is None  # CI has no GPU; the RL loop then logs RSS alone
