"""How close a verifier's scores come to the labels, beside its pass@1 (issue 31 item 5).

A proof-grading sample passes when its score equals the label (the reward 1 - |s' - s| is 1), so
pass@1 is the verifier's score accuracy. This adds the size of its misses: per eval set of
proof-grading problems, the mean |s' - s| over the samples whose score could be read, with the
interval of training/evaluation/intervals.py over problems (each problem's mean error over its
read samples; a problem none of whose samples could be read has no error to count), and the
fraction of samples that could be read at all. Scores are read from the texts with the grading
parser and set against the references, so the metric does not depend on the verifier settings the
evaluation ran with (a defect check multiplies the reward, not the error).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import numpy as np

from passband.curation.grading.parse import parse_verdict
from passband.training.evaluation.intervals import mean_interval

GRADING_TASK = "proof_grading"


def score_error_metrics(rows: list[dict[str, Any]], sets: dict[str, list[dict[str, Any]]]) -> dict[str, float]:
    """`{set}/score_error` (mean |s' - s|) with `_ci_low`/`_ci_high`, and `{set}/parsed_rate`, for
    every eval set in `sets` whose problems are proof-grading ones; `rows` are an evaluation's
    per-sample rows (eval_set, problem_id, text)."""
    metrics: dict[str, float] = {}
    for name, problems in sets.items():
        labels = {problem["id"]: float(problem["reference"]["score"]) for problem in problems
                  if problem["task"] == GRADING_TASK}
        if not labels:
            continue
        errors: dict[str, list[float]] = defaultdict(list)
        samples = parsed = 0
        for row in rows:
            if row["eval_set"] != name or row["problem_id"] not in labels:
                continue
            samples += 1
            score = parse_verdict(row["text"]).score
            if score is not None:
                parsed += 1
                errors[row["problem_id"]].append(abs(float(score) - labels[row["problem_id"]]))
        metrics[f"{name}/parsed_rate"] = parsed / samples if samples else 0.0
        if errors:
            mean, low, high = mean_interval(np.array([sum(e) / len(e) for e in errors.values()]))
            metrics |= {f"{name}/score_error": float(mean), f"{name}/score_error_ci_low": float(low),
                        f"{name}/score_error_ci_high": float(high)}
    return metrics
