"""Sharpening or expansion: pass@k up to k = n on a subset, model against baseline (docs/recipe.md
section 8; issue 17).

RL raises pass@1. It can do so by narrowing the distribution onto answers the base model already
found in some of its samples (pass@k at large k stays or falls: the base with many tries solves as
much or more), or by expanding what the model can reach (pass@large-k rises too). Telling them
apart needs many samples per problem, so it is measured on a subset: the first `problems` problems
of every eval set, `n` samples each, the same problems and per-request seeds for both checkpoints.

The call reads the paired delta at the largest k (k = n): "narrowing" when its interval lies
wholly below 0, "expanding" when wholly above, and "no call" otherwise. One test at one k, fixed in
advance, rather than a search over k for a significant one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

if TYPE_CHECKING:  # the config is imported by flow configs at CLI start-up: no numpy there
    from passband.training.evaluation.report import EvalReport

PREFIX = "k_curve"
Direction = Literal["narrowing", "expanding", "no call"]
DIRECTION_CODES: dict[str, float] = {"narrowing": -1.0, "no call": 0.0, "expanding": 1.0}
"""The call as a metric value (MLflow metrics are numbers)."""


class KCurveConfig(BaseModel):
    """The pass@k-curve subset: few problems, many samples each."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    problems: int = Field(16, ge=2)
    """The first N problems of every eval set (all of a smaller set). Intervals are over problems,
    so fewer than ~16 leaves most calls at "no call"."""
    n: int = Field(16, ge=16)
    """Samples per problem: pass@k is reported for k = 1, 2, 4, ..., n. At least 16, so that
    pass@large-k reaches past where one sample's luck decides it."""
    sets: list[str] | None = None
    """The eval sets to draw it on (None: all); a set no checkpoint solves (HumanEval at 135M)
    only costs time."""


def curve_ks(n: int) -> list[int]:
    """k = 1, 2, 4, ... up to n, and n itself."""
    if n < 1:
        raise ValueError(f"curve_ks needs n >= 1; got {n}")
    ks = [2**i for i in range(n.bit_length()) if 2**i <= n]
    return ks if ks[-1] == n else [*ks, n]


def k_curve_subset(eval_sets: dict[str, list[dict[str, Any]]], config: KCurveConfig) -> dict[str, list[dict[str, Any]]]:
    """The first `config.problems` rows of each eval set in `config.sets` (all when None), in order,
    so that both checkpoints get the same."""
    missing = sorted(set(config.sets or ()) - eval_sets.keys())
    if missing:
        raise ValueError(f"k_curve.sets names {missing}, which are not eval sets ({sorted(eval_sets)})")
    return {name: rows[:config.problems] for name, rows in eval_sets.items() if config.sets is None or name in config.sets}


def direction(ci_low: float, ci_high: float) -> Direction:
    """The call from the interval of pass@n(model) - pass@n(baseline) (see the module docstring)."""
    if ci_high < 0.0:
        return "narrowing"
    if ci_low > 0.0:
        return "expanding"
    return "no call"


def k_curve_metrics(model: EvalReport, baseline: EvalReport | None, deltas: list[dict], ks: list[int]) -> dict[str, float]:
    """Flat metrics of the curve at `ks`: `k_curve/<set>/pass@k` (+ `_ci_low`, `_ci_high`), the same
    under `k_curve/baseline/`, `k_curve/<set>/num_problems` and `/n`, the paired `k_curve/delta/<set>/pass@k` (+ interval, `_p_value`) from
    `deltas` (report.compare_rows of baseline then model, grouped by eval set), and
    `k_curve/<set>/direction` (DIRECTION_CODES) at the largest k."""
    metrics: dict[str, float] = {}
    for label, report in (("", model), ("baseline/", baseline)):
        if report is None:
            continue
        for name, group in report.tasks.items():
            if not label:
                metrics |= {f"{PREFIX}/{name}/num_problems": float(group.num_problems), f"{PREFIX}/{name}/n": float(group.n)}
            for k in ks:
                key = f"{PREFIX}/{label}{name}/pass@{k}"
                metrics |= {key: group.pass_at_k[k - 1], f"{key}_ci_low": group.ci_low[k - 1],
                            f"{key}_ci_high": group.ci_high[k - 1]}
    for row in deltas:
        if row["k"] in ks:
            key = f"{PREFIX}/delta/{row['task']}/pass@{row['k']}"
            metrics |= {key: row["delta"], f"{key}_ci_low": row["ci_low"], f"{key}_ci_high": row["ci_high"],
                        f"{key}_p_value": row["p_value"]}
        if row["k"] == max(ks):
            metrics[f"{PREFIX}/{row['task']}/direction"] = DIRECTION_CODES[direction(row["ci_low"], row["ci_high"])]
    return metrics


