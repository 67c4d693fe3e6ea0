"""Generated grading triples: seeded, their defects booked where they are, and the labels checked
independently: every step line's arithmetic re-done from the text, the boxed answer by the math verifier."""

import operator
import re
from collections import Counter
from fractions import Fraction

import pytest

from passband.curation.grading.steps import Defect, Ref, Step, render_solution
from passband.curation.grading.texts import grading_prompt
from passband.curation.grading.triples import DEFECT_CYCLE, generate_triples
from passband.curation.suites.source import load_problems
from passband.curation.verifiers.math import verify_math

_COMPUTED = re.compile(r"^Step (\d+): [^:]+: [^=]+ = (\S+) ([-+×/]) (\S+) = (\S+)\.$")
_STATED = re.compile(r"^Step (\d+): [^:=]+ = (\S+)\.$")
_ANSWER = re.compile(r"^Step (\d+): So the answer is \\boxed\{(.+)\}\.$")


def number(text: str) -> Fraction:
    return Fraction(text.strip("()"))


def read_lines(solution: str) -> list[tuple[str, bool | None]]:
    """Per line: its form ("computed", "stated", "answer") and, for a computed line, whether its arithmetic holds."""
    forms = []
    for index, line in enumerate(solution.splitlines(), start=1):
        if match := _COMPUTED.match(line):
            left, op, right, value = number(match[2]), match[3], number(match[4]), number(match[5])
            result = {"+": operator.add, "-": operator.sub, "×": operator.mul, "/": operator.truediv}[op](left, right)
            forms.append(("computed", result == value))
        elif _STATED.match(line):
            forms.append(("stated", None))
        else:
            assert _ANSWER.match(line), line
            forms.append(("answer", None))
        assert line.startswith(f"Step {index}: "), line
    return forms


def test_a_solution_renders_each_defect_by_hand():
    # 3x + 4 = 19: subtract 4, then divide by 3
    chain = [Step("Subtract 4 from both sides", "3x", Fraction(19), "-", Fraction(4)),
             Step("Divide both sides by 3", "x", Ref(1), "/", Fraction(3))]
    assert render_solution(chain, Defect("complete")) == (
        "Step 1: Subtract 4 from both sides: 3x = 19 - 4 = 15.\n"
        "Step 2: Divide both sides by 3: x = 15 / 3 = 5.\n"
        "Step 3: So the answer is \\boxed{5}.")
    assert render_solution(chain, Defect("unjustified_step", 2)).splitlines()[1] == "Step 2: X = 5."
    assert render_solution(chain, Defect("minor_slip", 1, 2, "right")).splitlines()[0] == \
        "Step 1: Subtract 4 from both sides: 3x = 19 - 6 = 15."
    assert render_solution(chain, Defect("wrong_step", 1, 1)) == (
        "Step 1: Subtract 4 from both sides: 3x = 19 - 4 = 16.\n"
        "Step 2: Divide both sides by 3: x = 16 / 3 = 16/3.\n"
        "Step 3: So the answer is \\boxed{\\frac{16}{3}}.")
    assert render_solution(chain, Defect("wrong_result", 3, 2)).splitlines()[2] == "Step 3: So the answer is \\boxed{7}."


def test_triples_are_seeded():
    assert generate_triples(30, 7, 1) == generate_triples(30, 7, 1)
    assert [row["solution"] for row in generate_triples(30, 7, 1)] != [row["solution"] for row in generate_triples(30, 8, 1)]
    # a longer draw begins with the shorter one
    assert generate_triples(60, 7, 1)[:30] == generate_triples(30, 7, 1)


@pytest.mark.parametrize("difficulty", [0, 1, 2])
def test_each_defect_is_where_the_row_says_and_earns_its_score(difficulty):
    rows = generate_triples(120, 3, difficulty)
    kinds = [row["reference"]["defect"] for row in rows]
    assert kinds == [DEFECT_CYCLE[i % 6] for i in range(120)]
    assert Counter(row["reference"]["score"] for row in rows) == {1.0: 40, 0.5: 40, 0.0: 40}
    assert len({row["problem"] for row in rows}) == 120 and len({row["id"] for row in rows}) == 120
    for row in rows:
        kind, step = row["reference"]["defect"], row["reference"]["defect_step"]
        forms = read_lines(row["solution"])
        computed_ok = {i: ok for i, (form, ok) in enumerate(forms, start=1) if form == "computed"}
        assert forms[-1][0] == "answer" and [form for form, _ in forms[:-1]].count("answer") == 0
        assert row["prompt"] == grading_prompt(row["problem"], row["solution"])
        if kind == "complete":
            assert step is None and all(computed_ok.values())
        elif kind == "unjustified_step":
            assert forms[step - 1][0] == "stated" and all(computed_ok.values())
        elif kind in ("minor_slip", "wrong_step"):
            # the one false computation is the defect's step; after a wrong step the others compute from it
            assert [i for i, ok in computed_ok.items() if not ok] == [step], row["solution"]
        else:
            assert kind == "wrong_result" and step == len(forms) and all(computed_ok.values())
    # the labels, checked by the math verifier: the boxed answer is right exactly when s > 0
    results = verify_math([row["solution"] for row in rows], [row["answer"] for row in rows], rule="boxed")
    assert [result.status == "pass" for result in results] == [row["reference"]["score"] > 0 for row in rows]


def test_the_suite_goes_through_load_problems_with_its_options():
    rows = load_problems(suite="proof_grading", num_problems=10, seed=2, difficulty=1,
                         options={"defects": ["wrong_result", "minor_slip"], "subdomains": ["algebra"]}).rows
    assert [row["reference"]["defect"] for row in rows] == ["wrong_result", "minor_slip"] * 5
    assert {row["subdomain"] for row in rows} == {"algebra"} and {row["task"] for row in rows} == {"proof_grading"}


def test_bad_requests_say_what_to_change():
    with pytest.raises(ValueError, match="difficulty must be in 0..2, got 3"):
        generate_triples(4, 0, 3)
    with pytest.raises(ValueError, match="defects must be a non-empty list of"):
        generate_triples(4, 0, 0, defects=["typo"])
    with pytest.raises(ValueError, match="subdomains must be a non-empty subset"):
        generate_triples(4, 0, 0, subdomains=["poetry"])
    # difficulty 0 holds 361 distinct usable questions across the five sub-domains
    assert len(generate_triples(361, 0, 0, balanced=False)) == 361
    with pytest.raises(ValueError, match="ran out of distinct questions after 361 for 362"):
        generate_triples(362, 0, 0, balanced=False)


def test_worked_analyses_earn_the_full_reward_with_the_defect_check():
    from passband.curation.grading.analyses import worked_analysis
    from passband.curation.grading.reward import verify_grading

    assert worked_analysis({"score": 0.5, "defect": "minor_slip", "defect_step": 2}) == (
        "Here is my evaluation of the solution:\n"
        "Issue in step 2: a number in its computation is written wrong, although the value it reaches is right.\n"
        "Based on my evaluation, the final overall score should be: \\boxed{0.5}")
    rows = generate_triples(60, 4, 2)
    results = verify_grading([worked_analysis(row["reference"]) for row in rows], [row["reference"] for row in rows],
                             meta="defect_check")
    assert {(r.score, r.status) for r in results} == {(1.0, "pass")}
    # and an analysis of one triple, given to the next (another defect or none), does not
    shifted = verify_grading([worked_analysis(row["reference"]) for row in rows[1:]],
                             [row["reference"] for row in rows[:-1]], meta="defect_check")
    assert max(r.score for r in shifted) < 1.0
