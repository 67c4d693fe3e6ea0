"""Confidence intervals for pass@k over problems (docs/recipe.md section 8; issue 17).

Samples are clustered within problems: the n samples of one problem share its pass rate, so
treating the P * n samples as independent would give intervals far too narrow. The unit of
independence is the problem. Each problem contributes one unbiased estimate x_i in [0, 1] of its
pass@k (1 - C(n-c, k) / C(n, k)); the reported pass@k is their mean, and its variance is
estimated by s^2 / P, s^2 the sample variance of the x_i. That one variance holds both sources
of noise, which problems were drawn and which samples each problem got, so the interval targets
the mean pass@k over the POPULATION of problems the eval set is drawn from, not the mean over the
P problems at hand (that narrower estimand would need only the within-problem binomial noise).

The interval is a Wilson score interval on P_eff = P * xbar (1 - xbar) / s^2 effective problems
(a design-effect Wilson interval), with Student's t_{P-1} for the normal quantile:
- inside (0, 1) it is the t interval xbar +- t s / sqrt(P), pulled slightly toward 1/2;
- when every x_i is 0 or 1 (pass@n, or n = 1) P_eff = P - 1 and it is the Wilson interval,
  which keeps width when all problems pass or all fail (all x_i = 1 gives [(P-1) / (P-1 + t^2),
  1], where the plain t interval collapses to the point [1, 1] and misses every population
  below 1). There it is conservative at small P (coverage 0.97-0.99 at P = 16).
Student's t rather than 1.96 because eval sets are small (P = 16: t = 2.13). A percentile
bootstrap over problems behaves like the plain normal interval at these sizes and collapses the
same way at the boundary. tests/test_eval_intervals.py measures the coverage on simulated evals.
Known limit: at intermediate k where nearly all sampled problems sit at pass@k = 1 while the
population mean is held below 1 by rare hard problems (P = 16, n = 16, pass rates ~ Beta(1, 1)
or Beta(2, 2), k = 8: coverage 0.86 and 0.78), a sample of 16 rarely shows those problems and
the interval covers less than 95%; at P = 200 the same cases cover 0.95.

The t quantile is computed here from the closed-form Student t distribution for integer degrees
of freedom (Abramowitz & Stegun 26.7.3-4) so that numpy is the only dependency.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from passband.training.evaluation.pass_at_k import per_problem_pass_at_k

CONFIDENCE = 0.95


def _central_probability(theta: float, df: int) -> float:
    """P(|T| <= t) for T ~ Student t with integer df, at theta = atan(t / sqrt(df)) (A&S 26.7.3-4)."""
    sin, cos = math.sin(theta), math.cos(theta)
    cos2 = cos * cos
    if df % 2 == 1:
        # (2/pi) * (theta + sin * (cos + 2/3 cos^3 + (2*4)/(3*5) cos^5 + ... up to cos^{df-2}))
        term, total = cos, 0.0
        for j in range(1, (df - 1) // 2 + 1):
            total += term
            term *= cos2 * (2 * j) / (2 * j + 1)
        return 2.0 / math.pi * (theta + sin * total)
    # sin * (1 + 1/2 cos^2 + (1*3)/(2*4) cos^4 + ... up to cos^{df-2})
    term, total = 1.0, 0.0
    for j in range(1, df // 2 + 1):
        total += term
        term *= cos2 * (2 * j - 1) / (2 * j)
    return sin * total


@lru_cache(maxsize=256)  # one report asks for the same few (confidence, df) many times
def student_t_quantile(confidence: float, df: int) -> float:
    """The t > 0 with P(|T| <= t) = confidence for T ~ Student t with df degrees of freedom
    (t_{df, (1+confidence)/2}); bisection on theta in (0, pi/2), where the probability is monotone."""
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"student_t_quantile needs 0 < confidence < 1; got {confidence}")
    if df < 1:
        raise ValueError(f"student_t_quantile needs df >= 1; got df={df}")
    low, high = 0.0, math.pi / 2
    for _ in range(100):  # halves the bracket to below float resolution
        middle = 0.5 * (low + high)
        if _central_probability(middle, df) < confidence:
            low = middle
        else:
            high = middle
    return math.sqrt(df) * math.tan(0.5 * (low + high))


def mean_interval(values: np.ndarray, confidence: float = CONFIDENCE) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(mean, ci_low, ci_high) over axis 0 of values (P, ...) in [0, 1], one independent problem
    per row: the design-effect Wilson interval of the module docstring, for every trailing index.

    The interval always contains the mean. With one row there is no spread to see: the point.
    """
    values = np.asarray(values, dtype=np.float64)
    num_problems = values.shape[0]
    if num_problems < 1:
        raise ValueError("mean_interval needs at least one row")
    mean = values.mean(axis=0)
    if num_problems == 1:
        return mean, mean.copy(), mean.copy()
    t = student_t_quantile(confidence, num_problems - 1)
    bernoulli_variance = mean * (1.0 - mean)
    # variance ratio s^2 / (xbar (1 - xbar)) = P / P_eff. When the mean sits at 0 or 1 every value
    # does too (values in [0, 1]): Bernoulli outcomes, whose unbiased s^2 is P / (P - 1) xbar (1 - xbar).
    at_boundary = bernoulli_variance <= 0.0
    variance_ratio = np.where(
        at_boundary, num_problems / (num_problems - 1),
        values.var(axis=0, ddof=1) / np.where(at_boundary, 1.0, bernoulli_variance))
    # Wilson with z^2 / P_eff written as `shrink` so P_eff = infinity (s = 0 inside (0, 1)) stays finite.
    shrink = t * t * variance_ratio / num_problems
    center = (mean + shrink / 2.0) / (1.0 + shrink)
    half_width = np.sqrt(shrink * bernoulli_variance + shrink * shrink / 4.0) / (1.0 + shrink)
    # Wilson always holds the mean; min/max only undo rounding (all x_i = 1 gave 0.9999999999999999).
    low, high = np.minimum(center - half_width, mean), np.maximum(center + half_width, mean)
    return mean, np.clip(low, 0.0, 1.0), np.clip(high, 0.0, 1.0)


