"""Drift alerts (issue 53 item 2): a task's unparsable/truncated fraction or length rising over its first iterations."""

import logging

import pytest

import passband.tasks.reporting.prefect_artifacts as prefect_artifacts
import passband.tasks.reporting.tracking as tracking
from passband.flows.rl.config import DriftConfig
from passband.flows.rl.loop import DriftWatch
from passband.training.rl.monitoring.drift import DriftAlert, drift_alerts, drift_series
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


def test_a_window_tells_a_rise_from_a_spike():
    """The mean of the latest `window` iterations against the baseline: one iteration at 0.45 (a spike)
    alerts at window 1 and not at window 3, where the mean is (0.45 + 0.1 + 0.1) / 3 = 0.2167 < 0.3;
    three rising iterations (0.3, 0.35, 0.4: mean 0.35) alert at window 3."""
    first = [drift_series(_iteration(u, 40.0)) for u in (0.1, 0.2, 0.0)]  # baseline 0.1, threshold 0.3
    spike = first + [drift_series(_iteration(u, 40.0)) for u in (0.1, 0.1, 0.45)]
    assert [a.series for a in drift_alerts(spike, 3, 0.2, 0.5, window=1)] == ["math/unparsable_frac"]
    assert drift_alerts(spike, 3, 0.2, 0.5, window=3) == []
    rise = first + [drift_series(_iteration(u, 40.0)) for u in (0.3, 0.35, 0.4)]
    assert drift_alerts(rise[:5], 3, 0.2, 0.5, window=3) == []  # two iterations after the baseline: too few
    assert drift_alerts(rise, 3, 0.2, 0.5, window=3) == [
        DriftAlert("math/unparsable_frac", pytest.approx(0.1), pytest.approx(0.35), pytest.approx(0.3))]


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
    # baseline (0 + 0.05 + 0) / 3 = 0.0167, threshold 0.217; the window of 3 after it: (0.1 + 0.4 + 0.5) / 3
    # = 0.333 at iteration 6, (0.4 + 0.5 + 0.5) / 3 = 0.467 at 7
    with caplog.at_level(logging.WARNING, logger="test-drift"):
        alerts, tags, artifacts, state = _run(monkeypatch, [0.0, 0.05, 0.0, 0.1, 0.4, 0.5, 0.5], DriftConfig())
    assert alerts == [0.0, 0.0, 0.0, 0.0, 0.0, 1.0, 1.0] and not state.stopped_early
    assert "math/unparsable_frac 0.333 > 0.217" in caplog.text
    assert tags[0] == {"drift_alert": "iteration 6: math/unparsable_frac 0.333 > 0.217 (baseline 0.0167)"}
    assert "| math/unparsable_frac | 0.3333 |" in artifacts[0] and len(state.drift_history) == 7


def test_a_steady_run_raises_nothing_and_stop_is_opt_in(monkeypatch):
    alerts, tags, artifacts, state = _run(monkeypatch, [0.1, 0.2, 0.1, 0.2, 0.15], DriftConfig())
    assert sum(alerts) == 0 and tags == artifacts == [] and not state.stopped_early
    alerts, _, _, state = _run(monkeypatch, [0.0, 0.0, 0.0, 0.5, 0.5, 0.5, 0.5], DriftConfig(stop_run=True))
    assert state.stopped_early and state.iteration == 6 and alerts == [0.0, 0.0, 0.0, 0.0, 0.0, 1.0]


def test_the_history_survives_a_checkpoint():
    state = RLState(drift_history=[{"math/unparsable_frac": 0.25}])
    assert RLState.from_json(state.to_json()).drift_history == state.drift_history
    assert RLState.from_json({k: v for k, v in state.to_json().items() if k != "drift_history"}).drift_history == []


# The demo's RL (make demo at 2cc67d5, 2026-12-06, 2-core AVX2 box): each iteration's watched series
# as the run logged them to MLflow, rounded to 4 decimals.
DEMO_RL = {
    "code/response_len_mean": [56.375, 59.875, 44.125, 51.75, 77.25, 52.25, 73.0, 62.25, 63.625, 69.5, 68.125, 72.625,
                               84.25, 70.375],
    "code/truncated_frac": [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.125, 0.0, 0.0, 0.0, 0.125, 0.0, 0.0, 0.0],
    "code/unparsable_frac": [0.125, 0.0, 0.0, 0.0, 0.0, 0.0, 0.125, 0.0, 0.0, 0.0, 0.125, 0.0, 0.0, 0.0],
    "ifeval/response_len_mean": [77.875, 36.8333, 75.75, 42.0417, 62.5417, 49.375, 34.4583, 50.625, 59.9583, 45.5833,
                                 67.0833, 47.5417, 28.75, 42.9167],
    "ifeval/truncated_frac": [0.25, 0.0417, 0.0833, 0.0, 0.2083, 0.125, 0.0, 0.125, 0.25, 0.125, 0.25, 0.125, 0.0, 0.0833],
    "ifeval/unparsable_frac": [0.25, 0.0417, 0.0833, 0.0, 0.2083, 0.125, 0.0, 0.125, 0.25, 0.125, 0.25, 0.125, 0.0,
                               0.0833],
    "math/response_len_mean": [50.25, 21.4375, 30.75, 38.625, 34.0625, 28.375, 31.1875, 26.1875, 20.3125, 21.3125, 32.5,
                               21.3125, 39.625, 29.375],
    "math/truncated_frac": [0.125, 0.0, 0.0, 0.0625, 0.125, 0.0, 0.0625, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0625, 0.0],
    "math/unparsable_frac": [0.125, 0.0, 0.0, 0.0625, 0.125, 0.0, 0.0625, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0625, 0.0],
}


def test_the_demos_rl_raises_no_alert_at_the_defaults():
    """Replayed iteration by iteration: quiet at the defaults (a window of 3); one iteration at a time
    (window 1), code's length at iteration 13 (84.25 against a baseline of 53.46 x 1.5 = 80.19) alerts."""
    config = DriftConfig()
    history = [{series: values[i] for series, values in DEMO_RL.items()} for i in range(14)]
    replay = [drift_alerts(history[:i], config.baseline_iterations, config.frac_margin, config.length_margin,
                           config.window) for i in range(1, 15)]
    assert replay == [[]] * 14
    single = [drift_alerts(history[:i], 3, config.frac_margin, config.length_margin, 1) for i in range(1, 15)]
    assert [(i, [a.series for a in alerts]) for i, alerts in enumerate(single, start=1) if alerts] == \
        [(13, ["code/response_len_mean"])]
