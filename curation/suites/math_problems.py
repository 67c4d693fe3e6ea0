"""Procedural math problems, one maker per sub-domain, with exact answers.

Each maker draws numbers from a `random.Random` and returns a `MathProblem` whose answer is an
exact `Fraction`. Difficulty 0 is sized to the demo model (docs/recipe.md section 10: SmolLM2-135M
gets one-digit addition right ~23% of the time at T=1, two-digit addition ~never), difficulty 4
to problems that need several steps or a counting argument. `integer_only` keeps every answer
an integer, for prompts graded by a last-number extractor that cannot read a fraction.
"""

import math
import random
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

SUBDOMAINS = ("arithmetic", "algebra", "number_theory", "combinatorics", "geometry")
MAX_DIFFICULTY = 4


@dataclass(frozen=True)
class MathProblem:
    """One drawn problem; `kind` and `params` let tests re-derive the answer another way."""

    kind: str  # e.g. "add", "gcd", "choose"
    question: str  # the problem text, without the answer-format instruction
    answer: Fraction
    params: dict[str, Any] = field(default_factory=dict)


def make_problem(
    subdomain: str, rng: random.Random, difficulty: int, integer_only: bool
) -> MathProblem:
    """Draw one problem of `subdomain` at `difficulty` (0..MAX_DIFFICULTY)."""
    if not 0 <= difficulty <= MAX_DIFFICULTY:
        raise ValueError(f"difficulty must be in 0..{MAX_DIFFICULTY}, got {difficulty}")
    if subdomain == "arithmetic":
        return _arithmetic(rng, difficulty, integer_only)
    if subdomain == "algebra":
        return _algebra(rng, difficulty, integer_only)
    if subdomain == "number_theory":
        return _number_theory(rng, difficulty)
    if subdomain == "combinatorics":
        return _combinatorics(rng, difficulty)
    if subdomain == "geometry":
        return _geometry(rng, difficulty, integer_only)
    raise ValueError(f"unknown math subdomain {subdomain!r}; choose from {list(SUBDOMAINS)}")


def render_answer(answer: Fraction) -> str:
    """Exact answer as LaTeX: `42`, `-7`, `\\frac{3}{4}`, `-\\frac{5}{2}`."""
    if answer.denominator == 1:
        return str(answer.numerator)
    sign = "-" if answer < 0 else ""
    return f"{sign}\\frac{{{abs(answer.numerator)}}}{{{answer.denominator}}}"


def _expression_problem(expression: str) -> MathProblem:
    """An arithmetic expression in Python syntax, shown with x for multiplication."""
    # eval is safe here: the expression is built from our own integers and operators.
    value = eval(expression, {"F": Fraction})  # noqa: S307
    shown = expression.replace("*", "×").replace("F(", "(").replace(", ", "/")
    return MathProblem("expression", f"What is {shown}?", Fraction(value),
                       {"expression": expression})


def _arithmetic(rng: random.Random, difficulty: int, integer_only: bool) -> MathProblem:
    r = rng.randint
    if difficulty == 0:  # one-digit addition, the demo model's band
        return _expression_problem(f"{r(0, 9)} + {r(0, 9)}")
    if difficulty == 1:
        a, b = r(0, 9), r(0, 9)
        return _expression_problem(rng.choice(
            [f"{max(a, b)} - {min(a, b)}", f"{a} * {b}", f"{r(10, 99)} + {b}"]))
    if difficulty == 2:
        a, b = r(10, 99), r(10, 99)
        return _expression_problem(rng.choice(
            [f"{a} + {b}", f"{max(a, b)} - {min(a, b)}", f"{a} * {r(2, 9)}"]))
    if difficulty == 3:
        return _expression_problem(rng.choice([
            f"{r(10, 99)} + {r(2, 9)} * {r(2, 9)} - {r(10, 99)}",
            f"{r(2, 9)} * {r(10, 30)} - {r(2, 9)} * {r(10, 30)}",
            f"{r(11, 99)} * {r(11, 99)}",
        ]))
    if integer_only:
        return _expression_problem(rng.choice([
            f"({r(100, 999)} - {r(100, 999)}) * ({r(10, 99)} + {r(10, 99)})",
            f"{r(100, 999)} * {r(11, 99)} - {r(1000, 9999)}",
        ]))
    return _expression_problem(rng.choice([
        f"F({r(1, 9)}, {r(2, 9)}) + F({r(1, 9)}, {r(2, 9)})",
        f"F({r(1, 9)}, {r(2, 9)}) * F({r(1, 9)}, {r(2, 9)}) - F({r(1, 9)}, {r(2, 9)})",
    ]))


