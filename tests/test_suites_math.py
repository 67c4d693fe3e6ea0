"""The procedural math suite: answers re-derived independently, determinism, difficulty 0."""

import itertools
import math
import random
import re
from fractions import Fraction

import pytest
import sympy
from sympy.parsing.sympy_parser import (
    implicit_multiplication_application,
    parse_expr,
    standard_transformations,
)

from passband.curation.suites.math_problems import SUBDOMAINS, MathProblem, make_problem, render_answer
from passband.curation.suites.math_suite import extraction_rule_for, generate_math
from passband.curation.verifiers.math import verify_math

DRAWS_PER_CELL = 40


def _brute_gcd(numbers: list[int]) -> int:
    return max(d for d in range(1, min(numbers) + 1) if all(n % d == 0 for n in numbers))


def _shoelace(points: list[tuple[int, int]]) -> Fraction:
    pairs = zip(points, points[1:] + points[:1])
    return abs(Fraction(sum(x1 * y2 - x2 * y1 for (x1, y1), (x2, y2) in pairs), 2))


def _independent_answer(problem: MathProblem) -> Fraction:
    """Re-derive the answer from the question text or params by another method than the maker."""
    p = problem.params
    kind = problem.kind
    if kind == "expression":  # sympy reads the shown question, e.g. "(3/4) + (5/6)"
        shown = problem.question.removeprefix("What is ").removesuffix("?").replace("×", "*")
        return Fraction(str(sympy.sympify(shown)))
    if kind == "linear_equation":  # sympy solves the shown equation, "3(x + 4) - 5 = 2x"
        lhs, rhs = p["equation"].split(" = ")
        transforms = standard_transformations + (implicit_multiplication_application,)
        x = sympy.Symbol("x")
        (solution,) = sympy.solve(parse_expr(lhs, transformations=transforms)
                                  - parse_expr(rhs, transformations=transforms), x)
        return Fraction(str(solution))
    if kind == "remainder":
        rest = p["a"]
        while rest >= p["m"]:
            rest -= p["m"]
        return Fraction(rest)
    if kind == "gcd":
        return Fraction(_brute_gcd(p["numbers"]))
    if kind == "lcm":
        step = p["numbers"][0]
        return Fraction(next(m for m in itertools.count(step, step)
                             if all(m % n == 0 for n in p["numbers"])))
    if kind == "divisor_count":
        return Fraction(sum(1 for d in range(1, p["n"] + 1) if p["n"] % d == 0))
    if kind == "divisor_sum":
        return Fraction(sum(d for d in range(1, p["n"] + 1) if p["n"] % d == 0))
    if kind == "totient":
        return Fraction(sum(1 for i in range(1, p["n"] + 1) if _brute_gcd([i, p["n"]]) == 1))
    if kind == "power_mod":
        value = 1
        for _ in range(p["k"]):
            value = value * p["a"] % p["m"]
        return Fraction(value)
    return _independent_counting_or_geometry(problem)


def _compositions(total: int, parts: int) -> int:
    """Ways to write `total` as an ordered sum of `parts` positive integers, by recursion."""
    if parts == 1:
        return 1
    return sum(_compositions(total - first, parts - 1) for first in range(1, total - parts + 2))


