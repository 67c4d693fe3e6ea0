"""EvalReport figures against values worked out by hand from the crafted rows below."""

import pytest

from passband.training.evaluation.report import build_report, pass_at_k_curves, sampling_efficiency_gap


def _rows(task, problem_id, subdomain, statuses, scores=None):
    scores = scores or [1.0 if s == "pass" else 0.0 for s in statuses]
    return [
        {"problem_id": problem_id, "task": task, "subdomain": subdomain, "sample_index": i,
         "status": status, "score": score}
        for i, (status, score) in enumerate(zip(statuses, scores))
    ]


def _math_rows():
    # p1 (algebra): c=1 of n=4, one unparsable. p2 (algebra): c=4. p3 (geometry): c=0, two unparsable.
    return (
        _rows("math", "p1", "algebra", ["pass", "fail", "unparsable", "fail"])
        + _rows("math", "p2", "algebra", ["pass"] * 4)
        + _rows("math", "p3", "geometry", ["fail", "unparsable", "unparsable", "timeout"])
    )


def test_two_problems_pass_at_k_by_hand():
    rows = (_rows("math", "a", "algebra", ["fail", "pass", "fail", "fail"])
            + _rows("math", "b", "algebra", ["pass"] * 4))
    stats = build_report(rows).tasks["math"]
    assert stats.num_problems == 2 and stats.n == 4
    # c=1, n=4: pass@1 = 1/4; pass@2 = 1 - C(3,2)/C(4,2) = 1 - 3/6 = 1/2; pass@3 = 1 - C(3,3)/C(4,3) = 3/4;
    # pass@4 = 1. c=4: 1 at every k.
    assert stats.pass_at_k == pytest.approx([(0.25 + 1) / 2, (0.5 + 1) / 2, (0.75 + 1) / 2, 1.0])
    assert stats.score_mean == pytest.approx(5 / 8)
    assert stats.unparsable_frac == 0.0


def test_task_and_subdomain_splits_by_hand():
    report = build_report(_math_rows() + _rows("code", "c1", "strings", ["pass", "pass"], [1.0, 1.0])
                          + _rows("code", "c2", "strings", ["error", "fail"], [0.0, 0.5]))
    math = report.tasks["math"]
    assert (math.num_problems, math.n) == (3, 4)
    # Per problem pass@1 = c/4: 1/4, 1, 0. pass@2: 1/2, 1, 0. pass@3: 3/4, 1, 0. pass@4: 1, 1, 0.
    assert math.pass_at_k == pytest.approx([1.25 / 3, 1.5 / 3, 1.75 / 3, 2 / 3])
    assert math.score_mean == pytest.approx(5 / 12)
    assert math.unparsable_frac == pytest.approx(3 / 12)

    algebra = report.subdomains[("math", "algebra")]
    assert (algebra.num_problems, algebra.n) == (2, 4)
    assert algebra.pass_at_k == pytest.approx([1.25 / 2, 1.5 / 2, 1.75 / 2, 1.0])
    assert algebra.unparsable_frac == pytest.approx(1 / 8)
    geometry = report.subdomains[("math", "geometry")]
    assert geometry.pass_at_k == [0.0, 0.0, 0.0, 0.0]
    assert geometry.unparsable_frac == pytest.approx(2 / 4)
    assert geometry.score_mean == 0.0

    code = report.tasks["code"]
    assert (code.num_problems, code.n) == (2, 2)
    # c1: c=2 of 2 -> 1, 1. c2: c=0 -> 0, 0 (a partial score of 0.5 is not a pass).
    assert code.pass_at_k == pytest.approx([0.5, 0.5])
    assert code.score_mean == pytest.approx(2.5 / 4)
    assert set(report.subdomains) == {("math", "algebra"), ("math", "geometry"), ("code", "strings")}