def _linear(a: int, b: int) -> str:
    """`a*x + b` as text: `3x - 5`, `-x`, `x + 2`, `7`."""
    terms = []
    if a != 0:
        terms.append({1: "x", -1: "-x"}.get(a, f"{a}x"))
    if b != 0 or not terms:
        terms.append(f"{b}" if not terms else f"{'+' if b > 0 else '-'} {abs(b)}")
    return " ".join(terms)


def _equation(lhs: str, rhs: str, x: Fraction, params: dict[str, Any]) -> MathProblem:
    return MathProblem("linear_equation", f"Solve for x: {lhs} = {rhs}.", x,
                       {**params, "equation": f"{lhs} = {rhs}"})


def _algebra(rng: random.Random, difficulty: int, integer_only: bool) -> MathProblem:
    r = rng.randint
    if difficulty == 0:  # x + a = b with a one-digit answer
        x, a = r(0, 9), r(1, 9)
        return _equation(_linear(1, a), str(x + a), Fraction(x), {})
    if difficulty == 1:
        x, a = r(0, 12), r(2, 9)
        if rng.random() < 0.5:
            return _equation(_linear(a, 0), str(a * x), Fraction(x), {})
        return _equation(_linear(1, -a), str(x - a), Fraction(x), {})
    if difficulty == 2:  # a*x + b = c, integer solution, negatives allowed
        x, a, b = r(-10, 10), rng.choice([-1, 1]) * r(2, 9), r(-20, 20)
        return _equation(_linear(a, b), str(a * x + b), Fraction(x), {})
    if difficulty == 3:  # a*x + b = c*x + d
        a, c, b = r(-9, 9), r(-9, 9), r(-20, 20)
        c = c if c != a else a + r(1, 5)
        if integer_only:
            x = r(-10, 10)
            d = (a - c) * x + b
        else:
            d = r(-20, 20)
            x = Fraction(d - b, a - c)
        return _equation(_linear(a, b), _linear(c, d), Fraction(x), {})
    # a(x + b) - c = d(x - e) + f: expand both sides before solving
    a, d = r(2, 9), r(2, 9)
    d = d if d != a else a + 1
    b, c, e = r(1, 9), r(1, 20), r(1, 9)
    if integer_only:
        x = Fraction(r(-10, 10))
        f = int(a * (x + b) - c - d * (x - e))
    else:
        f = r(-20, 20)
        x = Fraction(f + c - a * b - d * e, a - d)
    constant = "" if f == 0 else f" + {f}" if f > 0 else f" - {-f}"
    lhs, rhs = f"{a}(x + {b}) - {c}", f"{d}(x - {e}){constant}"
    return _equation(lhs, rhs, x, {})