def k_curve_entries(metrics: dict[str, float]) -> dict[str, float]:
    """The k-curve's metrics (`k_curve/...`, as k_curve_metrics names them) among an evaluation's."""
    return {name: value for name, value in metrics.items() if name.startswith(f"{PREFIX}/")}


def k_curve_markdown(metrics: dict[str, float], baseline_label: str, model_label: str) -> str:
    """Markdown from `k_curve_metrics` output (with a baseline): per eval set and k, both
    checkpoints [95% interval] and the paired delta [interval], then the call per eval set."""
    sets = sorted({key.split("/")[2] for key in metrics if key.startswith(f"{PREFIX}/delta/")})
    if not sets:
        raise ValueError("k_curve_markdown needs paired k_curve/delta/... metrics (a k-curve with a baseline)")
    ks = sorted({int(key.rsplit("@", 1)[1]) for key in metrics
                 if key.startswith(f"{PREFIX}/delta/{sets[0]}/pass@") and key.rsplit("@", 1)[1].isdigit()})

    def number(value: float, sign: str) -> str:
        return f"{round(value, 3) + 0.0:{sign}.3f}"  # + 0.0: no "-0.000" from a rounding residue

    def cell(key: str, sign: str = "") -> str:
        return (f"{number(metrics[key], sign)} [{number(metrics[key + '_ci_low'], sign)}, "
                f"{number(metrics[key + '_ci_high'], sign)}]")

    lines = [f"| eval set | k | {baseline_label} | {model_label} | {model_label} - {baseline_label} | p |",
             "|---|---|---|---|---|---|"]
    for name in sets:
        for k in ks:
            delta = f"{PREFIX}/delta/{name}/pass@{k}"
            marker = " *" if metrics[delta + "_ci_low"] > 0 or metrics[delta + "_ci_high"] < 0 else ""
            lines.append(f"| {name} | {k} | {cell(f'{PREFIX}/baseline/{name}/pass@{k}')} | "
                         f"{cell(f'{PREFIX}/{name}/pass@{k}')} | {cell(delta, '+')}{marker} | "
                         f"{metrics[delta + '_p_value']:.3g} |")
    n = ks[-1]
    lines += ["", f"| eval set | pass@1 change | pass@{n} change | reading |", "|---|---|---|---|"]
    for name in sets:
        call = direction(metrics[f"{PREFIX}/delta/{name}/pass@{n}_ci_low"],
                         metrics[f"{PREFIX}/delta/{name}/pass@{n}_ci_high"])
        reading = {"narrowing": f"narrowing: pass@{n} falls",
                   "expanding": f"expanding: pass@{n} rises",
                   "no call": f"no call: the pass@{n} interval includes 0"}[call]
        lines.append(f"| {name} | {cell(f'{PREFIX}/delta/{name}/pass@1', '+')} | "
                     f"{cell(f'{PREFIX}/delta/{name}/pass@{n}', '+')} | {reading} |")
    num_problems = {name: metrics.get(f"{PREFIX}/{name}/num_problems") for name in sets}
    lines += ["", f"pass@k of {model_label} and {baseline_label} on the same problems and seeds (first problems of "
              f"each eval set{_sizes(num_problems)}); [lo, hi]: 95% interval over problems; *: the paired "
              f"delta's interval excludes 0. The reading uses pass@{n} only."]
    return "\n".join(lines)


def _sizes(num_problems: dict[str, float | None]) -> str:
    known = {name: int(v) for name, v in num_problems.items() if v is not None}
    return ": " + ", ".join(f"{name} {v}" for name, v in known.items()) if known else ""
