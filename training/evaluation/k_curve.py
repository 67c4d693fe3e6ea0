"""Sharpening or expansion: pass@k up to k = n on a subset, model against baseline (docs/recipe.md
section 8; issue 17).

RL raises pass@1. It can do so by narrowing the distribution onto answers the base model already
found in some of its samples (pass@k at large k stays or falls: the base with many tries solves as
much or more), or by expanding what the model can reach (pass@large-k rises too). Telling them
apart needs many samples per problem, so it is measured on a subset: the first `problems` problems
of every eval set, `n` samples each, the same problems and per-request seeds for both checkpoints.

The call reads the paired delta at the largest k (k = n), one test at one k fixed in advance
rather than a search over k for a significant one. A change "rises" (or "falls") when its paired
interval lies wholly above (below) 0 *and* the sign-flip test agrees (p < 1 - CONFIDENCE). At
k = n each problem's change is -1, 0 or +1, and near the ceiling only a handful are not 0: then the
t interval, a normal approximation, can exclude 0 where the exact test does not. Measured: 4 code
problems gained and none lost of 135 gave [+0.001, +0.059] beside p = 0.125 (docs/benchmarks.md).
- "expanding" when pass@n rises;
- "narrowing" when it falls;
- "sharpening" when pass@1 rises and the pass@n interval lies below `margin`: pass@n may have
  moved a little either way, but a rise of `margin` or more is excluded, so what RL gained it
  gained by making answers the base already reached more likely;
- "no call" otherwise, with why: the pass@n interval is too wide to exclude a rise of `margin`, or
  pass@1 did not rise. `problems_needed` says about how many problems would make it narrow enough.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

from pydantic import BaseModel, ConfigDict, Field

if TYPE_CHECKING:  # the config is imported by flow configs at CLI start-up: no numpy there
    from passband.training.evaluation.report import EvalReport

PREFIX = "k_curve"
Direction = Literal["narrowing", "sharpening", "expanding", "no call"]
DIRECTION_CODES: dict[str, float] = {"narrowing": -1.0, "sharpening": -0.5, "no call": 0.0, "expanding": 1.0}
"""The call as a metric value (MLflow metrics are numbers)."""


class KCurveConfig(BaseModel):
    """The pass@k-curve subset: few problems, many samples each."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    problems: int = Field(16, ge=2)
    """The first N problems of every eval set (all of a smaller set). Intervals are over problems:
    per problem pass@n is about 0 or 1, so the paired change's half-width is about
    2 sqrt((b + c - (b - c)^2) / N), b and c the shares of problems gained and lost. Size N so that
    a change of `margin` would exclude 0 (the report's "problems needed" says what a run asked for)."""
    n: int = Field(16, ge=16)
    """Samples per problem: pass@k is reported for k = 1, 2, 4, ..., n. At least 16, so that
    pass@large-k reaches past where one sample's luck decides it."""
    sets: list[str] | None = None
    """The eval sets to draw it on (None: all); a set no checkpoint solves (HumanEval at 135M)
    only costs time."""
    margin: float = Field(0.15, gt=0.0, le=1.0)
    """The smallest pass@n change the curve is sized to see. "Sharpening" needs the pass@n change's
    interval to lie below it (a rise this large is excluded) while pass@1 rose; "no call" reports how
    many problems would narrow the interval to it."""


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


class Change(NamedTuple):
    """A paired change model - baseline at one k: its interval and its sign-flip p-value."""

    low: float
    high: float
    p_value: float

    def rises(self) -> bool:
        """The interval lies above 0 and the sign-flip test rejects no change."""
        return self.low > 0.0 and _significant(self.p_value)

    def falls(self) -> bool:
        """The interval lies below 0 and the sign-flip test rejects no change."""
        return self.high < 0.0 and _significant(self.p_value)


def _significant(p_value: float) -> bool:
    # imported here: intervals imports numpy, which the config's import at CLI start-up avoids
    from passband.training.evaluation.intervals import CONFIDENCE

    return p_value < 1.0 - CONFIDENCE


def direction(pass_n: Change, pass_1: Change, margin: float) -> Direction:
    """The call from the paired changes model - baseline at pass@n and at pass@1 (see the module
    docstring)."""
    if pass_n.falls():
        return "narrowing"
    if pass_n.rises():
        return "expanding"
    if pass_1.rises() and pass_n.high < margin:
        return "sharpening"
    return "no call"


def problems_needed(num_problems: int, ci_low: float, ci_high: float, target_half_width: float) -> int:
    """About how many problems would narrow an interval over `num_problems` problems, of half-width
    (high - low) / 2, to `target_half_width`: half-widths shrink as 1 / sqrt(problems) at a fixed
    per-problem spread."""
    half_width = (ci_high - ci_low) / 2
    # rounded first: 0.15 - 0.05 is 0.0999..., which would turn an exact 160 into 161
    return max(num_problems, math.ceil(round(num_problems * (half_width / target_half_width) ** 2, 6)))


