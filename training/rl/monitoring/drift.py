"""Drift alerts: a per-task rollout series rising over its first iterations (issue 53 item 2).

Under invalid_reward 'mask' nothing in the gradient pushes against unreadable outputs, so a rising
unparsable fraction, truncation creep or a growing length can go unseen in the reward curve. Each
series `{task}/{name}` of `rollout_metrics` named in DRIFT_SERIES is compared with its own baseline,
the mean of its first `baseline_iterations` values; it alerts once the mean of its latest `window`
values is more than a margin above it: fractions by an absolute margin, the mean length by a relative
one (lengths differ a lot by task). The window is what tells a rise from a spike: one iteration holds
a few rollouts per task (the demo's RL: 8 of code, 16 of math, 24 of ifeval), and there one
iteration's code length reached 1.58x its baseline (84.2 tokens against 53.5) while no three in a row
averaged above 1.42x.
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
    """Mean over the latest `window` values."""
    threshold: float
    """The value above which it alerts: baseline + margin (fractions), baseline x (1 + margin) (length)."""


def drift_series(metrics: dict[str, float]) -> dict[str, float]:
    """The watched per-task series of one iteration's metrics (`{task}/{name}` for name in DRIFT_SERIES)."""
    return {key: value for key, value in metrics.items()
            if "/" in key and key.rsplit("/", 1)[1] in DRIFT_SERIES and key.count("/") == 1}


def drift_alerts(history: Sequence[dict[str, float]], baseline_iterations: int, frac_margin: float,
                 length_margin: float, window: int = 1) -> list[DriftAlert]:
    """The series whose mean over the latest `window` iterations is above its threshold, sorted by name;
    [] until `window` iterations followed the first `baseline_iterations`. history: `drift_series` per
    iteration, oldest first."""
    if baseline_iterations < 1 or window < 1:
        raise ValueError(f"baseline_iterations={baseline_iterations}, window={window}: the baseline and the "
                         "window need at least one iteration each")
    if len(history) < baseline_iterations + window:
        return []
    alerts = []
    for series in sorted(history[-1]):
        first = [values[series] for values in history[:baseline_iterations] if series in values]
        recent = [values[series] for values in history[-window:] if series in values]
        if not first:  # a task first seen after the baseline: nothing to compare with
            continue
        baseline, latest = sum(first) / len(first), sum(recent) / len(recent)
        is_length = series.endswith("/response_len_mean")
        threshold = baseline * (1.0 + length_margin) if is_length else baseline + frac_margin
        if latest > threshold:
            alerts.append(DriftAlert(series, baseline, latest, threshold))
    return alerts
