"""Math verifier: hand-checked extractions and equivalences, statuses, and use from a thread."""

from concurrent.futures import ThreadPoolExecutor

import pytest

from passband.curation.verifiers import STATUSES, VerifyResult, verify, verify_math
from passband.curation.verifiers.math import extract_answer


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (r"so the answer is $\boxed{42}$.", "42"),
        (r"\boxed{\frac{1}{2}}", r"\frac{1}{2}"),  # nested braces
        (r"\boxed{\frac{\sqrt{3}}{2}} done", r"\frac{\sqrt{3}}{2}"),  # two levels
        (r"first \boxed{1}, then \boxed{2}", "2"),  # the last box wins
        (r"\boxed{\{1, 2\}}", r"\{1, 2\}"),  # escaped braces are set braces, not grouping
        (r"\fbox{7}", "7"),
        (r"$\boxed 5$", "5"),  # one-token argument without braces
        (r"\boxed {  3 }", "3"),  # space before the brace, content stripped
        (r"\boxed{\text{(B)}}", r"\text{(B)}"),
        (r"cut off: \boxed{\frac{1}{2", None),  # truncated mid-answer
        (r"\boxed{}", None),
        ("no box here, 12", None),
        (r"\boxedx{3}", None),  # not the \boxed command
    ],
)
def test_extract_boxed(text, expected):
    assert extract_answer(text, "boxed") == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2 apples and 3 pears make 5.", "5"),
        ("The total is 1,234,567 dollars.", "1234567"),
        ("values 1, 2, 3", "3"),  # list commas are not thousands separators
        ("it drops to -4.5 degrees", "-4.5"),
        ("a ratio of 3/4", "3/4"),
        ("no digits at all", None),
    ],
)
def test_extract_last_number(text, expected):
    assert extract_answer(text, "last_number") == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("<think>2+2</think><answer> 4 </answer>", "4"),
        ("<answer>1</answer> wait <answer>x+1</answer>", "x+1"),
        ("<answer>\n</answer>", None),
        ("<answer>5", None),  # unclosed
    ],
)
def test_extract_answer_tag(text, expected):
    assert extract_answer(text, "answer_tag") == expected


def test_extract_rejects_unknown_rule():
    with pytest.raises(ValueError, match="'first'"):
        extract_answer("1", "first")


@pytest.mark.parametrize(
    ("reference", "answer"),
    [
        ("0.5", r"\frac{1}{2}"),
        (r"\frac{1}{2}", "0.5"),
        ("1/2", r"\dfrac12"),
        (r"\{1, 2\}", r"\{2, 1\}"),  # sets are unordered
        ("[1, 2)", "[1,2)"),
        ("10", r"10 \text{ cm}"),  # units stripped
        ("10", "10 cm"),
        ("(x+1)^2", "x^2+2x+1"),
        (r"\frac{\sqrt{2}}{2}", r"\frac{1}{\sqrt{2}}"),
        ("1000", "1,000"),
        (7, "7.0"),  # numeric reference
    ],
)
def test_equivalent_answers_pass(reference, answer):
    [result] = verify_math([f"so $\\boxed{{{answer}}}$"], [reference])
    assert result == VerifyResult(1.0, "pass", f"answer {answer.strip()!r}")


@pytest.mark.parametrize(
    ("reference", "answer"),
    [
        ("0.5", r"\frac{1}{3}"),
        ("(1, 2)", "[1, 2]"),  # open vs closed interval
        (r"\{1, 2\}", r"\{1, 3\}"),
        ("x^2", "2x"),
        ("3", "4"),
    ],
)
def test_different_answers_fail(reference, answer):
    [result] = verify_math([f"\\boxed{{{answer}}}"], [reference])
    assert (result.score, result.status) == (0.0, "fail")


def test_no_answer_is_unparsable_not_fail():
    results = verify_math(["I think it is 4", r"\boxed{4"], ["4", "4"])
    assert [(r.score, r.status) for r in results] == [(0.0, "unparsable"), (0.0, "unparsable")]


def test_rules_change_what_is_read():
    text = r"\boxed{3} but really <answer>5</answer> and 6"
    assert [r.status for r in verify_math([text], ["3"], rule="boxed")] == ["pass"]
    assert [r.status for r in verify_math([text], ["5"], rule="answer_tag")] == ["pass"]
    assert [r.status for r in verify_math([text], ["6"], rule="last_number")] == ["pass"]


def test_bad_reference_is_named():
    with pytest.raises(ValueError, match="reference 1"):
        verify_math(["1", "2"], ["1", {"answer": "2"}])


def test_works_from_a_worker_thread():
    # math-verify's signal.alarm timeout raises in non-main threads; Prefect runs tasks there.
    completions = [r"\boxed{\frac{1}{2}}", r"\boxed{3}", "none"]
    with ThreadPoolExecutor(max_workers=2) as pool:
        results = pool.submit(verify_math, completions, ["0.5", "4", "1"]).result()
    assert [r.status for r in results] == ["pass", "fail", "unparsable"]


def test_dispatcher_routes_math_and_rejects_unknown_task():
    assert verify("math", [r"\boxed{2}"], ["2"])[0].status == "pass"
    with pytest.raises(ValueError, match="'poetry'"):
        verify("poetry", ["x"], ["y"])


def test_result_validates_status_and_score():
    assert STATUSES == ("pass", "fail", "unparsable", "timeout", "error")
    with pytest.raises(ValueError, match="'ok'"):
        VerifyResult(1.0, "ok")
    with pytest.raises(ValueError, match="1.5"):
        VerifyResult(1.5, "pass")
