"""Figures the flows log as PNG artifacts: pass@k curves per task, pass-rate histograms per task,
the entropy-ceiling fit and the RL loop's timeline.

Figures are built with `matplotlib.figure.Figure` directly, not pyplot: no global figure registry
to leak from long-running workers and no GUI backend; saving renders with the Agg canvas.
matplotlib is imported inside the functions so `passband --help` stays fast.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from passband.training.rl.monitoring.timeline import Span

SUBPLOT_WIDTH_IN = 4.0
SUBPLOT_HEIGHT_IN = 3.2


def _task_grid(num_tasks: int) -> Figure:
    """A figure with one empty subplot per task, side by side."""
    from matplotlib.figure import Figure

    figure = Figure(figsize=(SUBPLOT_WIDTH_IN * num_tasks, SUBPLOT_HEIGHT_IN), layout="constrained")
    figure.subplots(1, num_tasks, squeeze=False)
    return figure


def pass_at_k_figure(
    curves: dict[str, dict[str, list[float]]],
    intervals: dict[str, dict[str, tuple[list[float], list[float]]]] | None = None,
) -> Figure:
    """One subplot per task, one line per checkpoint label: x = k (1..n), y = pass@k, and where
    `intervals` has the label, its confidence band drawn around the line in the line's colour.

    `curves` is {task: {label: [pass@1, ..., pass@n]}}, as `training.evaluation.report.
    pass_at_k_curves` returns; labels may have different n. `intervals` is {task: {label:
    ([ci_low per k], [ci_high per k])}}, as `report.pass_at_k_intervals_by_task` returns.
    """
    if not curves:
        raise ValueError("pass_at_k_figure needs at least one task")
    figure = _task_grid(len(curves))
    for axes, (task, by_label) in zip(figure.axes, curves.items()):
        if not by_label:
            raise ValueError(f"pass_at_k_figure: task {task!r} has no curves")
        for label, curve in by_label.items():
            if not curve:
                raise ValueError(f"pass_at_k_figure: task {task!r}, label {label!r} has an empty curve")
            ks = list(range(1, len(curve) + 1))
            (line,) = axes.plot(ks, curve, marker="o", markersize=3, label=label)
            band = (intervals or {}).get(task, {}).get(label)
            if band is not None:
                low, high = band
                if len(low) != len(curve) or len(high) != len(curve):
                    raise ValueError(f"pass_at_k_figure: task {task!r}, label {label!r} has {len(curve)} "
                                     f"points but an interval of {len(low)} lows and {len(high)} highs")
                # the band shows whether pass@large-k of two checkpoints really differ
                axes.fill_between(ks, low, high, color=line.get_color(), alpha=0.2, linewidth=0)
        # pass@k grows over orders of magnitude of k only at large n; a log x-axis helps there.
        if max(len(curve) for curve in by_label.values()) >= 16:
            axes.set_xscale("log", base=2)
        axes.set_title(task)
        axes.set_xlabel("k (samples)")
        axes.set_ylabel("pass@k")
        axes.set_ylim(0.0, 1.02)
        axes.grid(alpha=0.3)
        axes.legend(fontsize="small")
    return figure


def pass_rate_histogram_figure(hist: dict[str, dict]) -> Figure:
    """One subplot per task: bars of how many problems fall in each pass-rate bin.

    `hist` is {task: {"bin_edges": [bins + 1 floats], "counts": [bins ints]}}, as
    `curation.bands.pass_rate_histogram` returns.
    """
    if not hist:
        raise ValueError("pass_rate_histogram_figure needs at least one task")
    figure = _task_grid(len(hist))
    for axes, (task, entry) in zip(figure.axes, hist.items()):
        edges, counts = entry["bin_edges"], entry["counts"]
        if len(edges) != len(counts) + 1:
            raise ValueError(
                f"pass_rate_histogram_figure: task {task!r} has {len(edges)} bin edges for "
                f"{len(counts)} counts; expected one more edge than counts"
            )
        widths = [hi - lo for lo, hi in zip(edges[:-1], edges[1:])]
        axes.bar(edges[:-1], counts, width=widths, align="edge", edgecolor="black", linewidth=0.5)
        axes.set_title(f"{task} ({sum(counts)} problems)")
        axes.set_xlabel("pass rate")
        axes.set_ylabel("problems")
        axes.set_xlim(edges[0], edges[-1])
    return figure


def entropy_ceiling_figure(history: list[tuple[float, float]]) -> Figure:
    """Reward against exp(entropy) per iteration with the fitted line R = b - a exp(H), extended
    to exp(H) = 1 where it reads the predicted ceiling b - a (docs/recipe.md section 7)."""
    import math

    from matplotlib.figure import Figure

    from passband.training.rl.monitoring.entropy_ceiling import fit_entropy_ceiling

    xs = [math.exp(h) for h, _ in history]
    rewards = [r for _, r in history]
    fit = fit_entropy_ceiling([h for h, _ in history], rewards)
    figure = Figure(figsize=(6, 4), layout="constrained")
    axes = figure.add_subplot()
    axes.scatter(xs, rewards, label="iterations")
    line_x = [1.0, max(xs)]
    axes.plot(line_x, [fit.b - fit.a * x for x in line_x], label=f"R = {fit.b:.3f} - {fit.a:.3f} exp(H)")
    axes.axhline(fit.ceiling, linestyle=":", label=f"ceiling {fit.ceiling:.3f}")
    axes.set_xlabel("exp(entropy)")
    axes.set_ylabel("reward")
    axes.legend()
    return figure


def timeline_figure(spans: list[Span]) -> Figure:
    """One row per role of the RL loop (training/rl/monitoring/timeline.py), a bar per span coloured by its
    phase, x = seconds since the run's first span: where rollouts ran beside the update is where
    the rows overlap."""
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch

    if not spans:
        raise ValueError("timeline_figure needs at least one span")
    origin = min(span.start for span in spans)
    roles = list(dict.fromkeys(span.role for span in spans))
    phases = list(dict.fromkeys(span.phase for span in spans))
    colours = {phase: f"C{index % 10}" for index, phase in enumerate(phases)}
    figure = Figure(figsize=(10, 1.0 + 0.6 * len(roles)), layout="constrained")
    axes = figure.add_subplot()
    for row, role in enumerate(roles):
        for phase in phases:
            bars = [(s.start - origin, s.seconds) for s in spans if s.role == role and s.phase == phase]
            if bars:
                axes.broken_barh(bars, (row - 0.4, 0.8), color=colours[phase])
    axes.set_yticks(range(len(roles)), roles)
    axes.invert_yaxis()
    axes.set_xlabel("seconds since the run started")
    axes.legend(handles=[Patch(color=colours[p], label=p) for p in phases], fontsize="small", ncols=len(phases),
                loc="upper center", bbox_to_anchor=(0.5, -0.35))
    return figure
