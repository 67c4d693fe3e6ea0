"""The four verdicts on hand-written traces, the eval hold-out, and the curate row shapes."""

import pytest

from passband.curation.curate_rows import attach_pass_rates, reason_kind, removed_record, sft_row
from passband.curation.holdout import hold_out
from passband.curation.synthetic import attach_samples, frame_queries
from passband.curation.trace_checks import consistency, four_verdicts, is_number, structure_spec_for

CODE_REF = {"tests": "def check(f):\n    assert f(2) == 4\n", "entry_point": "square"}


@pytest.mark.parametrize("text, expected", [
    ("7", True), ("-3", True), ("1,234", True), ("2.5", True), ("3/4", True), ("\\frac{3}{4}", True),
    ("$12$", True), ("x + 1", False), ("seven", False), ("", False),
])
def test_is_number(text, expected):
    assert is_number(text) is expected


def test_math_consistency_needs_a_numeric_final_answer():
    assert consistency("math", "What is 2 + 5?", "The answer is 7.", "7")[0] == "pass"
    assert consistency("math", "What is 2 + 5?", "I am not sure.", "7") == ("fail", "no final answer by rule 'last_number'")
    # A wrong number is still consistent (it addresses the query); correctness is the math check.
    assert consistency("math", "What is 2 + 5?", "8", "7")[0] == "pass"
    # Boxed rule: a box holding a non-number does not answer a numeric question.
    verdict, reason = consistency("math", "q", "\\boxed{x}", "7", math_rule="boxed")
    assert verdict == "fail" and "not a number" in reason


def test_code_consistency_needs_the_entry_point():
    good = "```python\ndef square(x):\n    return x * x\n```"
    assert consistency("code", "p", good, CODE_REF) == ("pass", "defines ['square']")
    wrong_name = "```python\ndef sq(x):\n    return x * x\n```"
    assert consistency("code", "p", wrong_name, CODE_REF)[0] == "fail"
    assert consistency("code", "p", "```python\ndef square(x) return\n```", CODE_REF)[1].startswith("code does not parse")
    assert consistency("code", "p", "def square(x): return x*x", CODE_REF) == ("fail", "no code block")
    # A usage block after the solution: the check reads the block the verifier runs.
    with_usage = good + "\n```python\nprint(square(3))\n```"
    assert consistency("code", "p", with_usage, CODE_REF) == ("pass", "defines ['square']")


def test_ifeval_consistency_is_topic_overlap():
    prompt = 'Write a short poem about volcanoes. Include the word "journey".'
    assert consistency("ifeval", prompt, "Volcanoes rumble on a journey.", {})[0] == "pass"
    # "write", "short", "include", "word" are instruction words: sharing only them is off topic.
    assert consistency("ifeval", prompt, "I will write a short word.", {})[0] == "fail"
    assert consistency("ifeval", prompt, "   ", {}) == ("fail", "empty response")


def test_four_verdicts_mark_checks_by_task():
    spec = structure_spec_for("math")
    verdicts = four_verdicts("math", "What is 2 + 5?", "7", "7", "pass", "stop", spec)
    assert [verdicts[f"verdict_{c}"] for c in ("consistency", "execution", "math", "structure")] == [
        "pass", "not_applicable", "pass", "pass"]
    truncated = four_verdicts("math", "What is 2 + 5?", "7 7 7", "7", "pass", "length", spec)
    assert truncated["verdict_structure"] == "fail" and "not_truncated" in truncated["structure_detail"]
    code = "```python\ndef square(x):\n    return x * x\n```"
    failed_tests = four_verdicts("code", "p", code, CODE_REF, "fail", "stop", structure_spec_for("code"))
    assert (failed_tests["verdict_execution"], failed_tests["verdict_math"]) == ("fail", "not_applicable")


def test_hold_out_is_disjoint_seeded_and_sized():
    rows = [{"id": f"p{i}"} for i in range(10)]
    train, held = hold_out(rows, 3, seed=5)
    assert len(held) == 3 and len(train) == 7
    assert {r["id"] for r in train} | {r["id"] for r in held} == {f"p{i}" for i in range(10)}
    assert hold_out(rows, 3, seed=5) == (train, held)
    with pytest.raises(ValueError, match="0..10"):
        hold_out(rows, 11)
    with pytest.raises(ValueError, match="repeated"):
        hold_out([{"id": "a"}, {"id": "a"}], 1)


def test_attach_pass_rates_uses_rollouts_for_top_k():
    rows = [{"id": "a", "task": "math"}]
    summary = {"problem_id": "a", "pass_rate": 0.25, "pass_rate_top_k": 0.5, "pass_count": 2, "num_samples": 8,
               "num_unparsable": 1, "num_timeout": 0, "num_error": 0, "num_rollouts": 4, "num_rollouts_solved": 2}
    [row] = attach_pass_rates(rows, [summary], "ckpt")
    assert (row["pass_rate"], row["pass_rate_per_attempt"], row["checkpoint"]) == (0.5, 0.25, "ckpt")
    with pytest.raises(ValueError, match="not aligned"):
        attach_pass_rates([{"id": "b"}], [summary], "ckpt")


def test_row_shapes():
    trajectory = {"id": "p1", "task": "math", "prompt": "q", "completion": "7", "sample_index": 3, "source": "s"}
    row = sft_row(trajectory, "rollout", "ckpt", None)
    assert (row["id"], row["problem_id"], row["generator"], row["teacher"]) == ("p1/rollout-3", "p1", "s", "ckpt")
    record = removed_record({"id": "x", "removed_reason": "near_duplicate_of:y jaccard=0.91", "samples": [1]}, "hygiene")
    assert (record["stage"], record["reason_kind"]) == ("hygiene", "near_duplicate_of")
    assert "samples" not in record["row_json"]
    assert reason_kind("outside_band:pass_rate=1 not in (0, 0.8]") == "outside_band"
    assert reason_kind("status=fail") == "status"


def test_frame_queries_and_attach_samples():
    framed = frame_queries([{"id": "a", "prompt": "P1"}, {"id": "b", "prompt": "P2"}], ["{prompt}", "Q: {prompt}"], "g")
    assert [(r["id"], r["prompt"]) for r in framed] == [("syn-a", "P1"), ("syn-b", "Q: P2")]
    with pytest.raises(ValueError, match="placeholder"):
        frame_queries([], ["no placeholder"], "g")
    problems = attach_samples([{"id": "a"}, {"id": "b"}], [{"problem_id": "a", "k": 1}, {"problem_id": "a", "k": 2}])
    assert [len(p["samples"]) for p in problems] == [2, 0]
