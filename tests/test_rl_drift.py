"""Drift alerts (issue 53 item 2): a task's unparsable/truncated fraction or length rising over its first iterations."""

import logging

import pytest

import passband.tasks.reporting.prefect_artifacts as prefect_artifacts
import passband.tasks.reporting.tracking as tracking
from passband.flows.rl_config import DriftConfig
from passband.flows.rl_loop import DriftWatch
from passband.training.rl.drift import DriftAlert, drift_alerts, drift_series
from passband.training.rl.trainer import RLState


def _iteration(unparsable, length, code_unparsable=0.0):
    return {"math/unparsable_frac": unparsable, "math/truncated_frac": 0.0, "math/response_len_mean": length,
            "code/unparsable_frac": code_unparsable, "code/response_len_mean": 80.0, "unparsable_frac": unparsable,
            "before/math/pass@1": 0.5, "math/reward": 0.4}


def test_series_are_the_per_task_watched_metrics():
    assert drift_series(_iteration(0.1, 40.0)) == {"math/unparsable_frac": 0.1, "math/truncated_frac": 0.0,
                                                   "math/response_len_mean": 40.0, "code/unparsable_frac": 0.0,
                                                   "code/response_len_mean": 80.0}


def test_alerts_by_hand():
    first = [drift_series(_iteration(u, n)) for u, n in ((0.1, 40.0), (0.2, 44.0), (0.0, 36.0))]  # baseline 0.1, 40
    assert drift_alerts(first, 3, 0.2, 0.5) == []  # nothing after the baseline yet
    assert drift_alerts(first + [drift_series(_iteration(0.3, 60.0))], 3, 0.2, 0.5) == []  # at the thresholds
    rising = first + [drift_series(_iteration(0.35, 61.0, code_unparsable=0.15))]
    assert drift_alerts(rising, 3, 0.2, 0.5) == [
        DriftAlert("math/response_len_mean", 40.0, 61.0, pytest.approx(60.0)),
        DriftAlert("math/unparsable_frac", pytest.approx(0.1), 0.35, pytest.approx(0.3)),
    ]
    with pytest.raises(ValueError, match="baseline"):
        drift_alerts(rising, 0, 0.2, 0.5)


def _run(monkeypatch, unparsable, config):
    """A constructed run: DriftWatch observing one iteration's metrics per value of `unparsable`."""
    tags, artifacts = [], []
    monkeypatch.setattr(tracking, "set_tags", lambda values, run_id: tags.append(values))
    monkeypatch.setattr(prefect_artifacts, "publish_markdown", lambda text, description: artifacts.append(text))
    watch, state, alerts = DriftWatch(config, logging.getLogger("test-drift"), "run"), RLState(), []
    for iteration, value in enumerate(unparsable, start=1):
        state.iteration = iteration
        alerts.append(watch.observe(state, _iteration(value, 40.0))["drift/num_alerts"])
        if state.stopped_early:
            break
    return alerts, tags, artifacts, state


def test_a_rising_unparsable_fraction_warns_tags_and_publishes(monkeypatch, caplog):
    with caplog.at_level(logging.WARNING, logger="test-drift"):
        alerts, tags, artifacts, state = _run(monkeypatch, [0.0, 0.05, 0.0, 0.1, 0.4, 0.5], DriftConfig())
    assert alerts == [0.0, 0.0, 0.0, 0.0, 1.0, 1.0] and not state.stopped_early
    assert "math/unparsable_frac 0.4 > 0.217" in caplog.text
    assert tags[0] == {"drift_alert": "iteration 5: math/unparsable_frac 0.4 > 0.217 (baseline 0.0167)"}
    assert "| math/unparsable_frac | 0.4 |" in artifacts[0] and len(state.drift_history) == 6


def test_a_steady_run_raises_nothing_and_stop_is_opt_in(monkeypatch):
    alerts, tags, artifacts, state = _run(monkeypatch, [0.1, 0.2, 0.1, 0.2, 0.15], DriftConfig())
    assert sum(alerts) == 0 and tags == artifacts == [] and not state.stopped_early
    alerts, _, _, state = _run(monkeypatch, [0.0, 0.0, 0.0, 0.5, 0.5], DriftConfig(stop_run=True))
    assert state.stopped_early and state.iteration == 4 and alerts == [0.0, 0.0, 0.0, 1.0]


def test_the_history_survives_a_checkpoint():
    state = RLState(drift_history=[{"math/unparsable_frac": 0.25}])
    assert RLState.from_json(state.to_json()).drift_history == state.drift_history
    assert RLState.from_json({k: v for k, v in state.to_json().items() if k != "drift_history"}).drift_history == []
