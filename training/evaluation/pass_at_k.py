"""Unbiased pass@k (Chen et al. 2021; RECIPE section 8), in the numerically stable product form.

With n samples of which c are correct, pass@k = 1 - C(n-c, k) / C(n, k), the probability that
k samples drawn without replacement include a correct one. The ratio of binomials is
prod_{j=n-c+1..n} (1 - k/j), a product of c factors in (0, 1) that never forms the huge
binomials; it is exactly 1.0 when n - c < k (every k-subset contains a correct sample).
"""


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
