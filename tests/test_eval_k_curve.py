"""Sharpening or expansion (training/evaluation/k_curve.py): pass@k up to k = n against brute-force
enumeration of k-subsets, the ks, the metrics of a hand-computed case, and the direction call on
simulated evaluations where the truth is known."""

from __future__ import annotations

from itertools import combinations

import numpy as np
import pytest

from passband.training.evaluation.k_curve import (DIRECTION_CODES, Change, KCurveConfig, curve_ks, direction,
                                                  k_curve_markdown, k_curve_metrics, k_curve_subset,
                                                  problems_needed)
from passband.training.evaluation.paired import paired_delta_curve
from passband.training.evaluation.pass_at_k import pass_at_k, per_problem_pass_at_k
from passband.training.evaluation.report import build_report, compare_rows

N = 16


def brute_force_pass_at_k(n: int, c: int, k: int) -> float:
    """The definition itself: the fraction of k-subsets of n samples (the first c correct) that
    hold at least one correct sample."""
    subsets = list(combinations(range(n), k))
    return sum(any(i < c for i in subset) for subset in subsets) / len(subsets)


@pytest.mark.parametrize("c", [0, 1, 2, 5, 8, 15, 16])
def test_pass_at_k_up_to_n_matches_enumeration(c: int) -> None:
    for k in curve_ks(N):
        expected = brute_force_pass_at_k(N, c, k)
        assert pass_at_k(N, c, k) == pytest.approx(expected, abs=1e-12), (c, k)
        assert per_problem_pass_at_k(N, np.array([c]))[0, k - 1] == pytest.approx(expected, abs=1e-12), (c, k)


def test_curve_ks() -> None:
    assert curve_ks(16) == [1, 2, 4, 8, 16]
    assert curve_ks(20) == [1, 2, 4, 8, 16, 20]
    assert curve_ks(1) == [1]
    with pytest.raises(ValueError):
        curve_ks(0)


def test_config_refuses_a_short_curve() -> None:
    with pytest.raises(ValueError, match="greater than or equal to 16"):
        KCurveConfig(n=8)


def test_subset_keeps_the_first_problems_of_every_set() -> None:
    sets = {"a": [{"id": i} for i in range(5)], "b": [{"id": i} for i in range(2)]}
    assert k_curve_subset(sets, KCurveConfig(problems=3)) == {"a": [{"id": 0}, {"id": 1}, {"id": 2}],
                                                              "b": [{"id": 0}, {"id": 1}]}
    assert k_curve_subset(sets, KCurveConfig(problems=2, sets=["b"])) == {"b": [{"id": 0}, {"id": 1}]}
    with pytest.raises(ValueError, match=r"\['c'\], which are not eval sets"):
        k_curve_subset(sets, KCurveConfig(sets=["b", "c"]))


def test_direction_reads_the_interval_and_the_test() -> None:
    # pass@1 changes: above 0 (p 0.001), and including 0
    rose, flat = Change(0.05, 0.2, 0.001), Change(-0.05, 0.1, 0.4)
    assert direction(Change(-0.2, -0.01, 0.01), rose, 0.15) == "narrowing"
    assert direction(Change(0.01, 0.3, 0.01), rose, 0.15) == "expanding"
    assert direction(Change(0.01, 0.3, 0.01), flat, 0.15) == "expanding"  # pass@n rose: pass@1 is not asked
    assert direction(Change(-0.1, 0.1, 0.9), rose, 0.15) == "sharpening"  # a rise of 0.15 is excluded
    assert direction(Change(-0.1, 0.1, 0.9), flat, 0.15) == "no call"  # nothing rose: nothing was sharpened
    assert direction(Change(-0.1, 0.15, 0.5), rose, 0.15) == "no call"  # touching the margin is not excluding it
    assert direction(Change(-0.1, 0.2, 0.5), rose, 0.15) == "no call"
    assert direction(Change(0.0, 0.2, 0.05), rose, 0.15) == "no call"  # touching 0 is not excluding it
    assert direction(Change(-0.1, 0.2, 0.5), rose, 0.25) == "sharpening"
    # an interval off 0 that the sign-flip test does not back (p >= 0.05) is not a change, either way
    assert direction(Change(0.001, 0.059, 0.125), rose, 0.15) == "sharpening"
    assert direction(Change(0.001, 0.2, 0.125), rose, 0.15) == "no call"
    assert direction(Change(-0.2, -0.001, 0.125), rose, 0.15) == "sharpening"  # not narrowing
    assert direction(Change(-0.2, -0.001, 0.125), flat, 0.15) == "no call"
    assert direction(Change(-0.1, 0.1, 0.9), Change(0.01, 0.2, 0.06), 0.15) == "no call"