def k_curve_metrics(model: EvalReport, baseline: EvalReport | None, deltas: list[dict], ks: list[int],
                    margin: float) -> dict[str, float]:
    """Flat metrics of the curve at `ks`: `k_curve/<set>/pass@k` (+ `_ci_low`, `_ci_high`), the same
    under `k_curve/baseline/`, `k_curve/<set>/num_problems` and `/n`, the paired `k_curve/delta/<set>/pass@k` (+ interval, `_p_value`) from
    `deltas` (report.compare_rows of baseline then model, grouped by eval set), and, at the largest
    k, `k_curve/<set>/direction` (DIRECTION_CODES) under `margin` (also logged, `k_curve/margin`)."""
    metrics: dict[str, float] = {f"{PREFIX}/margin": margin} if baseline is not None else {}
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
    changes = {(row["task"], row["k"]): Change(row["ci_low"], row["ci_high"], row["p_value"]) for row in deltas}
    for row in deltas:
        if row["k"] in ks:
            key = f"{PREFIX}/delta/{row['task']}/pass@{row['k']}"
            metrics |= {key: row["delta"], f"{key}_ci_low": row["ci_low"], f"{key}_ci_high": row["ci_high"],
                        f"{key}_p_value": row["p_value"]}
        if row["k"] == max(ks):
            call = direction(changes[row["task"], max(ks)], changes[row["task"], 1], margin)
            metrics[f"{PREFIX}/{row['task']}/direction"] = DIRECTION_CODES[call]
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
        lines.append(f"| {name} | {cell(f'{PREFIX}/delta/{name}/pass@1', '+')} | "
                     f"{cell(f'{PREFIX}/delta/{name}/pass@{n}', '+')} | {_reading(metrics, name, n)} |")
    num_problems = {name: metrics.get(f"{PREFIX}/{name}/num_problems") for name in sets}
    lines += ["", f"pass@k of {model_label} and {baseline_label} on the same problems and seeds (first problems of "
              f"each eval set{_sizes(num_problems)}); [lo, hi]: 95% interval over problems; *: the paired "
              f"delta's interval excludes 0. The reading uses the pass@{n} change, and pass@1's for sharpening."]
    return "\n".join(lines)


def _sizes(num_problems: dict[str, float | None]) -> str:
    known = {name: int(v) for name, v in num_problems.items() if v is not None}
    return ": " + ", ".join(f"{name} {v}" for name, v in known.items()) if known else ""


def _reading(metrics: dict[str, float], name: str, n: int) -> str:
    """The call on one eval set in words; for "no call", why, and about how many problems would
    make one at the change measured."""
    margin = metrics[f"{PREFIX}/margin"]
    code = metrics[f"{PREFIX}/{name}/direction"]
    call = next(c for c, value in DIRECTION_CODES.items() if value == code)
    if call == "sharpening":
        return f"sharpening: pass@1 rises and a pass@{n} rise of {margin:g} or more is excluded{_headroom(metrics, name, n, margin)}"
    if call != "no call":
        return {"narrowing": f"narrowing: pass@{n} falls", "expanding": f"expanding: pass@{n} rises"}[call]
    key = f"{PREFIX}/delta/{name}/pass@{n}"
    change, low, high = metrics[key], metrics[key + "_ci_low"], metrics[key + "_ci_high"]
    if high < margin:  # narrow enough, but pass@1 did not rise: nothing was sharpened
        return f"no call: pass@{n} rises by less than {margin:g}, but pass@1 did not rise"
    if low > 0.0:  # the t interval lies above 0, the exact test disagrees (one below 0 lies below margin too)
        return (f"no call: the pass@{n} interval excludes 0 but the sign-flip test does not "
                f"(p = {metrics[key + '_p_value']:.3g}): too few problems changed, and it reaches +{margin:g}")
    # at this change, sharpening needs the half-width under margin - change, expanding or narrowing under |change|
    target = max(abs(change), margin - change)
    needed = problems_needed(int(metrics[f"{PREFIX}/{name}/num_problems"]), low, high, target)
    return (f"no call: the pass@{n} interval includes 0 and reaches +{margin:g}; "
            f"at this change about {needed} problems would make a call")


def _headroom(metrics: dict[str, float], name: str, n: int, margin: float) -> str:
    """Why a rise of `margin` was excluded when the baseline left no room for it: it already solves
    more than 1 - margin of the problems within n samples, so RL could not have reached many new
    ones (the sharpening reading, but one the ceiling makes as much as the data)."""
    reached = metrics[f"{PREFIX}/baseline/{name}/pass@{n}"]
    if reached <= 1.0 - margin:
        return ""
    return f" (the baseline already solves {reached:.3f} within {n} samples: at most {1.0 - reached:.3f} was left to reach)"
