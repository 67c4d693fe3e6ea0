"""Paired comparison of two checkpoints evaluated on the same problems (issue 17).

Per problem i the difference d_i = pass@k_b(i) - pass@k_a(i) of the unbiased per-problem
estimates; delta = mean(d) is pass@k(b) - pass@k(a). Pairing removes the problem-difficulty
spread that dominates each checkpoint's own interval, so a paired delta is far tighter than two
overlapping intervals suggest.

- Interval: the paired t interval over problems (intervals.difference_interval).
- p-value: a two-sided sign-flip permutation test of H0 "the labels a and b are exchangeable
  within each problem" (then each d_i is symmetric about 0). The statistic is |mean(d)|; all
  2^P sign patterns are enumerated when 2^P <= num_permutations (an exact p-value), otherwise
  num_permutations random patterns from `seed` are drawn and p = (1 + #{|T*| >= |T|}) / (1 +
  num_permutations), which counts the observed pattern and so is never 0. The same patterns serve
  every k. The p-value and the interval come from different procedures and can disagree right at
  the 5% boundary; `excludes_zero` reads the interval.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from passband.training.evaluation.intervals import CONFIDENCE, difference_interval
from passband.training.evaluation.pass_at_k import per_problem_pass_at_k

NUM_PERMUTATIONS = 10_000
PERMUTATION_CHUNK = 2048
"""Sign patterns per matrix product: bounds memory at PERMUTATION_CHUNK x P floats."""
TIE_TOLERANCE = 1e-12
"""|T*| >= |T| - TIE_TOLERANCE: sums of the same numbers in another order differ by rounding."""


@dataclass(frozen=True)
class PairedDelta:
    """pass@k of b minus pass@k of a on the same problems, with interval and p-value."""

    k: int
    pass_at_k_a: float
    pass_at_k_b: float
    delta: float
    """pass_at_k_b - pass_at_k_a."""
    ci_low: float
    ci_high: float
    p_value: float
    """Two-sided sign-flip permutation p-value of delta = 0."""
    num_problems: int

    @property
    def excludes_zero(self) -> bool:
        """The interval lies wholly above or wholly below 0: a difference at the chosen confidence."""
        return self.ci_low > 0.0 or self.ci_high < 0.0


def _sign_patterns(num_problems: int, num_permutations: int, seed: int):
    """Yield (patterns (m, P) of +-1.0) chunks: all 2^P when that is <= num_permutations, else random."""
    if 2**num_problems <= num_permutations:
        codes = np.arange(2**num_problems)
        bits = (codes[:, None] >> np.arange(num_problems)[None, :]) & 1
        yield 1.0 - 2.0 * bits
        return
    rng = np.random.default_rng(seed)
    for start in range(0, num_permutations, PERMUTATION_CHUNK):
        size = min(PERMUTATION_CHUNK, num_permutations - start)
        yield rng.choice(np.array([-1.0, 1.0]), size=(size, num_problems))


def sign_flip_p_values(differences: np.ndarray, num_permutations: int = NUM_PERMUTATIONS, seed: int = 0) -> np.ndarray:
    """Two-sided sign-flip p-values of mean = 0, one per column of differences (P, K)."""
    differences = np.asarray(differences, dtype=np.float64)
    num_problems = differences.shape[0]
    observed = np.abs(differences.mean(axis=0))  # (K,)
    exact = 2**num_problems <= num_permutations
    num_at_least = np.zeros(differences.shape[1], dtype=np.int64)
    num_patterns = 0
    for patterns in _sign_patterns(num_problems, num_permutations, seed):
        flipped = np.abs(patterns @ differences) / num_problems  # (m, K)
        num_at_least += (flipped >= observed - TIE_TOLERANCE).sum(axis=0)
        num_patterns += patterns.shape[0]
    if exact:
        return num_at_least / num_patterns
    return (1 + num_at_least) / (1 + num_patterns)


def paired_delta_curve(
    correct_a: np.ndarray, correct_b: np.ndarray, n: int, ks: list[int], *, n_b: int | None = None,
    confidence: float = CONFIDENCE, num_permutations: int = NUM_PERMUTATIONS, seed: int = 0,
) -> list[PairedDelta]:
    """PairedDelta per k in ks. correct_a[i], correct_b[i]: correct samples of problem i (aligned by
    problem id) out of n for a and n_b (default n) for b; every k must be <= both."""
    correct_a, correct_b = np.asarray(correct_a), np.asarray(correct_b)
    n_b = n if n_b is None else n_b
    if correct_a.shape != correct_b.shape or correct_a.ndim != 1 or correct_a.size == 0:
        raise ValueError(f"paired_delta needs two equal-length 1-D count arrays, one entry per problem; "
                         f"got shapes {correct_a.shape} and {correct_b.shape}")
    if not ks or min(ks) < 1 or max(ks) > min(n, n_b):
        raise ValueError(f"paired_delta needs 1 <= k <= min(n_a, n_b) = {min(n, n_b)}; got ks={ks}")
    columns = np.asarray(ks) - 1
    estimates_a = per_problem_pass_at_k(n, correct_a)[:, columns]  # (P, K)
    estimates_b = per_problem_pass_at_k(n_b, correct_b)[:, columns]
    differences = estimates_b - estimates_a
    delta, low, high = difference_interval(differences, confidence)
    p_values = sign_flip_p_values(differences, num_permutations, seed)
    return [
        PairedDelta(k=k, pass_at_k_a=float(estimates_a[:, j].mean()), pass_at_k_b=float(estimates_b[:, j].mean()),
                    delta=float(delta[j]), ci_low=float(low[j]), ci_high=float(high[j]),
                    p_value=float(p_values[j]), num_problems=len(correct_a))
        for j, k in enumerate(ks)
    ]


def paired_delta(
    correct_a: np.ndarray, correct_b: np.ndarray, n: int, k: int, *, n_b: int | None = None,
    confidence: float = CONFIDENCE, num_permutations: int = NUM_PERMUTATIONS, seed: int = 0,
) -> PairedDelta:
    """The PairedDelta of one k (see paired_delta_curve)."""
    return paired_delta_curve(correct_a, correct_b, n, [k], n_b=n_b, confidence=confidence,
                              num_permutations=num_permutations, seed=seed)[0]