def test_a_handful_of_problems_gained_near_the_ceiling_is_not_expansion() -> None:
    # The shape measured on the demo's code set (docs/benchmarks.md): of 135 problems the base solves
    # 130 within 16 samples, RL those 130 and 4 more, and neither the last one. Per problem the pass@16 change is
    # 1 on 4 problems and 0 on the rest: mean 4/135 = 0.0296, sample sd sqrt((4 - 135 x 0.0296^2) / 134)
    # = 0.1700, t(134, 0.975) = 1.978, so the t interval is 0.0296 +- 1.978 x 0.1700 / sqrt(135)
    # = [+0.0007, +0.0586]: off 0. The sign-flip test moves only the 4 nonzero changes: |mean| is as
    # large as observed when all 4 share a sign, 2 of 16 patterns: p = 0.125.
    base = [0] * 4 + [0] + [5] * 130
    model = [16] * 4 + [0] + [12] * 130
    pass_1, pass_16 = paired_delta_curve(base, model, N, [1, N], num_permutations=4000)
    assert pass_16.delta == pytest.approx(4 / 135)
    assert pass_16.ci_low == pytest.approx(0.0007, abs=2e-4) and pass_16.ci_high == pytest.approx(0.0586, abs=2e-4)
    assert pass_16.p_value == pytest.approx(0.125, abs=0.02)  # 4000 random patterns: sd 0.005
    changes = [Change(d.ci_low, d.ci_high, d.p_value) for d in (pass_1, pass_16)]
    assert direction(changes[1], changes[0], 0.15) == "sharpening"  # not "expanding": the test does not back it


def test_problems_needed_scales_as_the_inverse_square_of_the_half_width() -> None:
    # 40 problems at +-0.2: +-0.1 needs 4 x 40; never fewer than were measured
    assert problems_needed(40, -0.1, 0.3, 0.1) == 160
    assert problems_needed(40, -0.1, 0.3, 0.15) == 72  # ceil(40 x (0.2 / 0.15)^2 = 71.1)
    assert problems_needed(40, -0.05, 0.05, 0.1) == 40


def rows(counts: list[int], n: int = N, task: str = "math") -> list[dict]:
    """Per-sample eval rows: problem i has counts[i] passing samples of n."""
    return [{"problem_id": f"p{i}", "task": task, "subdomain": "s", "sample_index": j,
             "status": "pass" if j < c else "fail", "score": float(j < c)}
            for i, c in enumerate(counts) for j in range(n)]


def test_metrics_of_a_hand_computed_case() -> None:
    # base: problem 0 passes 8 of 16, problem 1 never; model: problem 0 always, problem 1 never.
    # pass@1: base (0.5 + 0) / 2 = 0.25, model (1 + 0) / 2 = 0.5. pass@16: base (1 + 0) / 2 = 0.5 =
    # model. pass@2 of base on problem 0: 1 - C(8,2)/C(16,2) = 1 - 28/120.
    base, model = rows([8, 0]), rows([16, 0])
    deltas = compare_rows(base, model, num_permutations=100)
    metrics = k_curve_metrics(build_report(model), build_report(base), deltas, curve_ks(N), margin=0.15)
    assert metrics["k_curve/math/pass@1"] == pytest.approx(0.5)
    assert metrics["k_curve/baseline/math/pass@1"] == pytest.approx(0.25)
    assert metrics["k_curve/baseline/math/pass@2"] == pytest.approx((1 - 28 / 120) / 2)
    assert metrics["k_curve/delta/math/pass@1"] == pytest.approx(0.25)
    assert metrics["k_curve/delta/math/pass@16"] == pytest.approx(0.0)
    assert metrics["k_curve/math/direction"] == DIRECTION_CODES["no call"]
    assert metrics["k_curve/math/num_problems"] == 2.0 and metrics["k_curve/math/n"] == 16.0
    assert {key.rsplit("@", 1)[1] for key in metrics if key.startswith("k_curve/math/pass@")
            and key[-1].isdigit()} == {"1", "2", "4", "8", "16"}
    table = k_curve_markdown(metrics, "base", "rl")
    # pass@16 change 0 over 2 problems (one tie, one tie): [0, 0] lies below 0.15, and pass@1 rose by
    # 0.25, but over 2 problems its interval [0, 0.5] touches 0: nothing is called
    assert metrics["k_curve/delta/math/pass@1_ci_low"] <= 0.0
    assert "| math | 16 | 0.500 [" in table and "no call: pass@16 rises by less than 0.15, but pass@1 did not rise" in table


