"""Built-in SFT data: worked solutions written from the problem's numbers, each verified."""

import re
from fractions import Fraction

import pytest

from passband.curation.hygiene import question_key
from passband.curation.suites.math_problems import MathProblem
from passband.curation.suites.math_suite import generate_math
from passband.curation.worked_math import worked_completion, worked_math_rows


def test_completions_by_hand():
    cases = [
        (MathProblem("expression", "What is 6 + 1?", Fraction(7), {"expression": "6 + 1"}),
         "6 + 1 = 7. The answer is \\boxed{7}."),
        (MathProblem("linear_equation", "Solve for x: x + 5 = 13.", Fraction(8), {"equation": "x + 5 = 13"}),
         "Subtract 5 from both sides: x = 13 - 5 = 8. The answer is \\boxed{8}."),
        (MathProblem("linear_equation", "Solve for x: x - 7 = -6.", Fraction(1), {"equation": "x - 7 = -6"}),
         "Add 7 to both sides: x = -6 + 7 = 1. The answer is \\boxed{1}."),
        (MathProblem("remainder", "What is the remainder when 17 is divided by 5?", Fraction(2), {"a": 17, "m": 5}),
         "17 = 5 × 3 + 2, so the remainder is 2. The answer is \\boxed{2}."),
        (MathProblem("triangle_area", "A triangle has base 3 and height 5.", Fraction(15, 2), {"base": 3, "height": 5}),
         "Area = base × height / 2 = 3 × 5 / 2 = \\frac{15}{2}. The answer is \\boxed{\\frac{15}{2}}."),
        (MathProblem("totient", "How many integers ...", Fraction(4), {"n": 10}),
         "Working through the problem step by step gives 4. The answer is \\boxed{4}."),
    ]
    for problem, expected in cases:
        assert worked_completion(problem) == expected


def test_rows_are_distinct_verified_and_not_the_suite_sample():
    rows, quarantined = worked_math_rows(40, seed=0, difficulties=[0, 1])
    assert quarantined == [] and len(rows) == 40
    assert len({row["prompt"] for row in rows}) == 40
    assert {row["difficulty"] for row in rows} == {0, 1}
    for row in rows:
        assert row["prompt"].endswith("Put the final answer in \\boxed{}.")
        assert re.search(r"\\boxed\{(.+)\}\.$", row["completion"]).group(1) == row["reference"]
    # Own generator namespace: the suite's own rows for the same seed are a different draw.
    suite = generate_math(40, 0, 1, None, "boxed")
    shared = {r["prompt"] for r in rows} & {r["prompt"] for r in suite}
    assert len(shared) < 10


def test_plain_rows_answer_with_the_number_alone():
    rows, quarantined = worked_math_rows(20, seed=0, difficulties=[0], answer_format="plain", show_work=False)
    assert quarantined == [] and len(rows) == 20
    for row in rows:
        assert row["prompt"].endswith("? Answer with just the number.") or row["prompt"].endswith(
            ". Answer with just the number.")
        assert row["completion"] == row["reference"] and re.fullmatch(r"-?\d+", row["completion"])
    # by hand: the first arithmetic row's numbers add up to its completion
    first = next(row for row in rows if row["subdomain"] == "arithmetic")
    a, b = map(int, re.match(r"What is (\d+) \+ (\d+)\?", first["prompt"]).groups())
    assert first["completion"] == str(a + b)


def test_plain_rows_show_their_work_and_end_in_the_number():
    rows, quarantined = worked_math_rows(25, seed=0, difficulties=[0], answer_format="plain")
    assert quarantined == [] and len(rows) == 25
    for row in rows:
        assert row["completion"].endswith(f" The answer is {row['reference']}.") and "boxed" not in row["completion"]
    # by hand: the work shown for the first sum and the first rectangle's area
    first = next(row for row in rows if row["subdomain"] == "arithmetic")
    a, b = map(int, re.match(r"What is (\d+) \+ (\d+)\?", first["prompt"]).groups())
    assert first["completion"] == f"{a} + {b} = {a + b}. The answer is {a + b}."
    counting = [row for row in rows if row["subdomain"] == "combinatorics"]
    assert len(counting) == 5 and all(len(row["completion"]) > len(" The answer is .") + 8 for row in counting)


def test_held_out_questions_are_never_drawn_in_any_format():
    # Difficulty 0 holds 100 one-digit additions: hold out 90 of them, asked for a plain answer.
    held_out = [f"What is {a} + {b}? Answer with just the number." for a in range(10) for b in range(10)][:90]
    keys = frozenset(question_key(prompt) for prompt in held_out)
    rows, _ = worked_math_rows(10, seed=0, difficulties=[0], subdomains=["arithmetic"],
                               answer_format="boxed", exclude_questions=keys)
    assert len(rows) == 10  # exactly the 10 additions left: 9 + 0 ... 9 + 9
    assert {question_key(row["prompt"]) for row in rows} == {f"what is 9 + {b}?" for b in range(10)}
    with pytest.raises(ValueError, match="ran out of distinct problems outside the 90 held-out questions after 10"):
        worked_math_rows(11, seed=0, difficulties=[0], subdomains=["arithmetic"], exclude_questions=keys)