def _number_theory(rng: random.Random, difficulty: int) -> MathProblem:
    r = rng.randint
    kinds = {
        0: ["remainder_small"], 1: ["remainder", "gcd_small"], 2: ["gcd", "lcm", "divisors_small"],
        3: ["divisors", "lcm3", "power_mod_small"], 4: ["power_mod", "divisor_sum", "totient"],
    }[difficulty]
    kind = rng.choice(kinds)
    if kind in ("remainder_small", "remainder"):
        a, m = (r(5, 20), r(2, 5)) if kind == "remainder_small" else (r(20, 200), r(3, 12))
        return MathProblem("remainder", f"What is the remainder when {a} is divided by {m}?",
                           Fraction(a % m), {"a": a, "m": m})
    if kind in ("gcd_small", "gcd"):
        g = r(2, 9) if kind == "gcd_small" else r(2, 30)
        a, b = g * r(1, 5 if kind == "gcd_small" else 9), g * r(1, 5 if kind == "gcd_small" else 9)
        return MathProblem("gcd", f"What is the greatest common divisor of {a} and {b}?",
                           Fraction(math.gcd(a, b)), {"numbers": [a, b]})
    if kind in ("lcm", "lcm3"):
        numbers = [r(2, 20) for _ in range(2 if kind == "lcm" else 3)]
        shown = " and ".join([", ".join(map(str, numbers[:-1])), str(numbers[-1])])
        return MathProblem("lcm", f"What is the least common multiple of {shown}?",
                           Fraction(math.lcm(*numbers)), {"numbers": numbers})
    if kind in ("divisors_small", "divisors"):
        n = r(6, 60) if kind == "divisors_small" else r(100, 1000)
        count = sum(2 - (d * d == n) for d in range(1, math.isqrt(n) + 1) if n % d == 0)
        return MathProblem("divisor_count", f"How many positive divisors does {n} have?",
                           Fraction(count), {"n": n})
    if kind in ("power_mod_small", "power_mod"):
        a, k, m = (r(2, 9), r(2, 5), r(5, 20)) if kind == "power_mod_small" else (
            r(2, 30), r(50, 500), rng.choice([7, 11, 13, 17, 19, 23, 29, 31, 37, 41, 43, 47]))
        return MathProblem("power_mod", f"What is the remainder when {a}^{k} is divided by {m}?",
                           Fraction(pow(a, k, m)), {"a": a, "k": k, "m": m})
    if kind == "divisor_sum":
        n = r(100, 2000)
        total = sum(d + (n // d if d * d != n else 0)
                    for d in range(1, math.isqrt(n) + 1) if n % d == 0)
        return MathProblem("divisor_sum", f"What is the sum of all positive divisors of {n}?",
                           Fraction(total), {"n": n})
    n = r(20, 500)  # Euler's totient from the prime factorisation
    phi, rest, p = n, n, 2
    while p * p <= rest:
        if rest % p == 0:
            phi -= phi // p
            while rest % p == 0:
                rest //= p
        p += 1
    phi = phi - phi // rest if rest > 1 else phi
    return MathProblem("totient", f"How many integers from 1 to {n} share no common factor "
                       f"greater than 1 with {n}?", Fraction(phi), {"n": n})


def _combinatorics(rng: random.Random, difficulty: int) -> MathProblem:
    r = rng.randint
    kinds = {
        0: ["arrange", "outfits", "sum_rule"], 1: ["arrange", "choose", "outfits", "sum_rule"],
        2: ["choose", "podium", "outfits"], 3: ["letters", "choose", "committee"],
        4: ["together", "apart", "stars_bars", "derangement"],
    }[difficulty]
    kind = rng.choice(kinds)
    if kind == "arrange":
        n = r(1, 3) if difficulty == 0 else r(3, 5)
        return MathProblem("arrange", f"In how many different orders can {n} different books "
                           f"be placed in a row on a shelf?", Fraction(math.factorial(n)), {"n": n})
    if kind == "outfits" and difficulty < 2:
        a, b = (r(1, 3), r(1, 3)) if difficulty == 0 else (r(2, 6), r(2, 6))
        return MathProblem("outfits", f"Sam has {a} different shirts and {b} different pairs of "
                           f"pants. How many different outfits of one shirt and one pair of pants "
                           f"can Sam make?", Fraction(a * b), {"a": a, "b": b})
    if kind == "outfits":
        a, b, c = r(2, 7), r(2, 7), r(2, 7)
        return MathProblem("outfits", f"Sam has {a} different shirts, {b} different pairs of "
                           f"pants and {c} different hats. How many different outfits of one "
                           f"shirt, one pair of pants and one hat can Sam make?",
                           Fraction(a * b * c), {"a": a, "b": b, "c": c})
    if kind == "sum_rule":  # addition principle: one-digit addition in words
        red, blue = (r(1, 5), r(1, 4)) if difficulty == 0 else (r(2, 9), r(5, 9))
        return MathProblem("sum_rule", f"A drawer holds {red} different red shirts and {blue} "
                           f"different blue shirts. In how many ways can one shirt be picked?",
                           Fraction(red + blue), {"a": red, "b": blue})
    if kind == "choose":
        n = {1: r(3, 8), 2: r(5, 12), 3: r(10, 20)}[difficulty]
        k = 2 if difficulty == 1 else r(2, n - 2)
        return MathProblem("choose", f"In how many ways can a team of {k} be chosen from {n} "
                           f"people?", Fraction(math.comb(n, k)), {"n": n, "k": k})
    if kind == "podium":
        n = r(4, 10)
        return MathProblem("podium", f"{n} runners race. In how many ways can the gold, silver "
                           f"and bronze medals be awarded?", Fraction(math.perm(n, 3)), {"n": n})
    if kind == "letters":  # multinomial: len! / prod(count!)
        word = "".join(rng.choice("ABCDE") for _ in range(r(5, 8)))
        count = math.factorial(len(word))
        for letter in set(word):
            count //= math.factorial(word.count(letter))
        return MathProblem("letters", f"How many distinct arrangements of the letters {word} "
                           f"are there?", Fraction(count), {"word": word})
    if kind == "committee":
        men, women, k = r(3, 7), r(2, 6), r(2, 4)
        count = math.comb(men + women, k) - math.comb(men, k)
        return MathProblem("committee", f"A club has {men} men and {women} women. How many "
                           f"committees of {k} people include at least one woman?",
                           Fraction(count), {"men": men, "women": women, "k": k})
    if kind == "together":  # glue the pair into one block: (n-1)! block orders x 2 inside
        n = r(4, 7)
        return MathProblem("together", f"In how many ways can {n} people stand in a line if "
                           f"two particular people must stand next to each other?",
                           Fraction(2 * math.factorial(n - 1)), {"n": n})
    if kind == "apart":  # complement of "together"
        n = r(4, 7)
        return MathProblem("apart", f"In how many ways can {n} people stand in a line if two "
                           f"particular people must not stand next to each other?",
                           Fraction(math.factorial(n) - 2 * math.factorial(n - 1)), {"n": n})
    if kind == "stars_bars":
        n, k = r(4, 16), r(2, 5)
        return MathProblem("stars_bars", f"In how many ways can {n} identical candies be given "
                           f"to {k} children if each child gets at least one candy?",
                           Fraction(math.comb(n - 1, k - 1)), {"n": n, "k": k})
    n = r(3, 7)  # derangements: D(n) = (n - 1) * (D(n-1) + D(n-2))
    previous, current = 1, 0  # D(0), D(1)
    for i in range(2, n + 1):
        previous, current = current, (i - 1) * (current + previous)
    return MathProblem("derangement", f"{n} letters are put into their {n} addressed envelopes "
                       f"at random. In how many ways can this be done so that no letter is in "
                       f"its own envelope?", Fraction(current), {"n": n})


# Primitive Pythagorean triples (a, b, c) with c < 50, scaled at random for variety.
_TRIPLES = ((3, 4, 5), (5, 12, 13), (8, 15, 17), (7, 24, 25), (20, 21, 29), (9, 40, 41))


def _geometry(rng: random.Random, difficulty: int, integer_only: bool) -> MathProblem:
    r = rng.randint
    kinds = {
        0: ["rectangle_area", "square_perimeter", "triangle_perimeter"],
        1: ["rectangle_perimeter", "triangle_area"],
        2: ["hypotenuse", "right_triangle_area", "rectangle_area"],
        3: ["missing_leg", "trapezoid_area"],
        4: ["coordinate_triangle", "area_from_hypotenuse"],
    }[difficulty]
    kind = rng.choice(kinds)
    a, b, c = rng.choice(_TRIPLES)
    scale = r(1, 3)
    a, b, c = a * scale, b * scale, c * scale
    if kind == "rectangle_area":
        w, h = (r(1, 3), r(1, 3)) if difficulty == 0 else (r(10, 40), r(2, 9))
        return MathProblem("rectangle_area", f"A rectangle is {w} units wide and {h} units tall. "
                           f"What is its area?", Fraction(w * h), {"w": w, "h": h})
    if kind == "square_perimeter":
        s = r(1, 2)
        return MathProblem("square_perimeter", f"A square has sides of length {s}. What is its "
                           f"perimeter?", Fraction(4 * s), {"s": s})
    if kind == "triangle_perimeter":
        sides = sorted(r(1, 5) for _ in range(3))
        sides[2] = min(sides[2], sides[0] + sides[1] - 1)  # triangle inequality
        rng.shuffle(sides)
        return MathProblem("triangle_perimeter", f"A triangle has sides of length {sides[0]}, "
                           f"{sides[1]} and {sides[2]}. What is its perimeter?",
                           Fraction(sum(sides)), {"sides": sides})
    if kind == "rectangle_perimeter":
        w, h = r(2, 20), r(2, 20)
        return MathProblem("rectangle_perimeter", f"A rectangle is {w} units wide and {h} units "
                           f"tall. What is its perimeter?", Fraction(2 * (w + h)), {"w": w, "h": h})
    if kind == "triangle_area":
        base, height = 2 * r(1, 10), r(1, 12)  # even base keeps the area whole
        return MathProblem("triangle_area", f"A triangle has base {base} and height {height}. "
                           f"What is its area?", Fraction(base * height, 2),
                           {"base": base, "height": height})
    if kind == "hypotenuse":
        return MathProblem("hypotenuse", f"A right triangle has legs of length {a} and {b}. How "
                           f"long is its hypotenuse?", Fraction(c), {"legs": [a, b]})
    if kind == "right_triangle_area":
        return MathProblem("right_triangle_area", f"A right triangle has legs of length {a} and "
                           f"{b}. What is its area?", Fraction(a * b, 2), {"legs": [a, b]})
    if kind == "missing_leg":
        return MathProblem("missing_leg", f"A right triangle has hypotenuse {c} and one leg of "
                           f"length {a}. How long is the other leg?", Fraction(b),
                           {"hypotenuse": c, "leg": a})
    if kind == "area_from_hypotenuse":
        return MathProblem("area_from_hypotenuse", f"A right triangle has hypotenuse {c} and one "
                           f"leg of length {b}. What is its area?", Fraction(a * b, 2),
                           {"hypotenuse": c, "leg": b})
    if kind == "trapezoid_area":
        top, bottom, height = r(2, 15), r(2, 15), r(2, 12)
        if integer_only and (top + bottom) * height % 2:
            height += 1
        return MathProblem("trapezoid_area", f"A trapezoid has parallel sides of length {top} "
                           f"and {bottom} and height {height}. What is its area?",
                           Fraction((top + bottom) * height, 2),
                           {"top": top, "bottom": bottom, "height": height})
    while True:  # a non-degenerate triangle (and a whole area when asked); few redraws
        points = [(r(-9, 9), r(-9, 9)) for _ in range(3)]
        (x1, y1), (x2, y2), (x3, y3) = points
        twice_area = abs((x2 - x1) * (y3 - y1) - (x3 - x1) * (y2 - y1))
        if twice_area and not (integer_only and twice_area % 2):
            break
    shown = ", ".join(f"({x}, {y})" for x, y in points)
    return MathProblem("coordinate_triangle", f"What is the area of the triangle with vertices "
                       f"{shown}?", Fraction(twice_area, 2), {"points": points})
