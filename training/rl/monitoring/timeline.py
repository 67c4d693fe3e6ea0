"""A run's timeline: what each role of the RL loop did when (issue 29 item 6's figure).

Roles are the loop's parts, which run concurrently once rollouts go ahead of the trainer
(`rollout.max_off_policy_steps` >= 1): `rollouts` (sampling, scoring, loading a weights version),
`trainer` (the update, publishing or pushing its weights) and `evaluator` (held-out scoring).
Times are wall-clock seconds (`time.time()`), so a resumed run's spans continue its first process's.
The figure is tasks/reporting/plots.py's `timeline_figure`; these are the sums it is read with.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class Span:
    role: str
    """Which part of the loop: rollouts, trainer or evaluator."""
    phase: str
    """What it did: rollout, scoring, weight_load, training, weight_sync, weight_publish, eval."""
    start: float
    """Wall-clock seconds (time.time())."""
    end: float

    @property
    def seconds(self) -> float:
        return self.end - self.start


def phase_seconds(spans: Iterable[Span]) -> dict[tuple[str, str], float]:
    """Total seconds per (role, phase), in order of first appearance."""
    totals: dict[tuple[str, str], float] = {}
    for span in spans:
        totals[span.role, span.phase] = totals.get((span.role, span.phase), 0.0) + span.seconds
    return totals


def _merged(intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """The union of `intervals` as disjoint sorted intervals."""
    merged: list[tuple[float, float]] = []
    for start, end in sorted(intervals):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def busy_seconds(spans: Iterable[Span], role: str) -> float:
    """Seconds in which `role` was doing anything (its spans' union)."""
    return sum(end - start for start, end in _merged([(s.start, s.end) for s in spans if s.role == role]))


def overlap_seconds(spans: Iterable[Span], role_a: str, role_b: str) -> float:
    """Seconds in which `role_a` and `role_b` were both busy: the intersection of their unions."""
    spans = list(spans)
    a = _merged([(s.start, s.end) for s in spans if s.role == role_a])
    b = _merged([(s.start, s.end) for s in spans if s.role == role_b])
    total, i, j = 0.0, 0, 0
    while i < len(a) and j < len(b):  # two sorted disjoint lists: walk both
        total += max(0.0, min(a[i][1], b[j][1]) - max(a[i][0], b[j][0]))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return total


def timeline_markdown(spans: list[Span]) -> str:
    """The run's seconds per role and phase, and how long rollouts and training overlapped, as the
    Prefect artifact beside the figure."""
    lines = ["| role | phase | seconds |", "|---|---|---|"]
    lines += [f"| {role} | {phase} | {seconds:.1f} |" for (role, phase), seconds in phase_seconds(spans).items()]
    wall = max(s.end for s in spans) - min(s.start for s in spans) if spans else 0.0
    both = overlap_seconds(spans, "rollouts", "trainer")
    lines += ["", f"Wall {wall:.1f} s; rollouts and training overlapped for {both:.1f} s "
                  f"({both / wall if wall else 0.0:.0%} of it). The figure is the run's plots/timeline.png."]
    return "\n".join(lines)
