"""Drift alerts: a per-task rollout series rising over its first iterations (issue 53 item 2).

Under invalid_reward 'mask' nothing in the gradient pushes against unreadable outputs, so a rising
unparsable fraction, truncation creep or a growing length can go unseen in the reward curve. Each
series `{task}/{name}` of `rollout_metrics` named in DRIFT_SERIES is compared with its own baseline,
the mean of its first `baseline_iterations` values; it alerts once it is more than a margin above
it: fractions by an absolute margin, the mean length by a relative one (lengths differ a lot by task).
Pure Python over the history of per-iteration metrics; the flow keeps the history in its state.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

DRIFT_SERIES = ("unparsable_frac", "truncated_frac", "response_len_mean")
"""The rollout_metrics names watched per task; the first two by an absolute margin, the length by a relative one."""


class DriftAlert(NamedTuple):
    series: str
    """`{task}/{name}`, e.g. `math/unparsable_frac`."""
    baseline: float
    """Mean over the first baseline_iterations values."""
    latest: float
    threshold: float
    """The value above which it alerts: baseline + margin (fractions), baseline x (1 + margin) (length)."""


def drift_series(metrics: dict[str, float]) -> dict[str, float]:
    """The watched per-task series of one iteration's metrics (`{task}/{name}` for name in DRIFT_SERIES)."""
    return {key: value for key, value in metrics.items()
            if "/" in key and key.rsplit("/", 1)[1] in DRIFT_SERIES and key.count("/") == 1}


def drift_alerts(history: Sequence[dict[str, float]], baseline_iterations: int, frac_margin: float,
                 length_margin: float) -> list[DriftAlert]:
    """The series whose latest value is above its threshold, sorted by name; [] until the history holds more
    than `baseline_iterations` iterations. history: `drift_series` per iteration, oldest first."""
    if baseline_iterations < 1:
        raise ValueError(f"baseline_iterations={baseline_iterations}: the baseline needs at least one iteration")
    if len(history) <= baseline_iterations:
        return []
    alerts = []
    for series, latest in sorted(history[-1].items()):
        first = [values[series] for values in history[:baseline_iterations] if series in values]
        if not first:  # a task first seen after the baseline: nothing to compare with
            continue
        baseline = sum(first) / len(first)
        is_length = series.endswith("/response_len_mean")
        threshold = baseline * (1.0 + length_margin) if is_length else baseline + frac_margin
        if latest > threshold:
            alerts.append(DriftAlert(series, baseline, latest, threshold))
    return alerts