def _independent_counting_or_geometry(problem: MathProblem) -> Fraction:
    p = problem.params
    kind = problem.kind
    count = {
        "arrange": lambda: len(list(itertools.permutations(range(p["n"])))),
        "outfits": lambda: len(list(itertools.product(range(p["a"]), range(p["b"]),
                                                      range(p.get("c", 1))))),
        "sum_rule": lambda: len(["red"] * p["a"] + ["blue"] * p["b"]),
        "choose": lambda: len(list(itertools.combinations(range(p["n"]), p["k"]))),
        "podium": lambda: len(list(itertools.permutations(range(p["n"]), 3))),
        "letters": lambda: len(set(itertools.permutations(p["word"]))),
        # people 0..men-1 are men, the rest women
        "committee": lambda: sum(1 for c in itertools.combinations(range(p["men"] + p["women"]),
                                                                   p["k"])
                                 if any(i >= p["men"] for i in c)),
        "together": lambda: sum(1 for order in itertools.permutations(range(p["n"]))
                                if abs(order.index(0) - order.index(1)) == 1),
        "apart": lambda: sum(1 for order in itertools.permutations(range(p["n"]))
                             if abs(order.index(0) - order.index(1)) > 1),
        "stars_bars": lambda: _compositions(p["n"], p["k"]),
        "derangement": lambda: sum(1 for order in itertools.permutations(range(p["n"]))
                                   if all(order[i] != i for i in range(p["n"]))),
    }
    if kind in count:
        return Fraction(count[kind]())
    if kind == "rectangle_area":
        return _shoelace([(0, 0), (p["w"], 0), (p["w"], p["h"]), (0, p["h"])])
    if kind in ("square_perimeter", "rectangle_perimeter", "triangle_perimeter"):
        sides = p.get("sides") or [p.get("s") or p["w"], p.get("s") or p["h"]] * 2
        if kind == "triangle_perimeter":
            assert max(sides) < sum(sides) - max(sides), "not a triangle"
        return Fraction(sum(sides))
    if kind == "triangle_area":
        return _shoelace([(0, 0), (p["base"], 0), (3, p["height"])])
    if kind in ("hypotenuse", "right_triangle_area"):
        a, b = p["legs"]
        c = math.isqrt(a * a + b * b)
        assert c * c == a * a + b * b, "legs of a Pythagorean triple"
        return Fraction(c) if kind == "hypotenuse" else _shoelace([(0, 0), (a, 0), (0, b)])
    if kind in ("missing_leg", "area_from_hypotenuse"):
        other = next(b for b in range(1, p["hypotenuse"])
                     if b * b + p["leg"] ** 2 == p["hypotenuse"] ** 2)
        return Fraction(other) if kind == "missing_leg" else Fraction(other * p["leg"], 2)
    if kind == "trapezoid_area":
        return _shoelace([(0, 0), (p["bottom"], 0), (1 + p["top"], p["height"]),
                          (1, p["height"])])
    assert kind == "coordinate_triangle", kind
    (x1, y1), (x2, y2), (x3, y3) = p["points"]
    a, b, c = math.dist((x1, y1), (x2, y2)), math.dist((x2, y2), (x3, y3)), math.dist(
        (x1, y1), (x3, y3))
    s = (a + b + c) / 2
    heron = math.sqrt(max(s * (s - a) * (s - b) * (s - c), 0.0))
    assert heron == pytest.approx(float(problem.answer), abs=1e-6)
    return problem.answer


EXPECTED_KINDS = {
    "arithmetic": {"expression"},
    "algebra": {"linear_equation"},
    "number_theory": {"remainder", "gcd", "lcm", "divisor_count", "power_mod", "divisor_sum",
                      "totient"},
    "combinatorics": {"arrange", "outfits", "sum_rule", "choose", "podium", "letters",
                      "committee", "together", "apart", "stars_bars", "derangement"},
    "geometry": {"rectangle_area", "square_perimeter", "triangle_perimeter",
                 "rectangle_perimeter", "triangle_area", "hypotenuse", "right_triangle_area",
                 "missing_leg", "trapezoid_area", "coordinate_triangle", "area_from_hypotenuse"},
}


@pytest.mark.parametrize("subdomain", SUBDOMAINS)
def test_answers_match_an_independent_derivation(subdomain):
    rng = random.Random(1234)
    kinds_seen = set()
    for difficulty, integer_only in itertools.product(range(5), (False, True)):
        for _ in range(DRAWS_PER_CELL):
            problem = make_problem(subdomain, rng, difficulty, integer_only)
            kinds_seen.add(problem.kind)
            assert _independent_answer(problem) == problem.answer, problem
            if integer_only:
                assert problem.answer.denominator == 1, problem
    assert kinds_seen == EXPECTED_KINDS[subdomain]


