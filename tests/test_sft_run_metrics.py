"""The SFT flow's run metrics (training/sft/run_metrics.py) against values worked out by hand."""

from __future__ import annotations

import math

from passband.training.sft.run_metrics import stage_metrics, throughput_metrics


def test_a_stage_that_ran_reports_its_throughput_and_a_skipped_one_does_not() -> None:
    assert stage_metrics("format", 12, 4, 0.5, 900.0) == {
        "format/final_loss": 0.5, "format/num_steps": 12.0, "format/tokens_per_s": 900.0}
    assert stage_metrics("reason", 8, 0, 0.25, math.nan) == {"reason/final_loss": 0.25, "reason/num_steps": 8.0}


def test_throughput_is_the_mean_and_memory_the_peak_over_stages_that_trained() -> None:
    # (1000 + 500) / 2 = 750 tokens/s; max(300, 700) = 700 MB
    assert throughput_metrics([(1000.0, 300.0), (500.0, 700.0)]) == {
        "train/tokens_per_s": 750.0, "train/peak_memory_mb": 700.0}
    # memory not measured (NaN) leaves the peak at the largest measured value, 0 when none was
    assert throughput_metrics([(100.0, math.nan), (300.0, 250.0)])["train/peak_memory_mb"] == 250.0
    assert throughput_metrics([(100.0, math.nan)])["train/peak_memory_mb"] == 0.0
    assert throughput_metrics([]) == {}
