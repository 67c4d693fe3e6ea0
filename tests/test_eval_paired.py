"""Paired pass@k deltas: identical inputs, an exact small case by hand, and simulated rejection rates."""

import math

import numpy as np
import pytest

from passband.training.evaluation.paired import paired_delta, paired_delta_curve
from passband.training.evaluation.report import compare_rows, delta_markdown


def test_identical_inputs_give_zero_delta_and_p_one():
    counts = np.array([0, 1, 3, 4, 2, 2, 1, 0, 4, 3, 1, 2, 0, 4, 1, 3, 2, 2, 1, 4])  # 20 problems: random flips
    for k in (1, 4):
        d = paired_delta(counts, counts, 4, k)
        assert (d.delta, d.ci_low, d.ci_high, d.p_value) == (0.0, 0.0, 0.0, 1.0)
        assert not d.excludes_zero
    assert paired_delta(counts[:5], counts[:5], 4, 2).p_value == 1.0  # 5 problems: all 32 patterns


def test_small_case_by_hand():
    # n = 4; a solves 0, 1, 1 of 4, b solves 2, 2, 2. pass@1 differences d = 0.5, 0.25, 0.25.
    d1, d2 = paired_delta_curve(np.array([0, 1, 1]), np.array([2, 2, 2]), 4, [1, 2])
    assert d1.delta == pytest.approx(1 / 3)
    assert (d1.pass_at_k_a, d1.pass_at_k_b) == pytest.approx((1 / 6, 1 / 2))
    # All 8 sign patterns: sums 1, .5, .5, 0, 0, -.5, -.5, -1; |sum| >= 1 twice -> p = 2/8.
    assert d1.p_value == 0.25
    # s = sqrt(1/48), t_{2, 0.975} = 4.30265273: half width 4.30265273 * sqrt(1/48) / sqrt(3).
    half = 4.30265273 * math.sqrt(1 / 48) / math.sqrt(3)
    assert (d1.ci_low, d1.ci_high) == pytest.approx((1 / 3 - half, 1 / 3 + half), abs=1e-8)
    assert not d1.excludes_zero
    # pass@2: c = 0 -> 0, 1 -> 1/2, 2 -> 1 - C(2,2)/C(4,2) = 5/6; d = 5/6, 1/3, 1/3; same patterns -> 1/4.
    assert d2.delta == pytest.approx((5 / 6 + 2 / 3) / 3)
    assert d2.p_value == 0.25


def test_different_n_per_side_and_bad_k():
    # a: n = 2, b: n = 4 on two problems; pass@1 = c / n.
    d = paired_delta(np.array([1, 2]), np.array([1, 4]), 2, 1, n_b=4)
    assert d.delta == pytest.approx(((0.25 - 0.5) + (1 - 1)) / 2)
    with pytest.raises(ValueError, match="k <= min"):
        paired_delta(np.array([1, 2]), np.array([1, 4]), 2, 3, n_b=4)


def _simulate(true_shift, repetitions, num_problems=48, n=4, seed=5):
    rng = np.random.default_rng(seed)
    results = []
    for repetition in range(repetitions):
        rates_a = rng.beta(1.0, 1.0, size=num_problems)
        rates_b = np.clip(rates_a + true_shift, 0.0, 1.0)
        d = paired_delta(rng.binomial(n, rates_a), rng.binomial(n, rates_b), n, 1,
                         num_permutations=1000, seed=repetition)
        results.append(d)
    return results


def test_no_true_delta_rejects_about_five_percent():
    results = _simulate(0.0, repetitions=400)
    # 400 tests at 5%: mean 20 rejections, sd 4.4.
    assert 8 <= sum(d.p_value < 0.05 for d in results) <= 34
    assert 8 <= sum(d.excludes_zero for d in results) <= 34


def test_large_true_delta_is_found():
    results = _simulate(0.3, repetitions=20)
    assert all(d.p_value < 0.01 and d.excludes_zero and d.delta > 0 for d in results)


def _rows(task, problem_id, statuses):
    return [{"problem_id": problem_id, "task": task, "subdomain": "x", "sample_index": i, "status": s,
             "score": float(s == "pass")} for i, s in enumerate(statuses)]


def test_compare_rows_pairs_by_problem_id():
    # Same problems as the hand case above, rows in a different order in b.
    rows_a = (_rows("math", "p1", ["fail"] * 4) + _rows("math", "p2", ["pass"] + ["fail"] * 3)
              + _rows("math", "p3", ["fail", "pass", "fail", "fail"]) + _rows("code", "c1", ["pass", "fail"]))
    rows_b = (_rows("math", "p3", ["pass", "pass", "fail", "fail"]) + _rows("math", "p1", ["fail", "pass"] * 2)
              + _rows("math", "p2", ["pass", "pass", "fail", "fail"]))
    table = compare_rows(rows_a, rows_b)
    assert [(row["task"], row["k"]) for row in table] == [("math", 1), ("math", 2), ("math", 3), ("math", 4)]
    first = table[0]
    assert first["delta"] == pytest.approx(1 / 3) and first["p_value"] == 0.25
    assert (first["n_a"], first["n_b"], first["num_problems"]) == (4, 4, 3)
    assert first["excludes_zero"] is False
    text = delta_markdown(table, "sft", "rl", ks=[1])
    assert "| math | 1 | 0.167 | 0.500 | +0.333 [" in text and text.count("| math |") == 1
    with pytest.raises(ValueError, match=r"only in a: \['p2'\]"):
        compare_rows(rows_a, [row for row in rows_b if row["problem_id"] != "p2"])
