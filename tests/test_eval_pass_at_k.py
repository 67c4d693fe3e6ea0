"""pass@k against exact combinatorics: 1 - C(n-c, k) / C(n, k) in rational arithmetic."""

from fractions import Fraction
from math import comb

import pytest

from passband.training.evaluation import mean_pass_at_k, pass_at_k, pass_at_k_curve


def _exact(n: int, c: int, k: int) -> float:
    # comb(n - c, k) is 0 when n - c < k, so this covers the "always passes" case too.
    return float(1 - Fraction(comb(n - c, k), comb(n, k)))


def test_matches_exact_combinatorics_on_all_small_cases():
    # Every (n, c, k) with 1 <= n <= 25, 0 <= c <= n, 1 <= k <= n: includes c = 0, c = n,
    # k = n and n - c < k.
    for n in range(1, 26):
        for c in range(0, n + 1):
            for k in range(1, n + 1):
                assert pass_at_k(n, c, k) == pytest.approx(_exact(n, c, k), abs=1e-12), (n, c, k)


@pytest.mark.parametrize("n, c, k", [(200, 3, 1), (200, 3, 100), (1000, 1, 10), (500, 250, 50), (64, 1, 64)])
def test_large_n_stays_accurate(n, c, k):
    assert pass_at_k(n, c, k) == pytest.approx(_exact(n, c, k), rel=1e-10, abs=1e-14)


def test_edge_cases_by_hand():
    assert pass_at_k(10, 0, 1) == 0.0  # no correct sample
    assert pass_at_k(10, 10, 1) == 1.0  # all correct
    assert pass_at_k(10, 1, 10) == 1.0  # k = n: the one correct sample is always drawn
    assert pass_at_k(10, 3, 8) == 1.0  # n - c = 7 < 8: every 8-subset has a correct one
    assert pass_at_k(10, 3, 1) == pytest.approx(0.3)  # pass@1 = c / n
    assert pass_at_k(5, 2, 2) == pytest.approx(0.7)  # 1 - C(3,2)/C(5,2) = 1 - 3/10


@pytest.mark.parametrize("n, c, k", [(0, 0, 1), (5, -1, 1), (5, 1, 0), (5, 1, -2), (5, 1, 6), (5, 6, 1)])
def test_invalid_arguments_are_refused(n, c, k):
    with pytest.raises(ValueError, match=f"n={n}"):
        pass_at_k(n, c, k)


def test_curve_and_mean():
    # n = 4, c = 1: pass@k = k / 4 (one correct among 4; a k-subset contains it with prob k/4).
    assert pass_at_k_curve(4, 1) == pytest.approx([0.25, 0.5, 0.75, 1.0])
    # Problems (4, 1) and (4, 0) and (2, 2) at k = 2: (0.5 + 0 + 1) / 3.
    assert mean_pass_at_k([(4, 1), (4, 0), (2, 2)], 2) == pytest.approx(0.5)
    with pytest.raises(ValueError, match="at least one"):
        mean_pass_at_k([], 1)
