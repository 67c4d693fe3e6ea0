"""Unbiased pass@k (Chen et al. 2021; docs/recipe.md section 8), in the numerically stable product form.

With n samples of which c are correct, pass@k = 1 - C(n-c, k) / C(n, k), the probability that
k samples drawn without replacement include a correct one. The ratio of binomials is
prod_{j=n-c+1..n} (1 - k/j), a product of c factors in (0, 1) that never forms the huge
binomials; it is exactly 1.0 when n - c < k (every k-subset contains a correct sample).
"""

import numpy as np


def pass_at_k(n: int, c: int, k: int) -> float:
    """pass@k for one problem with n samples, c of them correct; requires 0 <= c <= n, 1 <= k <= n."""
    if n < 1 or k < 1 or c < 0:
        raise ValueError(f"pass_at_k needs n >= 1, k >= 1, c >= 0; got n={n}, c={c}, k={k}")
    if k > n:
        raise ValueError(f"pass_at_k needs k <= n (at least k samples); got n={n}, k={k}")
    if c > n:
        raise ValueError(f"pass_at_k needs c <= n (correct samples among n); got n={n}, c={c}")
    if n - c < k:
        return 1.0
    fraction_failing = 1.0
    for j in range(n - c + 1, n + 1):
        fraction_failing *= 1.0 - k / j
    return 1.0 - fraction_failing


def pass_at_k_curve(n: int, c: int) -> list[float]:
    """[pass@1, ..., pass@n] for one problem."""
    return [pass_at_k(n, c, k) for k in range(1, n + 1)]


def mean_pass_at_k(counts: list[tuple[int, int]], k: int) -> float:
    """Mean pass@k over problems given as (n, c) pairs; every problem needs n >= k."""
    if not counts:
        raise ValueError("mean_pass_at_k needs at least one (n, c) pair")
    return sum(pass_at_k(n, c, k) for n, c in counts) / len(counts)


def pass_at_k_table(n: int) -> np.ndarray:
    """Float array (n + 1, n): entry [c, k - 1] is pass@k for c correct of n, every c and k at once.

    The same product as `pass_at_k`, built for all c by a cumulative product over j = n, n-1, ...:
    fraction_failing[c, k] = prod_{j=n-c+1..n} (1 - k/j). When n - c < k the range holds j = k,
    whose factor is exactly 0, so those entries are exactly 1.0 as in the scalar form.
    """
    if n < 1:
        raise ValueError(f"pass_at_k_table needs n >= 1; got n={n}")
    ks = np.arange(1, n + 1, dtype=np.float64)
    js_descending = np.arange(n, 0, -1, dtype=np.float64)
    factors = 1.0 - ks[None, :] / js_descending[:, None]  # (n, n): row i is j = n - i
    fraction_failing = np.cumprod(factors, axis=0)  # row c - 1: product over the c largest j
    fraction_failing = np.vstack([np.ones((1, n)), fraction_failing])  # c = 0: empty product
    return 1.0 - fraction_failing


def per_problem_pass_at_k(n: int, num_correct: np.ndarray) -> np.ndarray:
    """Float array (P, n): row i is [pass@1, ..., pass@n] of problem i with num_correct[i] of n correct."""
    num_correct = np.asarray(num_correct)
    if num_correct.ndim != 1 or not np.issubdtype(num_correct.dtype, np.integer):
        raise ValueError(f"per_problem_pass_at_k needs a 1-D integer array of counts; got {num_correct!r}")
    if num_correct.size and (num_correct.min() < 0 or num_correct.max() > n):
        raise ValueError(f"per_problem_pass_at_k needs 0 <= counts <= n={n}; got {num_correct.min()}..{num_correct.max()}")
    return pass_at_k_table(n)[num_correct]
