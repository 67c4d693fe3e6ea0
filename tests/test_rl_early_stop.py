"""The RL loop's early stop (flows/rl/loop.py: EarlyStop): history kept in RLState, fit metrics, the flag."""

from __future__ import annotations

import logging
import math

import pytest

from passband.flows.rl.loop import EarlyStop
from passband.flows.rl.config import EarlyStopConfig, RLConfig
from passband.training.rl.trainer import RLState

# R = 0.9 - 0.15 exp(H) exactly, entropy falling: the ceiling is 0.75.
ENTROPIES = [1.2, 1.0, 0.8, 0.1]


def _run(early_stop: EarlyStopConfig) -> tuple[RLState, list[dict[str, float]]]:
    stopper = EarlyStop(RLConfig(early_stop=early_stop).early_stop, logging.getLogger("test"))
    state = RLState()
    steps = [stopper.observe(state, {"entropy": h, "reward": 0.9 - 0.15 * math.exp(h)}) for h in ENTROPIES]
    return state, steps


def test_fit_is_logged_from_the_third_point_and_stops_near_the_ceiling():
    state, steps = _run(EarlyStopConfig(enabled=True, margin=0.01, patience=2))
    assert steps[0] == steps[1] == {}
    assert steps[2]["entropy_ceiling/ceiling"] == pytest.approx(0.75)
    assert steps[2]["entropy_ceiling/a"] == pytest.approx(0.15) and steps[2]["entropy_ceiling/r2"] == pytest.approx(1.0)
    # The last reward (H=0.1) is 0.9 - 0.15 e^0.1 = 0.7342: below 0.75 - 0.01, within 0.75 - 0.02.
    assert steps[3]["entropy_ceiling/stop_signal"] == 0.0 and not state.stopped_early
    state, steps = _run(EarlyStopConfig(enabled=True, margin=0.02, patience=2))
    assert steps[3]["entropy_ceiling/stop_signal"] == 1.0 and state.stopped_early
    assert state.entropy_reward[-1] == pytest.approx((0.1, 0.9 - 0.15 * math.exp(0.1)))


def test_the_signal_is_only_logged_unless_enabled():
    state, steps = _run(EarlyStopConfig(enabled=False, margin=0.02, patience=2))
    assert steps[3]["entropy_ceiling/stop_signal"] == 1.0
    assert not state.stopped_early


def test_state_round_trips_the_history():
    state, _ = _run(EarlyStopConfig(enabled=True, margin=0.02, patience=2))
    again = RLState.from_json(state.to_json())
    assert again == state
