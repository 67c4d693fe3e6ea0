"""How likely a task's band ends up empty, from pass counts measured with many samples.

A pool's problems are fixed (seeded suites); what varies between machines is the sampling. With
problem i solved c_i times in N samples, its success probability is uncertain: the Jeffreys
posterior Beta(c_i + 1/2, N - c_i + 1/2). At the run's n samples its pass count k is then
beta-binomial, and the problem lands in the band when k/n does. Problems sample independently,
so the band is empty with probability prod_i (1 - P_i(in band)).
"""

from __future__ import annotations

import math

from passband.curation.bands import BandFilter


def beta_binomial_pmf(k: int, n: int, a: float, b: float) -> float:
    """P(K = k) for K ~ BetaBinomial(n, a, b)."""
    log_pmf = (math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)
               + _log_beta(k + a, n - k + b) - _log_beta(a, b))
    return math.exp(log_pmf)


def in_band_probability(passes: int, samples: int, n: int, band: BandFilter) -> float:
    """P(a problem solved `passes` of `samples` times lands in `band` when sampled n times)."""
    a, b = passes + 0.5, samples - passes + 0.5
    return sum(beta_binomial_pmf(k, n, a, b) for k in range(n + 1) if band.contains(k / n))


def empty_band_probability(pass_counts: list[tuple[int, int]], n: int, band: BandFilter) -> float:
    """P(no problem lands in `band`) for problems with measured (passes, samples), at n samples each."""
    return math.prod(1.0 - in_band_probability(c, total, n, band) for c, total in pass_counts)


def _log_beta(a: float, b: float) -> float:
    return math.lgamma(a) + math.lgamma(b) - math.lgamma(a + b)
