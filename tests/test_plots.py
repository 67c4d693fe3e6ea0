"""The evaluation and curation figures: right subplots and lines, and a real PNG on disk."""

from pathlib import Path

import pytest

from passband.curation.bands import pass_rate_histogram
from passband.tasks.reporting.plots import pass_at_k_figure, pass_rate_histogram_figure

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _assert_png(path: Path) -> None:
    data = path.read_bytes()
    assert data[:8] == PNG_MAGIC
    assert len(data) > 5_000  # a rendered figure with text, not an empty canvas


def test_pass_at_k_figure_one_subplot_per_task_one_line_per_label(tmp_path):
    curves = {
        "math": {"base": [0.2, 0.35, 0.45, 0.5], "sft": [0.3, 0.45, 0.5, 0.55], "rl": [0.5, 0.55, 0.57, 0.58]},
        "code": {"base": [0.1, 0.2], "rl": [0.3, 0.35]},
    }
    figure = pass_at_k_figure(curves)
    assert [axes.get_title() for axes in figure.axes] == ["math", "code"]
    math_axes, code_axes = figure.axes
    assert [line.get_label() for line in math_axes.get_lines()] == ["base", "sft", "rl"]
    assert len(code_axes.get_lines()) == 2
    rl_line = math_axes.get_lines()[2]
    assert list(rl_line.get_xdata()) == [1, 2, 3, 4]
    assert list(rl_line.get_ydata()) == [0.5, 0.55, 0.57, 0.58]
    assert math_axes.get_xscale() == "linear"
    figure.savefig(tmp_path / "pass_at_k.png")
    _assert_png(tmp_path / "pass_at_k.png")


def test_pass_at_k_figure_uses_log_k_for_long_curves():
    figure = pass_at_k_figure({"math": {"base": [k / 32 for k in range(1, 33)]}})
    assert figure.axes[0].get_xscale() == "log"


def test_pass_rate_histogram_figure_from_curation_histogram(tmp_path):
    rows = [{"id": str(i), "task": task, "pass_rate": p}
            for i, (task, p) in enumerate([("math", 0.0), ("math", 0.25), ("math", 0.3), ("math", 1.0),
                                           ("code", 0.5), ("code", 0.55), ("ifeval", 0.9)])]
    hist = pass_rate_histogram(rows, bins=4)
    figure = pass_rate_histogram_figure(hist)
    assert len(figure.axes) == 3
    math_axes = figure.axes[0]
    assert math_axes.get_title() == "math (4 problems)"
    bars = math_axes.patches
    assert len(bars) == 4
    # Bins [0, .25), [.25, .5), [.5, .75), [.75, 1]: math has 0.0 | 0.25, 0.3 | - | 1.0.
    assert [bar.get_height() for bar in bars] == [1, 2, 0, 1]
    assert [bar.get_x() for bar in bars] == pytest.approx([0.0, 0.25, 0.5, 0.75])
    assert [bar.get_width() for bar in bars] == pytest.approx([0.25] * 4)
    figure.savefig(tmp_path / "hist.png")
    _assert_png(tmp_path / "hist.png")


def test_bad_inputs_are_refused():
    with pytest.raises(ValueError, match="at least one task"):
        pass_at_k_figure({})
    with pytest.raises(ValueError, match="task 'math', label 'rl' has an empty curve"):
        pass_at_k_figure({"math": {"rl": []}})
    with pytest.raises(ValueError, match="task 'math' has 3 bin edges for 3 counts"):
        pass_rate_histogram_figure({"math": {"bin_edges": [0.0, 0.5, 1.0], "counts": [1, 2, 3]}})


def test_pass_at_k_figure_draws_interval_bands(tmp_path):
    from matplotlib.collections import PolyCollection

    from passband.training.evaluation.report import build_report, pass_at_k_curves, pass_at_k_intervals_by_task

    def rows(label_passes):
        # 3 problems x 16 samples; problem i passes label_passes[i] of 16.
        return [{"problem_id": f"p{i}", "task": "math", "subdomain": "x", "sample_index": j,
                 "status": "pass" if j < c else "fail", "score": float(j < c)}
                for i, c in enumerate(label_passes) for j in range(16)]

    reports = {"base": build_report(rows([1, 4, 0])), "rl": build_report(rows([8, 8, 0]))}
    figure = pass_at_k_figure(pass_at_k_curves(reports), pass_at_k_intervals_by_task(reports))
    axes = figure.axes[0]
    bands = [child for child in axes.get_children() if isinstance(child, PolyCollection)]
    assert len(bands) == 2  # one band per checkpoint
    # Each band spans k = 1..16 between ci_low and ci_high: its vertices reach the ends of the interval.
    base = reports["base"].tasks["math"]
    vertices = bands[0].get_paths()[0].vertices
    assert vertices[:, 0].min() == 1 and vertices[:, 0].max() == 16
    assert vertices[:, 1].min() == pytest.approx(min(base.ci_low))
    assert vertices[:, 1].max() == pytest.approx(max(base.ci_high))
    assert axes.get_xscale() == "log"
    assert len(axes.get_lines()) == 2
    figure.savefig(tmp_path / "bands.png")
    _assert_png(tmp_path / "bands.png")
    # Without intervals nothing is filled.
    plain = pass_at_k_figure(pass_at_k_curves(reports))
    assert not [c for c in plain.axes[0].get_children() if isinstance(c, PolyCollection)]
    with pytest.raises(ValueError, match="16 points but an interval of 2 lows"):
        pass_at_k_figure(pass_at_k_curves(reports), {"math": {"base": ([0.1, 0.2], [0.3, 0.4])}})


def test_entropy_ceiling_figure_draws_points_fit_and_ceiling():
    import math

    from passband.tasks.reporting.plots import entropy_ceiling_figure

    # R = 0.9 - 0.15 exp(H) exactly: the fitted line passes through every point, the ceiling is 0.75.
    history = [(h, 0.9 - 0.15 * math.exp(h)) for h in (1.2, 1.0, 0.8, 0.5)]
    axes = entropy_ceiling_figure(history).axes[0]
    (points,) = axes.collections
    assert len(points.get_offsets()) == 4
    fit_line, ceiling = axes.lines
    assert abs(fit_line.get_ydata()[0] - 0.75) < 1e-9  # the line at exp(H) = 1 reads the ceiling
    assert abs(ceiling.get_ydata()[0] - 0.75) < 1e-9
