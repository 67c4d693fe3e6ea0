"""The odds of an empty band: beta-binomial predictive counts, by hand and against scipy."""

import math

import pytest
from scipy import stats as scipy_stats  # installed with the engine's dependencies

from passband.curation.band_odds import beta_binomial_pmf, empty_band_probability, in_band_probability
from passband.curation.bands import BandFilter


def test_uniform_prior_gives_equal_counts_and_the_pmf_matches_scipy():
    assert [beta_binomial_pmf(k, 4, 1.0, 1.0) for k in range(5)] == pytest.approx([0.2] * 5)
    for k in range(9):
        assert beta_binomial_pmf(k, 8, 2.5, 9.5) == pytest.approx(scipy_stats.betabinom.pmf(k, 8, 2.5, 9.5), rel=1e-12)


def test_in_band_and_empty_band_by_hand():
    # solved once in one sample: Beta(1.5, 0.5), mean 0.75; one new sample passes with probability 0.75
    assert in_band_probability(1, 1, 1, BandFilter.parse("(0, 1]")) == pytest.approx(0.75)
    # two such problems both miss the band with 0.25^2
    assert empty_band_probability([(1, 1), (1, 1)], 1, BandFilter.parse("(0, 1]")) == pytest.approx(0.0625)
    # never solved in 0 samples: Beta(0.5, 0.5); at n=2, P(k=1) = B(1.5, 1.5) / B(0.5, 0.5) * 2 = (pi/8) / pi * 2
    assert in_band_probability(0, 0, 2, BandFilter.parse("(0, 0.5]")) == pytest.approx(0.25)
    # (0, 0.4] at n=4 holds only k=1; at n=8 k=1..3
    p4 = in_band_probability(2, 8, 4, BandFilter.parse("(0, 0.4]"))
    assert p4 == pytest.approx(beta_binomial_pmf(1, 4, 2.5, 6.5))
    p8 = in_band_probability(2, 8, 8, BandFilter.parse("(0, 0.4]"))
    assert p8 == pytest.approx(sum(beta_binomial_pmf(k, 8, 2.5, 6.5) for k in (1, 2, 3)))
    assert math.isclose(sum(beta_binomial_pmf(k, 8, 2.5, 6.5) for k in range(9)), 1.0)