def test_metric_names_and_table_rows():
    report = build_report(_math_rows())
    metrics = report.metrics()
    assert metrics["math/pass@1"] == pytest.approx(1.25 / 3)
    assert metrics["math/pass@4"] == pytest.approx(2 / 3)
    assert metrics["math/algebra/pass@2"] == pytest.approx(0.75)
    assert metrics["math/geometry/unparsable_frac"] == pytest.approx(0.5)
    assert metrics["math/unparsable_frac"] == pytest.approx(0.25)
    assert metrics["math/score_mean"] == pytest.approx(5 / 12)
    assert metrics["math/num_problems"] == 3 and metrics["math/n"] == 4
    # 3 groups (math, math/algebra, math/geometry) x (4 x (pass@k, ci_low, ci_high) + 4 other figures).
    assert len(metrics) == 3 * 16
    # Every interval holds its estimate; math pass@4 is 2 of 3 problems solved (Bernoulli outcomes).
    for key in [name for name in metrics if name.endswith("_ci_low")]:
        estimate = metrics[key.removesuffix("_ci_low")]
        assert metrics[key] <= estimate <= metrics[key.replace("_ci_low", "_ci_high")]
    assert metrics["math/pass@4_ci_low"] < 2 / 3 < metrics["math/pass@4_ci_high"]

    table = report.table()
    assert len(table) == 3 * 4  # 3 groups x k = 1..4
    whole = [row for row in table if row["subdomain"] is None]
    assert [row["k"] for row in whole] == [1, 2, 3, 4]
    interval = (report.tasks["math"].ci_low[1], report.tasks["math"].ci_high[1])
    assert whole[1] == {"task": "math", "subdomain": None, "k": 2, "pass_at_k": pytest.approx(0.5),
                        "ci_low": interval[0], "ci_high": interval[1],
                        "num_problems": 3, "n": 4, "score_mean": pytest.approx(5 / 12),
                        "unparsable_frac": pytest.approx(0.25)}
    import pyarrow as pa

    assert pa.Table.from_pylist(table).num_rows == 12  # the rows form a typed table


def test_sampling_efficiency_gap_by_hand():
    base = build_report(_math_rows() + _rows("code", "c1", "strings", ["fail", "pass"]))
    # Candidate: math p1..p3 pass@1 = 1, 1, 1/2 -> 5/6; ifeval is only in the candidate.
    candidate = build_report(
        _rows("math", "p1", "algebra", ["pass"] * 2) + _rows("math", "p2", "algebra", ["pass"] * 2)
        + _rows("math", "p3", "geometry", ["pass", "fail"]) + _rows("ifeval", "i1", "format", ["pass"])
    )
    gap = sampling_efficiency_gap(base, candidate, k=2)
    assert gap == {"math": pytest.approx(1.5 / 3 - 5 / 6)}
    assert sampling_efficiency_gap(base, candidate, k=4)["math"] == pytest.approx(2 / 3 - 5 / 6)
    with pytest.raises(ValueError, match="k=5 exceeds the base report's n=4"):
        sampling_efficiency_gap(base, candidate, k=5)
    with pytest.raises(ValueError, match="k must be >= 1"):
        sampling_efficiency_gap(base, candidate, k=0)


def test_curves_keyed_task_then_label():
    base = build_report(_rows("math", "a", "x", ["pass", "fail"]))
    rl = build_report(_rows("math", "a", "x", ["pass", "pass"]) + _rows("code", "b", "y", ["fail", "fail"]))
    assert pass_at_k_curves({"base": base, "rl": rl}) == {
        "math": {"base": [0.5, 1.0], "rl": [1.0, 1.0]}, "code": {"rl": [0.0, 0.0]}}


def test_different_n_names_the_problem():
    rows = _rows("math", "a", "x", ["pass"] * 4) + _rows("math", "short", "x", ["pass"] * 3)
    with pytest.raises(ValueError, match="problem 'short' has 3 samples but problem 'a' has 4"):
        build_report(rows)


@pytest.mark.parametrize(
    "change, message",
    [
        ({"status": "ok"}, "row 1: status 'ok'"),
        ({"score": 1.5}, "row 1: score 1.5"),
        ({"subdomain": "other"}, "row 1: problem 'a' of task 'math' has subdomain 'other'"),
        ({"sample_index": 0}, "row 1: problem 'a' of task 'math' repeats sample_index 0"),
        ({"subdomain": None}, "row 1: subdomain must be a non-empty string"),
    ],
)
def test_bad_rows_are_refused_by_index(change, message):
    rows = _rows("math", "a", "x", ["pass", "fail"])
    rows[1] = {**rows[1], **change}
    with pytest.raises(ValueError, match=message):
        build_report(rows)


def test_missing_field_and_empty_input():
    rows = _rows("math", "a", "x", ["pass"])
    del rows[0]["score"]
    with pytest.raises(ValueError, match=r"row 0: missing field\(s\) \['score'\]"):
        build_report(rows)
    with pytest.raises(ValueError, match="at least one eval row"):
        build_report([])
