"""Worked solutions in numbered steps for the math suite's problems, and the defects injected into them.

A solution is a chain of binary steps (`Step`): each says why it holds, what it computes, and
computes it from numbers of the problem and values of earlier steps; a last step states the answer
in \\boxed{}. Because values flow through the chain, a defect's effect is computed, not assumed:
- unjustified_step: step k states its value with neither the reason nor the computation;
- minor_slip: step k writes one of its numbers wrong (copied +delta) while its value stays right, so
  the shown computation is false and the answer is unchanged;
- wrong_step: step k's value is off by delta, and every later step computes from it;
- wrong_result: every step is right and the answer line states the answer off by delta.
Problems whose kind has no chain here (gcd, divisor counts, hypotenuses, one-book shelves), or
whose chain admits no slip (0 x 0), are not used (`chain_for` returns None).
"""

import math
import random
import re
from dataclasses import dataclass
from fractions import Fraction

from passband.curation.suites.math_problems import MathProblem, render_answer


@dataclass(frozen=True)
class Ref:
    """The value of an earlier step, by its 1-based number."""

    step: int


Operand = Fraction | Ref


@dataclass(frozen=True)
class Step:
    """One computation: `target = left op right`, justified by `reason`."""

    reason: str  # why it holds, e.g. "Subtract 5 from both sides"
    target: str  # what it computes, e.g. "x", "the area"
    left: Operand
    op: str  # "+", "-", "×" or "/"
    right: Operand


@dataclass(frozen=True)
class Defect:
    """What was injected where: `step` is the 1-based step shown (None for complete); `delta` the
    amount a number or value is off by; `side` the operand a slip miswrites."""

    kind: str
    step: int | None = None
    delta: int = 0
    side: str = "left"


def apply(op: str, left: Fraction, right: Fraction) -> Fraction:
    if op == "+":
        return left + right
    if op == "-":
        return left - right
    if op == "×":
        return left * right
    if op == "/":
        return left / right
    raise ValueError(f"unknown step operator {op!r}")


def operands(step: Step, computed: list[Fraction]) -> tuple[Fraction, Fraction]:
    """The step's two numbers, earlier steps' values (as `computed` holds them) filled in."""
    left, right = (computed[x.step - 1] if isinstance(x, Ref) else x for x in (step.left, step.right))
    return left, right


def values(chain: list[Step], wrong_at: int | None = None, delta: int = 0) -> list[Fraction]:
    """Each step's value; step `wrong_at` (1-based) off by `delta`, and later steps computed from it."""
    computed: list[Fraction] = []
    for number, step in enumerate(chain, start=1):
        computed.append(apply(step.op, *operands(step, computed)) + (delta if number == wrong_at else 0))
    return computed


def _show(value: Fraction, operand: bool = True) -> str:
    """A number as a step writes it: 7, 25/2, and a negative operand in parentheses, (-3)."""
    text = str(value.numerator) if value.denominator == 1 else f"{value.numerator}/{value.denominator}"
    return f"({text})" if operand and value < 0 else text


def render_solution(chain: list[Step], defect: Defect) -> str:
    """The solution text, one "Step K: ..." line per step and the answer line last."""
    wrong_at = defect.step if defect.kind == "wrong_step" else None
    computed = values(chain, wrong_at, defect.delta)
    lines = []
    for number, step in enumerate(chain, start=1):
        value = computed[number - 1]
        if defect.kind == "unjustified_step" and number == defect.step:
            lines.append(f"Step {number}: {step.target[0].upper()}{step.target[1:]} = {_show(value, False)}.")
            continue
        left, right = operands(step, computed)
        if defect.kind == "minor_slip" and number == defect.step:
            left, right = (left + defect.delta, right) if defect.side == "left" else (left, right + defect.delta)
        lines.append(f"Step {number}: {step.reason}: {step.target} = {_show(left)} {step.op} {_show(right)} "
                     f"= {_show(value, False)}.")
    answer = computed[-1] + (defect.delta if defect.kind == "wrong_result" else 0)
    lines.append(f"Step {len(chain) + 1}: So the answer is \\boxed{{{render_answer(answer)}}}.")
    return "\n".join(lines)


