"""The entropy-ceiling fit R = -a exp(H) + b and the early-stop rule, on synthetic histories."""

import math

import pytest
import torch

from passband.training.rl.monitoring.entropy_ceiling import fit_entropy_ceiling, should_stop_early


def _history(a: float, b: float, entropies: list[float], noise: float = 0.0, seed: int = 0) -> list[float]:
    gen = torch.Generator().manual_seed(seed)
    return [-a * math.exp(h) + b + noise * float(torch.randn(1, generator=gen)) for h in entropies]


def test_exact_recovery_without_noise():
    entropies = [1.2, 1.0, 0.8, 0.65, 0.5, 0.4]
    fit = fit_entropy_ceiling(entropies, _history(0.15, 0.9, entropies))
    assert fit.a == pytest.approx(0.15, abs=1e-12)
    assert fit.b == pytest.approx(0.9, abs=1e-12)
    assert fit.ceiling == pytest.approx(0.75, abs=1e-12)
    assert fit.r2 == pytest.approx(1.0, abs=1e-12)


def test_close_recovery_with_noise():
    entropies = [1.5 - 0.05 * k for k in range(25)]
    fit = fit_entropy_ceiling(entropies, _history(0.2, 1.0, entropies, noise=0.005))
    assert fit.a == pytest.approx(0.2, abs=0.01)
    assert fit.ceiling == pytest.approx(0.8, abs=0.02)
    assert 0.9 < fit.r2 < 1.0


def test_fit_refuses_degenerate_input():
    with pytest.raises(ValueError, match="at least 2"):
        fit_entropy_ceiling([1.0], [0.5])
    with pytest.raises(ValueError, match="different entropies"):
        fit_entropy_ceiling([1.0, 1.0], [0.5, 0.6])
    with pytest.raises(ValueError, match="pair up"):
        fit_entropy_ceiling([1.0, 0.9], [0.5])


def test_should_stop_early():
    # a = 0.15, b = 0.9: ceiling 0.75. At H = 0.1 the reward is 0.9 - 0.15 e^0.1 = 0.7342.
    entropies = [1.0, 0.7, 0.4, 0.2, 0.1]
    history = list(zip(entropies, _history(0.15, 0.9, entropies)))
    assert should_stop_early(history, margin=0.02, patience=3)  # 0.7342 >= 0.75 - 0.02
    assert not should_stop_early(history, margin=0.01, patience=3)  # 0.7342 < 0.74
    # Entropy rose at the last point: not falling over the last 3 steps.
    bumped = history[:-1] + [(0.25, history[-1][1])]
    assert not should_stop_early(bumped, margin=0.5, patience=3)
    # Too few points for the patience window.
    assert not should_stop_early(history[:3], margin=0.5, patience=3)
    # Reward falling with entropy (a < 0): no ceiling to approach.
    rising = list(zip(entropies, _history(-0.15, 0.0, entropies)))
    assert not should_stop_early(rising, margin=10.0, patience=2)
