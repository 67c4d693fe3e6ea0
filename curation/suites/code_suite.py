"""The procedural code suite: seeded function-writing problems with HumanEval-style tests.

`draw_code_problems` returns the problems with their private solutions (for tests and
sanity checks); `generate_code` turns them into rows whose reference is
`{"tests": ..., "entry_point": ...}` and never contains a solution.
"""

import random

from passband.curation.suites.code_catalog_advanced import DIFFICULTY_2, DIFFICULTY_3
from passband.curation.suites.code_catalog_basic import DIFFICULTY_0, DIFFICULTY_1
from passband.curation.suites.code_problem import CodeProblem, render_prompt, render_tests
from passband.curation.suites.round_robin import draw_round_robin

MAKERS_BY_DIFFICULTY = (DIFFICULTY_0, DIFFICULTY_1, DIFFICULTY_2, DIFFICULTY_3)
MAX_DIFFICULTY = len(MAKERS_BY_DIFFICULTY) - 1
# Consecutive duplicate draws after which a difficulty counts as exhausted. Difficulty 0's rarest
# prompts (one constant of one of 32 makers) come up about once in 1,000 draws, so 500 gave up
# at 164-175 of its 175; 5,000 reaches all of them for seeds 0-9 in a fraction of a second. A
# larger limit changes no draw that succeeded before, it only stops giving up early.
MAX_DUPLICATE_DRAWS = 5000


def draw_code_problems(num_problems: int, seed: int, difficulty: int = 0) -> list[CodeProblem]:
    """`num_problems` problems with distinct prompts, drawn uniformly over the difficulty's makers.

    Raises ValueError when the difficulty has fewer distinct prompts than requested.
    """
    if not 0 <= difficulty <= MAX_DIFFICULTY:
        raise ValueError(f"difficulty must be in 0..{MAX_DIFFICULTY}, got {difficulty}")
    if num_problems < 0:
        raise ValueError(f"num_problems must be >= 0, got {num_problems}")
    makers = MAKERS_BY_DIFFICULTY[difficulty]
    rng = random.Random(f"code:{difficulty}:{seed}")
    drawn = draw_round_robin(
        [difficulty], lambda _: rng.choice(makers)(rng), key=render_prompt, num=num_problems,
        max_duplicate_draws=MAX_DUPLICATE_DRAWS,
        exhausted_message=lambda _, drawn: (f"code difficulty {difficulty} ran out of distinct problems after "
                                            f"{drawn}; ask for fewer problems or another difficulty"))
    return [problem for _, problem in drawn]


def generate_code(num_problems: int, seed: int, difficulty: int = 0) -> list[dict]:
    """Rows for `draw_code_problems(num_problems, seed, difficulty)`, in the same order."""
    return [
        {
            "id": f"code-{problem.topic}-d{difficulty}-s{seed}-{i}",
            "task": "code",
            "subdomain": problem.topic,
            "prompt": render_prompt(problem),
            "reference": {"tests": render_tests(problem), "entry_point": problem.entry_point},
            "source": f"procedural-code-d{difficulty}",
            "difficulty": difficulty,
        }
        for i, problem in enumerate(draw_code_problems(num_problems, seed, difficulty))
    ]
