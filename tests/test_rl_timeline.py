"""The RL loop's timeline (training/rl/monitoring/timeline.py): sums by hand, the figure, the checkpointed state."""

import pytest

from passband.training.rl.monitoring.timeline import Span, busy_seconds, overlap_seconds, phase_seconds, timeline_markdown

# rollouts sample 0-4 and 6-9 (score 4-5), the trainer trains 3-7 and publishes 7-8:
# rollouts busy [0, 5] + [6, 9] = 8 s, trainer [3, 8] = 5 s, both busy [3, 5] + [6, 8] = 4 s
SPANS = [Span("rollouts", "rollout", 100.0, 104.0), Span("rollouts", "scoring", 104.0, 105.0),
         Span("trainer", "training", 103.0, 107.0), Span("trainer", "weight_publish", 107.0, 108.0),
         Span("rollouts", "rollout", 106.0, 109.0)]


def test_sums_by_hand():
    assert phase_seconds(SPANS) == {("rollouts", "rollout"): 7.0, ("rollouts", "scoring"): 1.0,
                                    ("trainer", "training"): 4.0, ("trainer", "weight_publish"): 1.0}
    assert busy_seconds(SPANS, "rollouts") == 8.0
    assert busy_seconds(SPANS, "trainer") == 5.0
    assert overlap_seconds(SPANS, "rollouts", "trainer") == 4.0
    assert overlap_seconds(SPANS, "trainer", "rollouts") == 4.0
    assert overlap_seconds(SPANS, "rollouts", "evaluator") == 0.0
    # one after the other, touching: no overlap
    serial = [Span("rollouts", "rollout", 0.0, 2.0), Span("trainer", "training", 2.0, 3.0)]
    assert overlap_seconds(serial, "rollouts", "trainer") == 0.0


def test_markdown_states_the_overlap():
    text = timeline_markdown(SPANS)
    assert "| rollouts | rollout | 7.0 |" in text
    assert "Wall 9.0 s; rollouts and training overlapped for 4.0 s (44% of it)" in text


def test_figure_has_a_row_per_role():
    from passband.tasks.reporting.plots import timeline_figure

    figure = timeline_figure(SPANS + [Span("evaluator", "eval", 108.0, 110.0)])
    axes = figure.axes[0]
    assert [label.get_text() for label in axes.get_yticklabels()] == ["rollouts", "trainer", "evaluator"]
    # one bar collection per (role, phase) present: rollouts 2, trainer 2, evaluator 1
    assert len(axes.collections) == 5
    assert axes.get_legend() is not None
    with pytest.raises(ValueError, match="at least one span"):
        timeline_figure([])


def test_state_round_trip_keeps_the_timeline():
    from passband.training.rl.trainer import RLState

    state = RLState(iteration=2, timeline=list(SPANS))
    assert RLState.from_json(state.to_json()).timeline == SPANS
    assert RLState.from_json({k: v for k, v in state.to_json().items() if k != "timeline"}).timeline == []
