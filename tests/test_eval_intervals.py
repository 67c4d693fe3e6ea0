"""pass@k intervals: the t quantile against printed tables, the interval against the textbook
Wilson formula, and its coverage on simulated evals whose true mean pass@k is known exactly."""

import math

import numpy as np
import pytest

from passband.training.evaluation.intervals import mean_interval, pass_at_k_intervals, student_t_quantile
from passband.training.evaluation.pass_at_k import pass_at_k, pass_at_k_table, per_problem_pass_at_k


@pytest.mark.parametrize(
    "confidence, df, expected",
    # Student t tables: t_{0.975, df} and t_{0.95, 1}.
    [(0.95, 1, 12.7062047), (0.95, 2, 4.30265273), (0.95, 3, 3.18244631), (0.95, 15, 2.13144955),
     (0.95, 47, 2.01174051), (0.95, 1000, 1.96233908), (0.90, 1, 6.31375151)],
)
def test_t_quantile_matches_tables(confidence, df, expected):
    assert student_t_quantile(confidence, df) == pytest.approx(expected, abs=5e-8)


def test_table_matches_scalar_pass_at_k():
    for n in range(1, 21):
        table = pass_at_k_table(n)
        assert table.shape == (n + 1, n)
        for c in range(n + 1):
            for k in range(1, n + 1):
                assert table[c, k - 1] == pytest.approx(pass_at_k(n, c, k), abs=1e-14), (n, c, k)
    rows = per_problem_pass_at_k(4, np.array([1, 0, 4]))
    np.testing.assert_allclose(rows, [[0.25, 0.5, 0.75, 1.0], [0.0] * 4, [1.0] * 4], atol=1e-15)


def _wilson(mean, num_effective, z):
    # Textbook Wilson score interval for a proportion `mean` from num_effective trials.
    center = (mean + z * z / (2 * num_effective)) / (1 + z * z / num_effective)
    half = z / (1 + z * z / num_effective) * math.sqrt(mean * (1 - mean) / num_effective
                                                        + z * z / (4 * num_effective**2))
    return center - half, center + half


def test_interior_interval_is_wilson_on_effective_problems():
    values = np.array([0.25, 0.5, 0.75, 1.0])
    mean, low, high = mean_interval(values)
    # mean 0.625, s^2 = 0.3125 / 3, P_eff = 4 * 0.625 * 0.375 / s^2 = 9, z = t_{3, 0.975}.
    expected = _wilson(0.625, 9.0, 3.18244631)
    assert float(mean) == pytest.approx(0.625)
    assert (float(low), float(high)) == pytest.approx(expected, abs=1e-7)
    assert (float(low), float(high)) == pytest.approx((0.2003754, 0.9172534), abs=1e-6)


def test_all_pass_keeps_width_and_one_problem_is_a_point():
    # 16 problems all at 1: Wilson on P - 1 = 15 trials, lower end 15 / (15 + t_{15}^2).
    mean, low, high = mean_interval(np.ones(16))
    assert (float(mean), float(high)) == (1.0, 1.0)
    assert float(low) == pytest.approx(15 / (15 + 2.13144955**2), abs=1e-7)
    _, low, high = mean_interval(np.zeros(16))
    assert float(low) == 0.0 and float(high) == pytest.approx(1 - 15 / (15 + 2.13144955**2), abs=1e-7)
    assert [float(v) for v in mean_interval(np.array([0.4]))] == [0.4, 0.4, 0.4]


def test_pass_at_k_intervals_whole_curve():
    curve = pass_at_k_intervals(4, np.array([1, 0, 4, 2]))
    assert curve.n == 4 and curve.num_problems == 4
    assert curve.pass_at_k == pytest.approx([(0.25 + 0 + 1 + 0.5) / 4, (0.5 + 0 + 1 + 5 / 6) / 4,
                                             (0.75 + 0 + 1 + 1) / 4, 3 / 4])
    assert all(lo <= p <= hi for lo, p, hi in zip(curve.ci_low, curve.pass_at_k, curve.ci_high))
    # pass@4: 3 of 4 problems solved, Bernoulli outcomes -> Wilson on P - 1 = 3 trials with t_{3}.
    assert (curve.ci_low[3], curve.ci_high[3]) == pytest.approx(_wilson(0.75, 3.0, 3.18244631), abs=1e-7)


def _population_pass_at_k(alpha, beta, k):
    # Estimand: the mean pass@k over the problem POPULATION, pass rates p ~ Beta(alpha, beta):
    # E[1 - (1 - p)^k] = 1 - B(alpha, beta + k) / B(alpha, beta) = 1 - prod_j (beta + j) / (alpha + beta + j).
    return 1.0 - math.prod((beta + j) / (alpha + beta + j) for j in range(k))


@pytest.mark.parametrize(
    "num_problems, n, alpha, beta, ks",
    [
        (48, 4, 1.0, 3.0, [1, 4]),  # hard set, mean pass@1 = 0.25
        (48, 4, 1.0, 1.0, [1, 2]),  # uniform pass rates
        (16, 16, 1.0, 3.0, [1, 4, 8]),
        (16, 16, 0.3, 1.0, [1, 4]),  # most problems nearly never solved
    ],
)
def test_coverage_on_simulated_evals(num_problems, n, alpha, beta, ks):
    # 2,000 simulated evals: P pass rates from Beta, n binomial samples each, one interval each,
    # all at once as a (P, repetitions, n) array. Monte Carlo error of a 95% rate is ~0.5%.
    coverage = _coverage(num_problems, n, alpha, beta)
    for k in ks:
        assert 0.93 <= coverage[k - 1] <= 0.97, (k, coverage[k - 1])


def test_coverage_at_k_equal_n_is_conservative_not_collapsed():
    # pass@16 of 16 problems is a Wilson interval on 0/1 outcomes: wider than nominal at P = 16
    # (0.97-0.99), where the plain t interval would collapse to [1, 1] whenever all 16 pass.
    for alpha, beta in [(1.0, 3.0), (0.3, 1.0), (0.5, 0.5)]:
        assert 0.95 <= _coverage(16, 16, alpha, beta)[15] <= 0.99, (alpha, beta)


def _coverage(num_problems, n, alpha, beta, repetitions=2000):
    """Fraction of simulated evals whose interval holds the population mean, per k = 1..n."""
    rng = np.random.default_rng(17)
    counts = rng.binomial(n, rng.beta(alpha, beta, size=(num_problems, repetitions)))
    _, low, high = mean_interval(pass_at_k_table(n)[counts])  # (repetitions, n) each
    truth = np.array([_population_pass_at_k(alpha, beta, k) for k in range(1, n + 1)])
    return np.mean((low <= truth) & (truth <= high), axis=0)