def slip_sides(chain: list[Step], number: int, delta: int) -> list[str]:
    """The operands of step `number` whose miswriting by `delta` makes its shown computation false."""
    computed = values(chain)
    step = chain[number - 1]
    left, right = operands(step, computed)
    value = computed[number - 1]
    sides = []
    if apply(step.op, left + delta, right) != value:
        sides.append("left")
    if not (step.op == "/" and right + delta == 0) and apply(step.op, left, right + delta) != value:
        sides.append("right")
    return sides


def plan_defect(chain: list[Step], kind: str, rng: random.Random) -> Defect:
    """Where and by how much `kind` is injected into `chain`, drawn from `rng`."""
    delta = rng.choice([1, 2])
    numbers = list(range(1, len(chain) + 1))
    if kind == "complete":
        return Defect(kind)
    if kind == "unjustified_step":
        return Defect(kind, rng.choice(numbers))
    if kind == "minor_slip":
        slips = [(number, size, side) for size in (1, 2) for number in numbers
                 for side in slip_sides(chain, number, size)]
        number, size, side = rng.choice(slips)
        return Defect(kind, number, size, side)
    if kind == "wrong_step":
        right = values(chain)[-1]
        # a step whose error reaches the answer (the last step's always does)
        return Defect(kind, rng.choice([n for n in numbers if values(chain, n, delta)[-1] != right]), delta)
    if kind == "wrong_result":
        return Defect(kind, len(chain) + 1, delta)
    raise ValueError(f"unknown defect kind {kind!r}")


_EXPRESSION = re.compile(r"^(\d+) ([-+*]) (\d+)$")
_EQUATION = re.compile(r"^(-?\d*)x(?: ([+-]) (\d+))? = (-?\d+)$")


def chain_for(problem: MathProblem) -> list[Step] | None:
    """The worked chain of `problem`, or None when its kind has none here or it admits no slip."""
    chain = _chain(problem.kind, problem.params)
    if chain is None or values(chain)[-1] != problem.answer:
        return None
    if not any(slip_sides(chain, number, delta) for number in range(1, len(chain) + 1) for delta in (1, 2)):
        return None
    return chain


