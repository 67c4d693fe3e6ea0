"""The entropy ceiling: fit R = -a exp(H) + b and stop when the reward is near its ceiling (docs/recipe.md section 7).

Across training, validation score R and policy entropy H (nats per token) follow
R = -a * exp(H) + b: reward is bought with entropy, and when the entropy is spent (H -> 0,
exp(H) -> 1) the reward can reach at most the ceiling b - a. Fitting early checkpoints predicts
where the run will saturate; once the reward sits within a margin of it while entropy keeps
falling, further steps only collapse the entropy.

The model is linear in x = exp(H): R = b - a x, so least squares has a closed form (the
simple-regression slope and intercept); no iterative fit. Pure Python on float sequences: the
history is tens of points from the metric log.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple


class EntropyCeilingFit(NamedTuple):
    a: float
    """Reward lost per unit of exp(H); > 0 when reward rises as entropy falls."""
    b: float
    ceiling: float
    """b - a: the predicted reward at zero entropy."""
    r2: float
    """Coefficient of determination of the fit (1 - SS_res / SS_tot); 1.0 when R is constant and fit exactly."""


def fit_entropy_ceiling(entropies: Sequence[float], rewards: Sequence[float]) -> EntropyCeilingFit:
    """Least-squares fit of R = -a exp(H) + b over paired points (H_k, R_k), k = 1..n.

    With x = exp(H): slope s = sum (x - mean x)(R - mean R) / sum (x - mean x)^2, a = -s,
    b = mean R - s mean x. Raises ValueError for fewer than 2 points, unequal lengths, or
    entropies that are all equal (no slope to fit).
    """
    if len(entropies) != len(rewards):
        raise ValueError(f"entropies and rewards must pair up, got {len(entropies)} and {len(rewards)}")
    if len(entropies) < 2:
        raise ValueError(f"the entropy-ceiling fit needs at least 2 points, got {len(entropies)}")
    xs = [math.exp(h) for h in entropies]
    mean_x = sum(xs) / len(xs)
    mean_r = sum(rewards) / len(rewards)
    sxx = sum((x - mean_x) ** 2 for x in xs)
    if sxx == 0.0:
        raise ValueError("the entropy-ceiling fit needs at least two different entropies")
    slope = sum((x - mean_x) * (r - mean_r) for x, r in zip(xs, rewards)) / sxx
    a, b = -slope, mean_r - slope * mean_x
    ss_res = sum((r - (b - a * x)) ** 2 for x, r in zip(xs, rewards))
    ss_tot = sum((r - mean_r) ** 2 for r in rewards)
    r2 = 1.0 - ss_res / ss_tot if ss_tot > 0 else 1.0
    return EntropyCeilingFit(a=a, b=b, ceiling=b - a, r2=r2)


def should_stop_early(history: Sequence[tuple[float, float]], margin: float, patience: int) -> bool:
    """Whether to stop: the latest reward is within `margin` of the fitted ceiling and entropy fell.

    history: (entropy, reward) per evaluation, oldest first; the fit uses all of it.
    True iff there are at least max(3, patience + 1) points, the fit has a > 0 (reward rises as
    entropy falls; otherwise there is no ceiling to approach), reward_latest >= ceiling - margin,
    and the entropy strictly decreased at each of the last `patience` steps.
    """
    if patience < 1:
        raise ValueError(f"patience must be >= 1, got {patience}")
    if len(history) < max(3, patience + 1):
        return False
    entropies = [h for h, _ in history]
    fit = fit_entropy_ceiling(entropies, [r for _, r in history])
    recent = entropies[-(patience + 1):]
    entropy_falling = all(later < earlier for earlier, later in zip(recent, recent[1:]))
    return fit.a > 0 and history[-1][1] >= fit.ceiling - margin and entropy_falling


def observe_entropy_reward(history: list[tuple[float, float]], entropy: float, reward: float, margin: float,
                           patience: int) -> tuple[bool, dict[str, float]]:
    """Append this iteration's (entropy, reward) to `history` (in place: it is the run's state) and
    return (the stop signal, the fit's metrics); both empty/False until 3 points with 2 distinct
    entropies exist."""
    history.append((entropy, reward))
    entropies = [h for h, _ in history]
    if len(history) < 3 or len(set(entropies)) < 2:
        return False, {}
    fit = fit_entropy_ceiling(entropies, [r for _, r in history])
    stop = should_stop_early(history, margin, patience)
    return stop, {"entropy_ceiling/a": fit.a, "entropy_ceiling/b": fit.b, "entropy_ceiling/ceiling": fit.ceiling,
                  "entropy_ceiling/r2": fit.r2, "entropy_ceiling/stop_signal": float(stop)}