def difference_interval(differences: np.ndarray, confidence: float = CONFIDENCE) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(mean, ci_low, ci_high) over axis 0 of paired differences (P, ...) in [-1, 1]: the paired t
    interval mean +- t_{P-1} s / sqrt(P). Differences have no boundary at which they all pile up
    except 0 for identical inputs, where the point [0, 0] is the right answer."""
    differences = np.asarray(differences, dtype=np.float64)
    num_problems = differences.shape[0]
    if num_problems < 1:
        raise ValueError("difference_interval needs at least one row")
    mean = differences.mean(axis=0)
    if num_problems == 1:
        return mean, mean.copy(), mean.copy()
    half_width = (student_t_quantile(confidence, num_problems - 1)
                  * differences.std(axis=0, ddof=1) / math.sqrt(num_problems))
    return mean, np.clip(mean - half_width, -1.0, 1.0), np.clip(mean + half_width, -1.0, 1.0)


@dataclass(frozen=True)
class PassAtKIntervals:
    """pass@k for k = 1..n with its confidence interval per k; entry k - 1 of each list is pass@k."""

    pass_at_k: list[float]
    ci_low: list[float]
    ci_high: list[float]
    num_problems: int
    n: int
    confidence: float


def pass_at_k_intervals(n: int, num_correct: np.ndarray, confidence: float = CONFIDENCE) -> PassAtKIntervals:
    """The whole pass@k curve of P problems, num_correct[i] of n samples correct on problem i,
    with a confidence interval over problems at every k."""
    mean, low, high = mean_interval(per_problem_pass_at_k(n, num_correct), confidence)
    return PassAtKIntervals(
        pass_at_k=mean.tolist(), ci_low=low.tolist(), ci_high=high.tolist(),
        num_problems=len(num_correct), n=n, confidence=confidence,
    )