def test_difficulty_zero_arithmetic_is_one_digit_addition():
    rows = generate_math(100, seed=5, difficulty=0, subdomains=["arithmetic"],
                         answer_format="plain")
    pairs = set()
    for row in rows:
        match = re.fullmatch(r"What is (\d) \+ (\d)\? Answer with just the number\.", row["prompt"])
        assert match, row["prompt"]
        a, b = int(match[1]), int(match[2])
        assert row["reference"] == str(a + b)
        pairs.add((a, b))
    assert len(pairs) == 100  # every one-digit pair, no duplicate prompts
    with pytest.raises(ValueError, match="arithmetic at difficulty 0 ran out .* after 100"):
        generate_math(101, seed=5, difficulty=0, subdomains=["arithmetic"])


def test_rows_are_deterministic_distinct_and_well_formed():
    rows = generate_math(50, seed=7, difficulty=2)
    assert rows == generate_math(50, seed=7, difficulty=2)
    assert rows != generate_math(50, seed=8, difficulty=2)
    assert len({row["prompt"] for row in rows}) == 50
    assert [row["subdomain"] for row in rows[:6]] == [*SUBDOMAINS, "arithmetic"]
    assert rows[3]["id"] == "math-combinatorics-d2-s7-3"
    assert {row["task"] for row in rows} == {"math"}
    assert all(row["prompt"].endswith(" Put the final answer in \\boxed{}.") for row in rows)


def test_a_subdomain_draws_the_same_problems_whatever_else_is_asked():
    alone = generate_math(8, seed=3, difficulty=3, subdomains=["geometry"])
    mixed = generate_math(16, seed=3, difficulty=3, subdomains=["algebra", "geometry"])
    assert [row["prompt"] for row in alone] == [row["prompt"] for row in mixed[1::2]]


def test_plain_answers_are_integers_and_boxed_ones_may_be_fractions():
    plain = generate_math(100, seed=1, difficulty=4, answer_format="plain")
    boxed = generate_math(100, seed=1, difficulty=4, answer_format="boxed")
    assert all(re.fullmatch(r"-?\d+", row["reference"]) for row in plain)
    assert any(row["reference"].startswith("\\frac") or row["reference"].startswith("-\\frac")
               for row in boxed)


def test_render_answer_and_extraction_rules():
    assert render_answer(Fraction(42)) == "42"
    assert render_answer(Fraction(-6, 4)) == "-\\frac{3}{2}"
    assert render_answer(Fraction(3, 4)) == "\\frac{3}{4}"
    assert extraction_rule_for("boxed") == "boxed"
    assert extraction_rule_for("plain") == "last_number"
    with pytest.raises(ValueError, match="'latex'"):
        extraction_rule_for("latex")


@pytest.mark.parametrize("kwargs, message", [
    ({"difficulty": 5}, "difficulty must be in 0..4, got 5"),
    ({"subdomains": ["calculus"]}, "got \\['calculus'\\]"),
    ({"subdomains": []}, "non-empty"),
    ({"answer_format": "latex"}, "'latex'"),
])
def test_bad_settings_are_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        generate_math(3, seed=0, **kwargs)


@pytest.mark.parametrize("answer_format", ["boxed", "plain"])
def test_the_verifier_accepts_each_reference_in_the_promised_format(answer_format):
    rows = [row for difficulty in (0, 4)
            for row in generate_math(10, seed=2, difficulty=difficulty,
                                     answer_format=answer_format)]
    references = [row["reference"] for row in rows]
    if answer_format == "boxed":
        completions = [f"So the result is \\boxed{{{ref}}}." for ref in references]
    else:
        completions = [f"Adding up gives {ref}" for ref in references]
    results = verify_math(completions, references, rule=extraction_rule_for(answer_format))
    assert [result.status for result in results] == ["pass"] * len(rows)
    wrong = verify_math(["\\boxed{1000001}" if answer_format == "boxed" else "1000001"],
                        references[:1], rule=extraction_rule_for(answer_format))
    assert wrong[0].status == "fail"
