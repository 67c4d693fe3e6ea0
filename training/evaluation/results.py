"""The pipeline's results: base, SFT and RL side by side on the held-out sets, and the best checkpoint.

Input is each evaluation's flat metrics (training/evaluation/report.py names them
`{eval set}/{statistic}` with `_ci_low`/`_ci_high`, and `delta/{eval set}/{statistic}...` for the
paired change against the baseline); output is one table keyed `{checkpoint}/{name}`, its
Markdown and row forms, and the checkpoint with the highest mean statistic (docs/recipe.md section 8).
"""

from __future__ import annotations

from passband.training.evaluation.claims import ClaimsConfig, check_claims, format_claims
from passband.training.evaluation.k_curve import k_curve_markdown

CHECKPOINTS = ("base", "sft", "rl")
"""The checkpoints of a pipeline run, in table order; the first is the baseline of the deltas."""
CANDIDATES = ("sft", "rl")
SCORE_ERROR = "score_error"
"""A proof-grading verifier's mean |s' - s| (training/evaluation/grading.py), tabled beside pass@1."""
"""The checkpoints the best is chosen among (base is what they improve on)."""


def pass_at_1_table(metrics_by_checkpoint: dict[str, dict[str, float]], statistic: str) -> dict[str, float]:
    """Each evaluation's whole-set `{eval set}/{statistic}` metrics (with `_ci_low`/`_ci_high`) and
    its paired deltas against base (`delta/{eval set}/{statistic}...`), keyed `{checkpoint}/{name}`."""
    table = {}
    for label, metrics in metrics_by_checkpoint.items():
        for name, value in metrics.items():
            parts = name.split("/")
            whole_set = len(parts) == 2 or (len(parts) == 3 and parts[0] == "delta")
            if whole_set and parts[-1] in (statistic, f"{statistic}_ci_low", f"{statistic}_ci_high"):
                table[f"{label}/{name}"] = value
    return table


def headline_scores(table: dict[str, float], statistic: str, label: str) -> dict[str, float]:
    """{eval set: value} of one checkpoint's point estimates in a pass_at_1_table."""
    return {key.split("/")[1]: value for key, value in table.items()
            if key.startswith(f"{label}/") and key.count("/") == 2 and key.endswith(f"/{statistic}")}


def mean_score(table: dict[str, float], statistic: str, label: str) -> float:
    """One checkpoint's point estimates averaged over the eval sets (0 when it has none)."""
    values = list(headline_scores(table, statistic, label).values())
    return sum(values) / max(len(values), 1)


def best_checkpoint(table: dict[str, float], statistic: str) -> str:
    """The candidate with the highest mean statistic; SFT on a tie (it comes first)."""
    return max(CANDIDATES, key=lambda label: mean_score(table, statistic, label))


def table_rows(table: dict[str, float], statistic: str) -> list[dict[str, float | str | None]]:
    """One row per eval set: each checkpoint's value and interval, each delta against base (None
    where the table has no such entry)."""
    rows = []
    for name in sorted(headline_scores(table, statistic, CHECKPOINTS[0])):
        row: dict[str, float | str | None] = {"eval_set": name}
        for c in CHECKPOINTS:
            for suffix in ("", "_ci_low", "_ci_high"):
                row[f"{c}{suffix}"] = table.get(f"{c}/{name}/{statistic}{suffix}")
            if c != CHECKPOINTS[0]:
                for suffix in ("", "_ci_low", "_ci_high"):
                    row[f"{c}_delta{suffix}"] = table.get(f"{c}/delta/{name}/{statistic}{suffix}")
        rows.append(row)
    return rows


def format_table(table: dict[str, float], statistic: str) -> str:
    """Markdown: each checkpoint's value [95% interval] ("-" where it has none), then each delta
    against base [interval], with `*` where the delta's interval excludes 0."""
    sets = sorted({name for c in CHECKPOINTS for name in headline_scores(table, statistic, c)})
    deltas = [c for c in CHECKPOINTS if sets and f"{c}/delta/{sets[0]}/{statistic}" in table]
    header = [f"held-out {statistic}", *CHECKPOINTS, *(f"{c} - base" for c in deltas)]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for name in sets:
        cells = [name]
        for c in CHECKPOINTS:
            key = f"{c}/{name}/{statistic}"
            cells.append(f"{table[key]:.3f} [{table[key + '_ci_low']:.3f}, {table[key + '_ci_high']:.3f}]"
                         if key in table else "-")
        for c in deltas:
            key = f"{c}/delta/{name}/{statistic}"
            low, high = table[key + "_ci_low"], table[key + "_ci_high"]
            cells.append(f"{table[key]:+.3f} [{low:+.3f}, {high:+.3f}]{' *' if low > 0 or high < 0 else ''}")
        lines.append("| " + " | ".join(cells) + " |")
    if deltas:
        lines.append("\n[lo, hi]: 95% interval over problems; *: the paired delta's interval excludes 0.")
    return "\n".join(lines)


def score_error_markdown(metrics_by_checkpoint: dict[str, dict[str, float]]) -> tuple[str, dict[str, float]]:
    """(A verifier's mean |s' - s| per checkpoint with its interval, and the share of samples whose
    score could be read, as Markdown; the same as metrics `{checkpoint}/{set}/score_error...` and
    `{checkpoint}/{set}/parsed_rate`). Empty when no eval set is a proof-grading one."""
    table = pass_at_1_table(metrics_by_checkpoint, SCORE_ERROR)
    parsed = {f"{label}/{name}": value for label, metrics in metrics_by_checkpoint.items()
              for name, value in metrics.items() if name.count("/") == 1 and name.endswith("/parsed_rate")}
    if not parsed:
        return "", {}
    sets = sorted({key.split("/")[1] for key in parsed})
    rates = "; ".join(f"{name}: " + ", ".join(f"{c} {parsed[f'{c}/{name}/parsed_rate']:.3f}" for c in CHECKPOINTS
                                              if f"{c}/{name}/parsed_rate" in parsed) for name in sets)
    return (f"### Verifier score error: mean |s' - s| over the samples whose score could be read\n\n"
            f"{format_table(table, SCORE_ERROR)}\n\nShare of samples whose score could be read: {rates}.",
            {**table, **parsed})


def results_markdown(table: dict[str, float], statistic: str, k_curve: dict[str, float] | None,
                     claims: ClaimsConfig | None) -> tuple[str, dict[str, float]]:
    """(The results: the table, RL's k-curve against base when given, the claims checked when given;
    `claims/held` and `claims/checked` as metrics, {} without claims)."""
    results = format_table(table, statistic)
    if k_curve is not None:
        results += "\n\n### Sharpening or expansion: pass@k up to k = n\n\n" + k_curve_markdown(k_curve, "base", "rl")
    if claims is None:
        return results, {}
    sets = sorted(headline_scores(table, statistic, CHECKPOINTS[0]))
    checked = check_claims(table, statistic, sets, list(CHECKPOINTS), claims)
    results += "\n\n### Claims stated before the run\n\n" + format_claims(checked, claims.spread_check)
    return results, {"claims/held": float(sum(c.holds for c in checked)), "claims/checked": float(len(checked))}
