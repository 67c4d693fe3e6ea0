"""One procedural function-writing problem, and how it becomes HumanEval-style tests.

A problem carries two implementations kept out of the row: `oracle`, a Python callable that
computes the expected outputs, and `solution`, source text written a different way, which the
tests check the generated asserts against (with `wrong_solution`, a plausible bug they must
catch).
"""

import random
from dataclasses import dataclass
from typing import Any, Callable


@dataclass(frozen=True)
class CodeProblem:
    """A function to write, its test cases, and the private solutions used to check them."""

    topic: str  # "arithmetic", "strings", "lists" or "logic"
    signature: str  # e.g. "add(a, b)"
    description: str  # completes "... that <description>."
    cases: tuple[tuple[tuple[Any, ...], Any], ...]  # (arguments, expected result)
    solution: str  # correct source defining the function; never shown to the model
    wrong_solution: str  # plausible but wrong source that the cases must reject

    @property
    def entry_point(self) -> str:
        return self.signature.split("(")[0]


def make_problem(
    topic: str,
    signature: str,
    description: str,
    oracle: Callable[..., Any],
    inputs: list[tuple[Any, ...]],
    solution: str,
    wrong_solution: str,
) -> CodeProblem:
    """Build a problem whose expected results come from `oracle` on each argument tuple."""
    cases = tuple((args, oracle(*args)) for args in inputs)
    return CodeProblem(topic, signature, description, cases, solution, wrong_solution)


def int_lists(
    rng: random.Random, fixed: list[list[int]], low: int = -9, min_len: int = 1
) -> list[tuple[list[int]]]:
    """One-argument inputs: the `fixed` lists (edge cases) plus two random ones."""
    drawn = [[rng.randint(low, 9) for _ in range(rng.randint(min_len, min_len + 5))]
             for _ in range(2)]
    return [(items,) for items in fixed + drawn]


def render_tests(problem: CodeProblem) -> str:
    """HumanEval-style `check(candidate)` plus the call, so the source fails on its own.

    The call matters: a verifier that runs the tests after the candidate code and passes on
    exit status 0 would pass every candidate if `check` were only defined.
    """
    lines = ["def check(candidate):"]
    for args, expected in problem.cases:
        call = ", ".join(repr(arg) for arg in args)
        lines.append(f"    assert candidate({call}) == {expected!r}")
    return "\n".join(lines) + f"\n\n\ncheck({problem.entry_point})\n"


def render_prompt(problem: CodeProblem) -> str:
    """The instruction the model sees: signature, behaviour, and the required code block."""
    return (f"Write a Python function `{problem.signature}` that {problem.description}. "
            f"Put the function in a ```python code block.")
