"""Teacher-written tool turns for procedural math problems: a Python program that computes the
answer from the problem's parameters, then the answer.

The multi-turn SFT data of math with the Python tool (docs/multi-turn.md, "Tool traces from a
teacher"): the student's own verified episodes hold few tool calls while a small model rarely calls
the tool, so a template teacher writes the call. Its first turn calls the `python` tool in the
Hermes format (training/episodes/tool_calls.py) with a short program; its second reads the output and
gives the answer as the prompt asks. The turns are text: the episode that runs them (the real
sandbox runs the program, the math verifier grades the answer, training/episodes/teacher.py) makes
the tokens and keeps only episodes whose program printed the answer and whose answer passed.

Programs compute, they do not print a constant: each kind's is how one would check the answer in
Python (a linear equation solved from the line's values at 0 and 1, divisors counted by trial).
"""

from __future__ import annotations

import json
import re
from fractions import Fraction

from passband.curation.suites.math_problems import MathProblem, render_answer
from passband.curation.suites.math_suite import AnswerFormat

CALL_INTRO = "Let me compute it with Python."
"""The teacher's words before its tool call."""

_NUMBER = re.compile(r"-?\d+(\.\d+)?(/[1-9]\d*)?")  # what Fraction() reads of a printed int, float or Fraction
_IMPLICIT = re.compile(r"(\d|\))\s*(?=[x(])")  # 3x, 2(x + 1), (x + 1)(x - 2): multiplication made explicit


def _linear_equation(equation: str) -> str:
    lhs, rhs = (side.strip() for side in _IMPLICIT.sub(r"\1*", equation).split("="))
    return ("from fractions import Fraction\n\n"
            f"def f(x):\n    return ({lhs}) - ({rhs})\n\n"
            "# f is linear: its root from its values at 0 and 1\n"
            "f0, f1 = f(Fraction(0)), f(Fraction(1))\n"
            "print(-f0 / (f1 - f0))")


def tool_program(problem: MathProblem) -> str | None:
    """A Python program that prints `problem`'s answer, computed from its parameters; None for a kind
    the teacher has no program for."""
    p = problem.params
    programs = {
        "expression": lambda: ("from fractions import Fraction as F\n" if "F(" in p["expression"] else "")
        + f"print({p['expression']})",
        "linear_equation": lambda: _linear_equation(p["equation"]),
        "remainder": lambda: f"print({p['a']} % {p['m']})",
        "gcd": lambda: f"import math\nprint(math.gcd({p['numbers'][0]}, {p['numbers'][1]}))",
        "lcm": lambda: f"import math\nprint(math.lcm({', '.join(map(str, p['numbers']))}))",
        "divisor_count": lambda: f"n = {p['n']}\nprint(len([d for d in range(1, n + 1) if n % d == 0]))",
        "power_mod": lambda: f"print(pow({p['a']}, {p['k']}, {p['m']}))",
        "divisor_sum": lambda: f"n = {p['n']}\nprint(sum(d for d in range(1, n + 1) if n % d == 0))",
        "totient": lambda: f"import math\nn = {p['n']}\nprint(sum(1 for i in range(1, n + 1) if math.gcd(i, n) == 1))",
        "arrange": lambda: f"import math\nprint(math.factorial({p['n']}))",
        "outfits": lambda: "print(" + " * ".join(str(p[key]) for key in ("a", "b", "c") if key in p) + ")",
        "sum_rule": lambda: f"print({p['a']} + {p['b']})",
        "choose": lambda: f"import math\nprint(math.comb({p['n']}, {p['k']}))",
        "podium": lambda: f"import math\nprint(math.perm({p['n']}, 3))",
        "letters": lambda: ("import math\nfrom collections import Counter\n"
                            f"word = {p['word']!r}\ncount = math.factorial(len(word))\n"
                            "for repeats in Counter(word).values():\n    count //= math.factorial(repeats)\n"
                            "print(count)"),
        "committee": lambda: (f"import math\nmen, women, k = {p['men']}, {p['women']}, {p['k']}\n"
                              "# all committees less those of men only\n"
                              "print(math.comb(men + women, k) - math.comb(men, k))"),
        "together": lambda: f"import math\nn = {p['n']}\nprint(2 * math.factorial(n - 1))",
        "apart": lambda: f"import math\nn = {p['n']}\nprint(math.factorial(n) - 2 * math.factorial(n - 1))",
        "stars_bars": lambda: f"import math\nprint(math.comb({p['n']} - 1, {p['k']} - 1))",
        "derangement": lambda: (f"n = {p['n']}\nd = [1, 0]\nfor i in range(2, n + 1):\n"
                                "    d.append((i - 1) * (d[-1] + d[-2]))\nprint(d[n])"),
        "rectangle_area": lambda: f"print({p['w']} * {p['h']})",
        "square_perimeter": lambda: f"print(4 * {p['s']})",
        "triangle_perimeter": lambda: "print(" + " + ".join(map(str, p["sides"])) + ")",
        "rectangle_perimeter": lambda: f"print(2 * ({p['w']} + {p['h']}))",
        "triangle_area": lambda: f"from fractions import Fraction\nprint(Fraction({p['base']} * {p['height']}, 2))",
        "hypotenuse": lambda: f"import math\nprint(math.isqrt({p['legs'][0]}**2 + {p['legs'][1]}**2))",
        "right_triangle_area": lambda: f"from fractions import Fraction\nprint(Fraction({p['legs'][0]} * {p['legs'][1]}, 2))",
        "missing_leg": lambda: f"import math\nprint(math.isqrt({p['hypotenuse']}**2 - {p['leg']}**2))",
        "area_from_hypotenuse": lambda: (f"import math\nfrom fractions import Fraction\nc, b = {p['hypotenuse']}, {p['leg']}\n"
                                         "a = math.isqrt(c**2 - b**2)\nprint(Fraction(a * b, 2))"),
        "trapezoid_area": lambda: (f"from fractions import Fraction\ntop, bottom, height = {p['top']}, {p['bottom']}, "
                                   f"{p['height']}\nprint(Fraction((top + bottom) * height, 2))"),
        "coordinate_triangle": lambda: (f"from fractions import Fraction\n(x1, y1), (x2, y2), (x3, y3) = {p['points']}\n"
                                        "# the shoelace formula\n"
                                        "print(Fraction(abs(x1 * (y2 - y3) + x2 * (y3 - y1) + x3 * (y1 - y2)), 2))"),
    }
    write = programs.get(problem.kind)
    return write() if write else None


def call_turn(program: str) -> str:
    """The teacher's first turn: a line, then the `python` call in the Hermes format."""
    call = json.dumps({"name": "python", "arguments": {"code": program}})
    return f"{CALL_INTRO}\n<tool_call>\n{call}\n</tool_call>"


def answer_turn(problem: MathProblem, answer_format: AnswerFormat) -> str:
    """The teacher's last turn: the answer as the prompt asks for it."""
    answer = render_answer(problem.answer)
    final = "\\boxed{" + answer + "}" if answer_format == "boxed" else answer
    return f"The program printed the answer. The answer is {final}."


def printed_answer(output: str, problem: MathProblem) -> bool:
    """Whether the tool's output is the problem's answer (its last line as a number: 7, 7.0, 7/2)."""
    last = output.strip().splitlines()[-1].strip() if output.strip() else ""
    return bool(_NUMBER.fullmatch(last)) and Fraction(last) == problem.answer
