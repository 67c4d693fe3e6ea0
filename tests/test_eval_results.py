"""The pipeline's results table and the best checkpoint (training/evaluation/results.py), on metrics
written here with values chosen so every entry can be checked by hand."""

from __future__ import annotations

from passband.training.evaluation.claims import ClaimsConfig
from passband.training.evaluation.results import (best_checkpoint, format_table, headline_scores, mean_score,
                                                  pass_at_1_table, results_markdown, table_rows)


def _set(value: float, low: float, high: float, name: str) -> dict[str, float]:
    return {name: value, f"{name}_ci_low": low, f"{name}_ci_high": high}


EVALUATIONS = {
    "base": {**_set(0.25, 0.125, 0.5, "math/pass@1"), **_set(0.5, 0.25, 0.75, "code/pass@1"),
             "math/pass@2": 0.375, "math/algebra/pass@1": 0.0, "mean_length": 12.0},
    "sft": {**_set(0.5, 0.25, 0.75, "math/pass@1"), **_set(0.5, 0.25, 0.75, "code/pass@1"),
            **_set(0.25, 0.0625, 0.5, "delta/math/pass@1"), **_set(0.0, -0.25, 0.25, "delta/code/pass@1"),
            "delta/math/pass@1_p_value": 0.04, "baseline/math/pass@1": 0.25},
    "rl": {**_set(0.75, 0.5, 0.875, "math/pass@1"), **_set(0.375, 0.125, 0.625, "code/pass@1"),
           **_set(0.5, 0.25, 0.75, "delta/math/pass@1"), **_set(-0.125, -0.375, 0.125, "delta/code/pass@1")},
}


def test_the_table_keeps_whole_set_statistics_and_deltas_only() -> None:
    table = pass_at_1_table(EVALUATIONS, "pass@1")
    # 2 sets x 3 entries per checkpoint, + 2 deltas x 3 for sft and rl; no pass@2, sub-domain, p-value,
    # baseline/ or length entry
    assert len(table) == 3 * 6 + 2 * 6
    assert table["rl/delta/code/pass@1_ci_low"] == -0.375
    assert "base/math/pass@2" not in table and "base/math/algebra/pass@1" not in table
    assert "sft/delta/math/pass@1_p_value" not in table and "sft/baseline/math/pass@1" not in table
    assert headline_scores(table, "pass@1", "rl") == {"math": 0.75, "code": 0.375}


def test_the_best_checkpoint_has_the_highest_mean() -> None:
    table = pass_at_1_table(EVALUATIONS, "pass@1")
    # sft: (0.5 + 0.5) / 2 = 0.5; rl: (0.75 + 0.375) / 2 = 0.5625
    assert mean_score(table, "pass@1", "sft") == 0.5
    assert mean_score(table, "pass@1", "rl") == 0.5625
    assert best_checkpoint(table, "pass@1") == "rl"
    tied = {**table, "rl/code/pass@1": 0.25}  # rl: (0.75 + 0.25) / 2 = 0.5, a tie: SFT comes first
    assert best_checkpoint(tied, "pass@1") == "sft"
    assert mean_score({}, "pass@1", "rl") == 0.0


def test_rows_and_markdown() -> None:
    table = pass_at_1_table(EVALUATIONS, "pass@1")
    rows = table_rows(table, "pass@1")
    assert [row["eval_set"] for row in rows] == ["code", "math"]
    assert rows[1]["rl"] == 0.75 and rows[1]["rl_delta_ci_high"] == 0.75 and rows[1]["base_ci_low"] == 0.125
    assert "base_delta" not in rows[0]
    assert format_table(table, "pass@1").splitlines() == [
        "| held-out pass@1 | base | sft | rl | sft - base | rl - base |",
        "|---|---|---|---|---|---|",
        "| code | 0.500 [0.250, 0.750] | 0.500 [0.250, 0.750] | 0.375 [0.125, 0.625] | +0.000 [-0.250, +0.250] "
        "| -0.125 [-0.375, +0.125] |",
        "| math | 0.250 [0.125, 0.500] | 0.500 [0.250, 0.750] | 0.750 [0.500, 0.875] | +0.250 [+0.062, +0.500] * "
        "| +0.500 [+0.250, +0.750] * |",
        "",
        "[lo, hi]: 95% interval over problems; *: the paired delta's interval excludes 0.",
    ]


def test_claims_are_counted() -> None:
    table = pass_at_1_table(EVALUATIONS, "pass@1")
    results, metrics = results_markdown(table, "pass@1", None, None)
    assert results == format_table(table, "pass@1") and metrics == {}
    # half-widths (high - low) / 2: 0.1875 or 0.25 on every set and checkpoint, so +-0.25 holds 6 of 6;
    # rl gains on math ([0.25, 0.75] > 0) holds, on code ([-0.375, 0.125]) does not: 1 of 2;
    # no regression (every delta's high >= 0) for sft and rl on both sets: 4 of 4
    claims = ClaimsConfig(max_half_width=0.25, rl_gains=["math", "code"])
    results, metrics = results_markdown(table, "pass@1", None, claims)
    assert results.endswith("11 of 12 claims hold.\nNot checked against a spread of training seeds: these intervals "
                            "say how precisely this run measured its checkpoints, not where a rerun lands "
                            "(scripts/seed_spread.py).")
    assert metrics == {"claims/held": 11.0, "claims/checked": 12.0}
    checked = claims.model_copy(update={"spread_check": "held in each of training seeds 0, 1, 2"})
    results, _ = results_markdown(table, "pass@1", None, checked)
    assert results.endswith("11 of 12 claims hold.\nChecked against a spread of training seeds: held in each of "
                            "training seeds 0, 1, 2.")


def test_k_curve_entries_are_the_k_curve_metrics() -> None:
    from passband.training.evaluation.k_curve import k_curve_entries

    metrics = {"k_curve/math/pass@4": 0.5, "k_curve/delta/math/pass@1": 0.125, "math/pass@1": 0.25, "k_curves": 1.0}
    assert k_curve_entries(metrics) == {"k_curve/math/pass@4": 0.5, "k_curve/delta/math/pass@1": 0.125}
