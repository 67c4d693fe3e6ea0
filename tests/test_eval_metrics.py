"""The evaluate flow's metric assembly (training/evaluation/metrics.py) on rows written here, against
pass@k, gaps and deltas worked out by hand."""

from __future__ import annotations

import pytest

from passband.training.evaluation.evaluate import evaluation_of
from passband.training.evaluation.k_curve import KCurveConfig
from passband.training.evaluation.metrics import (baseline_metrics, evaluation_metrics, k_curve_comparison,
                                                  length_metrics)


def _rows(statuses: dict[str, list[str]], num_tokens: list[int], finish: list[str]) -> list[dict]:
    rows = [{"eval_set": "math", "id": problem_id, "problem_id": problem_id, "task": "math", "subdomain": "arith",
             "sample_index": index, "status": status, "score": float(status == "pass")}
            for problem_id, run in statuses.items() for index, status in enumerate(run)]
    return [{**row, "num_tokens": tokens, "finish_reason": reason} for row, tokens, reason in zip(rows, num_tokens, finish)]


# model: a passes 2 of 2, b 1 of 2 -> pass@1 = (1 + 0.5) / 2 = 0.75, pass@2 = (1 + 1) / 2 = 1
MODEL = evaluation_of(_rows({"a": ["pass", "pass"], "b": ["pass", "fail"]}, [4, 6, 8, 10],
                            ["stop", "stop", "stop", "length"]))
# baseline: a 1 of 2, b 0 of 2 -> pass@1 = (0.5 + 0) / 2 = 0.25, pass@2 = (1 + 0) / 2 = 0.5
BASELINE = evaluation_of(_rows({"a": ["pass", "fail"], "b": ["fail", "fail"]}, [2, 2, 2, 2],
                               ["length", "length", "stop", "stop"]))


def test_lengths_and_one_evaluation() -> None:
    assert length_metrics(MODEL.rows) == {"mean_length": 7.0, "truncation_rate": 0.25}
    metrics = evaluation_metrics(MODEL)
    assert (metrics["math/pass@1"], metrics["math/pass@2"], metrics["math/arith/pass@1"]) == (0.75, 1.0, 0.75)
    assert (metrics["mean_length"], metrics["truncation_rate"]) == (7.0, 0.25)


def test_against_the_baseline() -> None:
    metrics = baseline_metrics(MODEL, BASELINE, gap_k=2)
    assert metrics["math/sampling_efficiency_gap@2"] == pytest.approx(0.5 - 0.75)  # pass@2(base) - pass@1(model)
    assert metrics["baseline/math/pass@1"] == 0.25 and metrics["baseline/math/pass@2"] == 0.5
    assert (metrics["baseline/mean_length"], metrics["baseline/truncation_rate"]) == (2.0, 0.5)
    assert metrics["delta/math/pass@1"] == pytest.approx(0.75 - 0.25)
    assert metrics["delta/math/pass@2"] == pytest.approx(1.0 - 0.5)
    for k in (1, 2):
        name = f"delta/math/pass@{k}"
        assert metrics[f"{name}_ci_low"] <= metrics[name] <= metrics[f"{name}_ci_high"]
        assert 0.0 <= metrics[f"{name}_p_value"] <= 1.0
    assert "math/pass@1" not in metrics  # the model's own metrics are evaluation_metrics'


def test_k_curve_with_and_without_a_baseline() -> None:
    # n = 2 is below KCurveConfig's floor of 16; model_construct skips validation for rows this small
    config = KCurveConfig.model_construct(problems=2, n=2, sets=None, margin=0.15)
    alone = k_curve_comparison(MODEL, None, config)
    assert (alone["k_curve/math/pass@1"], alone["k_curve/math/pass@2"], alone["k_curve/math/n"]) == (0.75, 1.0, 2.0)
    assert not [name for name in alone if "delta" in name or "baseline" in name]
    paired = k_curve_comparison(MODEL, BASELINE, config)
    assert paired["k_curve/baseline/math/pass@2"] == 0.5
    assert paired["k_curve/delta/math/pass@2"] == pytest.approx(0.5)
    assert "k_curve/math/direction" in paired and paired["k_curve/margin"] == 0.15