def _chain(kind: str, p: dict) -> list[Step] | None:
    F = Fraction
    if kind == "expression":
        return _expression_chain(p["expression"])
    if kind == "linear_equation":
        return _equation_chain(p["equation"])
    if kind == "remainder":
        a, m = p["a"], p["m"]
        return [Step(f"The largest multiple of {m} that is at most {a} is {m} times {a // m}", "that multiple",
                     F(m), "×", F(a // m)),
                Step(f"The remainder is what is left of {a}", "the remainder", F(a), "-", Ref(1))]
    if kind == "lcm" and len(p["numbers"]) == 2:
        a, b = p["numbers"]
        return [Step("Multiply the two numbers", "their product", F(a), "×", F(b)),
                Step(f"Divide by their greatest common divisor, {math.gcd(a, b)}", "the least common multiple",
                     Ref(1), "/", F(math.gcd(a, b)))]
    if kind == "arrange" and p["n"] >= 2:
        n = p["n"]
        chain = [Step(f"The first place can hold any of the {n} books and the second any of the {n - 1} left",
                      "the orders of the first two places", F(n), "×", F(n - 1))]
        chain += [Step(f"The next place can hold any of the {k} books left", "the orders so far",
                       Ref(i + 1), "×", F(k)) for i, k in enumerate(range(n - 2, 0, -1))]
        return chain
    if kind == "outfits":
        chain = [Step("Every shirt goes with every pair of pants", "the shirt and pants pairs",
                      F(p["a"]), "×", F(p["b"]))]
        if "c" in p:
            chain.append(Step("Every such pair goes with every hat", "the outfits", Ref(1), "×", F(p["c"])))
        return chain
    if kind == "sum_rule":
        return [Step("A red and a blue shirt are different picks, so the two counts add", "the ways",
                     F(p["a"]), "+", F(p["b"]))]
    if kind == "choose":
        n, k = p["n"], p["k"]
        chain = [Step(f"Pick the members in order: any of {n} first, then any of the {n - 1} others",
                      "the ordered picks", F(n), "×", F(n - 1))]
        chain += [Step(f"Then any of the {n - j} left", "the ordered picks", Ref(j - 1), "×", F(n - j))
                  for j in range(2, k)]
        chain.append(Step(f"Each team of {k} was picked in {math.factorial(k)} orders, so divide by {k}!",
                          "the teams", Ref(len(chain)), "/", F(math.factorial(k))))
        return chain
    if kind == "podium":
        n = p["n"]
        return [Step(f"The gold can go to any of the {n} runners and the silver to any of the {n - 1} others",
                     "gold and silver", F(n), "×", F(n - 1)),
                Step(f"The bronze can go to any of the {n - 2} left", "the ways", Ref(1), "×", F(n - 2))]
    if kind == "rectangle_area":
        return [Step("A rectangle's area is its width times its height", "the area", F(p["w"]), "×", F(p["h"]))]
    if kind == "square_perimeter":
        return [Step("A square has four sides of equal length", "the perimeter", F(4), "×", F(p["s"]))]
    if kind == "triangle_perimeter":
        a, b, c = p["sides"]
        return [Step("The perimeter is the sum of the sides; add the first two", "two sides", F(a), "+", F(b)),
                Step("Add the third", "the perimeter", Ref(1), "+", F(c))]
    if kind == "rectangle_perimeter":
        return [Step("Add the width and the height", "half the perimeter", F(p["w"]), "+", F(p["h"])),
                Step("The perimeter runs along each of them twice", "the perimeter", F(2), "×", Ref(1))]
    if kind in ("triangle_area", "right_triangle_area"):
        base, height = (p["base"], p["height"]) if kind == "triangle_area" else p["legs"]
        reason = "Multiply the base by the height" if kind == "triangle_area" else \
            "The two legs are a base and its height; multiply them"
        return [Step(reason, "base times height", F(base), "×", F(height)),
                Step("A triangle's area is half of that", "the area", Ref(1), "/", F(2))]
    return None


def _expression_chain(expression: str) -> list[Step] | None:
    match = _EXPRESSION.match(expression)
    if match is None:
        return None
    a, op, b = int(match[1]), match[2], int(match[3])
    F = Fraction
    if op in "+-" and b >= 10:  # two-digit: the tens first, then the ones
        verb = "Add" if op == "+" else "Subtract"
        return [Step(f"{verb} the tens of {b}", "the first part", F(a), op, F(b - b % 10)),
                Step(f"Then {verb.lower()} its ones", "the result", Ref(1), op, F(b % 10))]
    if op in "+-":
        return [Step("Add the two numbers" if op == "+" else "Subtract the second number from the first",
                     "the result", F(a), op, F(b))]
    if a >= 10:  # a two-digit times a one-digit number: distribute over tens and ones
        return [Step(f"Multiply the tens of {a} by {b}", "the tens part", F(a - a % 10), "×", F(b)),
                Step(f"Multiply the ones of {a} by {b}", "the ones part", F(a % 10), "×", F(b)),
                Step("Add the two parts", "the product", Ref(1), "+", Ref(2))]
    return [Step("Multiply the two numbers", "the product", F(a), "×", F(b))]


def _equation_chain(equation: str) -> list[Step] | None:
    match = _EQUATION.match(equation)
    if match is None:
        return None
    coefficient = {"": 1, "-": -1}.get(match[1])
    coefficient = int(match[1]) if coefficient is None else coefficient
    sign, constant, rhs = match[2], match[3], Fraction(int(match[4]))
    lhs = {1: "x", -1: "-x"}.get(coefficient, f"{coefficient}x")
    chain = []
    if constant is not None:
        k = Fraction(int(constant))
        chain.append(Step(f"Subtract {k} from both sides" if sign == "+" else f"Add {k} to both sides",
                          lhs, rhs, "-" if sign == "+" else "+", k))
    if coefficient != 1:
        chain.append(Step(f"Divide both sides by {coefficient}", "x", Ref(1) if chain else rhs, "/",
                          Fraction(coefficient)))
    return chain or None