def test_the_reading_says_how_many_problems_would_call_it() -> None:
    # 40 problems, pass@16 change +0.05 [-0.15, +0.25] (+-0.2): it includes 0 and reaches the margin.
    # At +0.05, sharpening needs +-0.10 (0.15 - 0.05) and expanding +-0.05: the wider target, 0.10,
    # needs 40 x (0.2 / 0.1)^2 = 160 problems.
    metrics = {"k_curve/margin": 0.15, "k_curve/math/num_problems": 40.0, "k_curve/math/direction": 0.0}
    for k, (delta, low, high) in ((1, (0.2, 0.1, 0.3)), (16, (0.05, -0.15, 0.25))):
        key = f"k_curve/delta/math/pass@{k}"
        metrics |= {key: delta, key + "_ci_low": low, key + "_ci_high": high, key + "_p_value": 0.5}
        for label in ("", "baseline/"):
            metrics |= {f"k_curve/{label}math/pass@{k}": 0.5, f"k_curve/{label}math/pass@{k}_ci_low": 0.4,
                        f"k_curve/{label}math/pass@{k}_ci_high": 0.6}
    table = k_curve_markdown(metrics, "base", "rl")
    assert "no call: the pass@16 interval includes 0 and reaches +0.15; at this change about 160 problems" in table
    # an interval off 0 that the sign-flip test does not back: said, not read as "includes 0"
    metrics |= {"k_curve/delta/math/pass@16_ci_low": 0.001, "k_curve/delta/math/pass@16_p_value": 0.125}
    assert ("no call: the pass@16 interval excludes 0 but the sign-flip test does not (p = 0.125): too few "
            "problems changed, and it reaches +0.15 |") in k_curve_markdown(metrics, "base", "rl")
    metrics["k_curve/math/direction"] = DIRECTION_CODES["sharpening"]
    assert "sharpening: pass@1 rises and a pass@16 rise of 0.15 or more is excluded |" in k_curve_markdown(metrics, "base", "rl")
    # a baseline that solves 0.95 of the problems within 16 samples left at most 0.05 to reach: said
    metrics["k_curve/baseline/math/pass@16"] = 0.95
    assert ("excluded (the baseline already solves 0.950 within 16 samples: at most 0.050 was left to reach) |"
            in k_curve_markdown(metrics, "base", "rl"))


def simulated_counts(rates: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    return rng.binomial(N, rates)


def call(base_rates: np.ndarray, model_rates: np.ndarray, seed: int) -> tuple[str, float]:
    """(the call at k = n, the pass@1 delta) of one simulated paired evaluation."""
    rng = np.random.default_rng(seed)
    deltas = paired_delta_curve(simulated_counts(base_rates, rng), simulated_counts(model_rates, rng), N, [1, N],
                                num_permutations=200)
    changes = [Change(d.ci_low, d.ci_high, d.p_value) for d in deltas]
    return direction(changes[1], changes[0], 0.15), deltas[0].delta


def test_direction_on_simulated_evaluations() -> None:
    rng = np.random.default_rng(0)
    base = rng.beta(0.6, 1.2, size=120)  # many hard problems, a few easy ones: pass@16 << 1
    # sharpening that narrows: RL makes what the base solves often nearly certain and loses the
    # problems it solved only rarely
    narrowed = np.where(base > 0.25, 0.97, 0.0)
    # expanding: RL solves every problem more often, the base's rare ones included
    expanded = np.clip(base * 1.5 + 0.15, 0.0, 1.0)
    narrowing, pass1_gain = call(base, narrowed, seed=1)
    assert narrowing == "narrowing" and pass1_gain > 0
    expanding, pass1_gain = call(base, expanded, seed=2)
    assert expanding == "expanding" and pass1_gain > 0
    # sharpening that keeps pass@16: RL doubles the rate of every problem the base solves at all (so
    # the set of problems reached at k = 16 barely moves) and leaves the never-solved ones unsolved
    sharpened = np.where(base > 0.1, np.clip(base * 2.0, 0.0, 1.0), base)
    sharpening, pass1_gain = call(base, sharpened, seed=3)
    assert sharpening == "sharpening" and pass1_gain > 0
    # identical checkpoints: a call is a false positive; at 95% intervals about 5% of evaluations
    # make one (2.5% each way); measured over 300 simulated evaluations of 16 problems
    small = base[:16]
    false_calls = sum(call(small, small, seed=100 + i)[0] != "no call" for i in range(300))
    print(f"\nfalse calls with identical checkpoints: {false_calls} of 300")
    assert false_calls <= 30
