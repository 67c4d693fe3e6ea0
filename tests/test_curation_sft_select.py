"""SFT selection rule (0 < npass < n, verified passing trajectories), verdict combiner, perplexity cap."""

import math

import pytest

from passband.curation.sft_select import combine_verdicts, filter_verified, perplexity_cap, select_sft

ALL_PASS = {"verdict_consistency": "pass", "verdict_execution": "not_applicable", "verdict_math": "pass", "verdict_structure": "pass"}


def sample(status, **verdicts):
    return {"completion": f"... {status}", "status": status, **ALL_PASS, **verdicts}


def test_selection_keeps_only_partially_solved_problems_and_their_verified_passes():
    problems = [
        {"id": "none", "task": "math", "samples": [sample("fail")] * 4},
        {"id": "all", "task": "math", "samples": [sample("pass")] * 4},
        {
            "id": "some",
            "task": "math",
            "samples": [sample("pass"), sample("fail"), sample("pass", verdict_math="fail"), sample("unparsable")],
        },
    ]
    kept, removed = select_sft(problems, num_samples=4)
    assert len(kept) == 1
    assert kept[0]["id"] == "some" and kept[0]["status"] == "pass"
    assert (kept[0]["npass"], kept[0]["num_samples"]) == (2, 4)
    assert "samples" not in kept[0]
    assert [(row["id"], row["removed_reason"]) for row in removed] == [
        ("none", "all_failed npass=0/4"),
        ("all", "all_passed npass=4/4"),
        ("some", "status=fail"),
        ("some", "status=unparsable"),
        ("some", "failed_checks:math"),
    ]


def test_selection_quarantines_wrong_sample_counts():
    problems = [{"id": "short", "samples": [sample("pass"), sample("fail")]}, {"id": "empty", "samples": []}]
    kept, removed = select_sft(problems, num_samples=16)
    assert kept == []
    assert [row["removed_reason"] for row in removed] == ["expected 16 samples, got 2", "no samples"]


def test_combine_verdicts_with_not_applicable_checks():
    assert combine_verdicts({"task": "math", **ALL_PASS}) == (True, [])
    code = {"task": "code", **ALL_PASS, "verdict_execution": "pass", "verdict_math": "not_applicable"}
    assert combine_verdicts(code) == (True, [])
    # A check that applies to the task may not be skipped.
    assert combine_verdicts({**code, "verdict_execution": "not_applicable"}) == (False, ["execution:not_applicable"])
    assert combine_verdicts({"task": "math", **ALL_PASS, "verdict_math": "not_applicable"}) == (False, ["math:not_applicable"])
    # Unknown tasks take "not_applicable" as given; a missing column is a failure.
    assert combine_verdicts({"task": "chess", "verdict_consistency": "not_applicable", "verdict_structure": "pass"}) == (
        False,
        ["execution:missing", "math:missing"],
    )
    assert combine_verdicts({"task": "math", "verdict_math": "fail"}, required=("math",)) == (False, ["math"])


def test_combine_verdicts_refuses_unknown_values():
    with pytest.raises(ValueError, match="row 'r1' has verdict_math=True"):
        combine_verdicts({"id": "r1", "task": "math", **ALL_PASS, "verdict_math": True})


def test_filter_verified_reasons():
    rows = [{"id": "ok", "task": "math", **ALL_PASS}, {"id": "bad", "task": "math", **ALL_PASS, "verdict_structure": "fail", "verdict_consistency": "fail"}]
    kept, removed = filter_verified(rows)
    assert [row["id"] for row in kept] == ["ok"]
    assert removed[0]["removed_reason"] == "failed_checks:consistency,structure"


def test_perplexity_cap():
    rows = [{"id": str(i), "perplexity": p} for i, p in enumerate([1.5, 10.0, 10.1, None, math.nan, math.inf])]
    kept, removed = perplexity_cap(rows, max_ppl=10.0)
    assert [row["perplexity"] for row in kept] == [1.5, 10.0]
    assert [row["removed_reason"] for row in removed] == [
        "perplexity=10.1 > max 10",
        "missing column perplexity",
        "missing column perplexity",
        "perplexity=inf > max 10",
    ]
