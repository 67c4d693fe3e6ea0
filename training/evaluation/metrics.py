"""The evaluate flow's metrics, assembled from its evaluations (docs/recipe.md section 8).

One evaluation gives its report's metrics (`{set}/pass@k` ...), its length statistics and, on
proof-grading sets, the verifier's score error (training/evaluation/grading.py); with a
baseline, the sampling-efficiency gap, the baseline's own metrics under `baseline/`, and the paired
deltas (`delta/{set}/pass@k` with a 95% interval and a p-value); with a k-curve, the curve and its
paired change per k (training/evaluation/k_curve.py). Perplexities are measured by the flow (a
model forward) and merged in there.
"""

from __future__ import annotations

from passband.training.evaluation.evaluate import Evaluation, episode_means
from passband.training.evaluation.grading import score_error_metrics
from passband.training.evaluation.k_curve import KCurveConfig, curve_ks, k_curve_metrics
from passband.training.evaluation.report import compare_rows, sampling_efficiency_gap

BASELINE_PREFIX = "baseline"
"""Prefix of the baseline's own metrics (`baseline/math/pass@1`), beside the model's unprefixed ones."""


def by_eval_set(rows: list[dict]) -> list[dict]:
    """Rows whose `task` is their eval set: reports and comparisons group by eval set."""
    return [{**row, "task": row["eval_set"]} for row in rows]


def length_metrics(rows: list[dict]) -> dict[str, float]:
    """Mean response length (tokens) and the fraction of samples cut at max_tokens."""
    return {
        "mean_length": sum(row["num_tokens"] for row in rows) / len(rows),
        "truncation_rate": sum(row["finish_reason"] == "length" for row in rows) / len(rows),
    }


def evaluation_metrics(evaluation: Evaluation, sets: dict[str, list[dict]] | None = None) -> dict[str, float]:
    """One evaluation's report metrics and length statistics, mean turns and tool calls of the sets
    evaluated as episodes, and with the eval `sets` it scored (their references), a verifier's score
    error on proof-grading sets (training/evaluation/grading.py)."""
    return {**evaluation.report.metrics(), **length_metrics(evaluation.rows), **episode_means(evaluation.rows),
            **(score_error_metrics(evaluation.rows, sets) if sets else {})}


def baseline_metrics(model: Evaluation, baseline: Evaluation, gap_k: int,
                     sets: dict[str, list[dict]] | None = None) -> dict[str, float]:
    """`{set}/sampling_efficiency_gap@{gap_k}`, the baseline's metrics under `baseline/` (see
    `evaluation_metrics` for `sets`), and the paired `delta/{set}/pass@k` (model - baseline over the
    same problems) with `_ci_low`, `_ci_high` and `_p_value`."""
    metrics = {f"{name}/sampling_efficiency_gap@{gap_k}": gap
               for name, gap in sampling_efficiency_gap(baseline.report, model.report, gap_k).items()}
    metrics |= {f"{BASELINE_PREFIX}/{name}": value for name, value in evaluation_metrics(baseline, sets).items()}
    for row in compare_rows(by_eval_set(baseline.rows), by_eval_set(model.rows)):
        name = f"delta/{row['task']}/pass@{row['k']}"
        metrics |= {name: row["delta"], f"{name}_ci_low": row["ci_low"], f"{name}_ci_high": row["ci_high"],
                    f"{name}_p_value": row["p_value"]}
    return metrics


def k_curve_comparison(model: Evaluation, baseline: Evaluation | None, config: KCurveConfig) -> dict[str, float]:
    """pass@k up to k = n on the k-curve subset, and the paired change against the baseline per k
    (none without a baseline): narrowing, sharpening or expanding."""
    deltas = compare_rows(by_eval_set(baseline.rows), by_eval_set(model.rows)) if baseline else []
    return k_curve_metrics(model.report, baseline.report if baseline else None, deltas, curve_ks(config.n),
                           config.margin)
