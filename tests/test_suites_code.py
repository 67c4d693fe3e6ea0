"""The procedural code suite: every problem's tests pass its solution and reject a wrong one."""

import random
import re

import pytest

from passband.curation.suites.code_problem import CodeProblem, render_tests
from passband.curation.suites.code_suite import (
    MAKERS_BY_DIFFICULTY,
    MAX_DIFFICULTY,
    draw_code_problems,
    generate_code,
)
from passband.curation.suites.rows import validate_row
from passband.curation.verifiers.code import verify_code

NUM_SEEDS = 8


def _passes(solution: str, tests: str) -> bool:
    """Run candidate source then the tests in a fresh namespace, as the verifier's sandbox does."""
    namespace: dict = {}
    try:
        exec(solution + "\n" + tests, namespace)  # noqa: S102 - our own solutions and tests
    except AssertionError:
        return False
    return True


def _all_problems(difficulty: int) -> list[CodeProblem]:
    """Every maker of the difficulty, called with several seeds (constants and inputs vary)."""
    return [maker(random.Random(seed)) for maker in MAKERS_BY_DIFFICULTY[difficulty]
            for seed in range(NUM_SEEDS)]


@pytest.mark.parametrize("difficulty", range(MAX_DIFFICULTY + 1))
def test_tests_pass_the_solution_and_fail_the_wrong_one(difficulty):
    problems = _all_problems(difficulty)
    for problem in problems:
        tests = render_tests(problem)
        assert _passes(problem.solution, tests), (problem.signature, tests)
        # A wrong solution may fail by a wrong value or by raising; it must not pass.
        try:
            wrong_passes = _passes(problem.wrong_solution, tests)
        except Exception:  # noqa: BLE001 - e.g. an IndexError in the buggy code counts as failing
            wrong_passes = False
        assert not wrong_passes, (problem.signature, tests)


def test_tests_call_check_so_a_missing_function_fails():
    problem = draw_code_problems(1, seed=0, difficulty=0)[0]
    with pytest.raises(NameError):
        _passes("pass\n", render_tests(problem))


def test_hand_checked_expectations():
    """Spot checks written by hand, against the generated asserts themselves."""
    tests = {p.entry_point: render_tests(p) for d in range(MAX_DIFFICULTY + 1)
             for p in _all_problems(d)}
    assert "    assert candidate(2, 3) == 5\n" in tests["add"]
    assert "    assert candidate(7) == False\n" in tests["is_even"]
    assert ("    assert candidate(15) == ['1', '2', 'Fizz', '4', 'Buzz', 'Fizz', '7', '8', "
            "'Fizz', 'Buzz', '11', 'Fizz', '13', '14', 'FizzBuzz']\n") in tests["fizzbuzz"]
    assert "    assert candidate(9) == False\n" in tests["is_prime"]
    assert "    assert candidate([3, 1, 3, 2, 1]) == [3, 1, 2]\n" in tests["dedupe"]
    assert "    assert candidate([1, 2, 3]) == [1, 3, 6]\n" in tests["running_sum"]
    assert "    assert candidate(1994) == 'MCMXCIV'\n" in tests["to_roman"]
    assert "    assert candidate('aabaa') == 'a2b1a2'\n" in tests["run_length_encode"]
    assert "    assert candidate('([)]') == False\n" in tests["balanced_brackets"]
    caesar = next(name for name in tests if name.startswith("caesar_"))
    shift = int(caesar.split("_")[1])
    shifted = "".join(chr((ord(c) - 97 + shift) % 26 + 97) for c in "xyz")
    assert f"    assert candidate('xyz abc!') == '{shifted} " in tests[caesar]


def test_difficulty_zero_is_tiny_one_line_functions():
    rows = generate_code(40, seed=0, difficulty=0)
    names = {row["reference"]["entry_point"] for row in rows}
    assert {"add", "max_of_two", "square", "is_even"} <= names
    assert {row["subdomain"] for row in rows} == {"arithmetic", "logic"}
    for problem in draw_code_problems(40, seed=0, difficulty=0):
        body = problem.solution.splitlines()[1:]
        assert len(body) == 1 and body[0].startswith("    return "), problem.solution


def test_rows_are_deterministic_valid_and_carry_no_solution():
    rows = generate_code(30, seed=4, difficulty=2)
    assert rows == generate_code(30, seed=4, difficulty=2)
    assert rows != generate_code(30, seed=5, difficulty=2)
    assert len({row["prompt"] for row in rows}) == 30
    problems = draw_code_problems(30, seed=4, difficulty=2)
    for index, (row, problem) in enumerate(zip(rows, problems)):
        assert validate_row(row, index) is None
        assert row["id"] == f"code-{problem.topic}-d2-s4-{index}"
        assert set(row["reference"]) == {"tests", "entry_point"}
        assert problem.solution not in row["prompt"] + row["reference"]["tests"]
        assert re.fullmatch(r"Write a Python function `\w+\(.*?\)` that .+\. Put the function "
                            r"in a ```python code block\.", row["prompt"])
        assert row["reference"]["tests"].endswith(f"check({problem.entry_point})\n")


def test_difficulty_zero_has_room_for_an_eval_set_and_a_training_pool():
    """The demo holds out ~100 difficulty-0 problems and trains on others; its presets draw all
    175 (12 fixed makers + 20 add_k + 11 multiply_by_k + 8 is_multiple_of_k + 13 fixed makers
    + 30 subtract_k + 31 is_greater_than_k + 31 is_less_than_k + 19 remainder_k)."""
    for seed in range(3):
        assert len(draw_code_problems(175, seed=seed, difficulty=0)) == 175
    with pytest.raises(ValueError, match="ran out of distinct problems after 175"):
        draw_code_problems(176, seed=0, difficulty=0)


def test_exhausted_difficulty_and_bad_difficulty_are_refused():
    with pytest.raises(ValueError, match="code difficulty 0 ran out of distinct problems"):
        generate_code(500, seed=0, difficulty=0)
    with pytest.raises(ValueError, match="difficulty must be in 0..3, got 4"):
        generate_code(1, seed=0, difficulty=4)


def test_the_code_verifier_runs_the_generated_tests():
    """End to end through the sandboxed verifier: the row format is what it expects."""
    problems = draw_code_problems(3, seed=1, difficulty=1)
    rows = generate_code(3, seed=1, difficulty=1)
    completions = [f"Here it is:\n```python\n{source}```" for problem in problems
                   for source in (problem.solution, problem.wrong_solution)]
    references = [row["reference"] for row in rows for _ in range(2)]
    results = verify_code(completions, references)
    assert [result.status for result in results] == ["pass", "fail"] * 3
