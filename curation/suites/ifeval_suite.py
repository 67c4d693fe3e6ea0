"""The procedural instruction-following suite: simple writing tasks with 1..N verifiable
constraints, each stated in plain English in the prompt and as an IFEval instruction in the
reference.

Difficulty picks the constraint pool: "easy" holds the kinds the demo model can meet
(keyword inclusion, sentence counts, no commas, start/end phrases; docs/recipe.md section 10),
"hard" the formatting and case ones (all caps: 0% on the demo model), "mixed" both.
Row i comes from one seeded stream, so the first k rows of a larger request equal a request
for k rows.
"""

import random
from typing import Literal

from passband.curation.suites.round_robin import draw_round_robin
from passband.curation.suites.ifeval_constraints import (
    EASY_IDS,
    HARD_IDS,
    TASKS,
    TOPICS,
    WORDS,
    compatible,
    make_instruction,
)

Difficulty = Literal["easy", "hard", "mixed"]
# Instruction id prefix (IFEval's category) -> the row's subdomain.
SUBDOMAINS = {
    "keywords": "keywords",
    "length_constraints": "length",
    "detectable_format": "format",
    "change_case": "case",
    "punctuation": "punctuation",
    "startend": "startend",
    "detectable_content": "content",
    "combination": "combination",
}
# Consecutive duplicate prompts after which the request counts as too large for the pool.
MAX_DUPLICATE_DRAWS = 500


def pool_for(difficulty: str) -> tuple[str, ...]:
    """The instruction ids a difficulty draws from."""
    if difficulty == "easy":
        return EASY_IDS
    if difficulty == "hard":
        return HARD_IDS
    if difficulty == "mixed":
        return EASY_IDS + HARD_IDS
    raise ValueError(f"difficulty must be 'easy', 'hard' or 'mixed', got {difficulty!r}")


def generate_ifeval(
    num_problems: int, seed: int, max_constraints: int = 3, difficulty: Difficulty = "easy"
) -> list[dict]:
    """`num_problems` rows with distinct prompts, each with 1..max_constraints constraints.

    The number of constraints is uniform in 1..max_constraints; a row may get fewer when its
    first draws leave nothing compatible (JSON combines only with keyword constraints).
    """
    if num_problems < 0:
        raise ValueError(f"num_problems must be >= 0, got {num_problems}")
    pool = pool_for(difficulty)
    if not 1 <= max_constraints <= len(pool):
        raise ValueError(f"max_constraints must be in 1..{len(pool)} for difficulty "
                         f"{difficulty!r}, got {max_constraints}")
    rng = random.Random(f"ifeval:{difficulty}:{max_constraints}:{seed}")
    drawn = draw_round_robin(
        [difficulty], lambda _: _draw_problem(rng, pool, max_constraints), key=lambda problem: problem[0],
        num=num_problems, max_duplicate_draws=MAX_DUPLICATE_DRAWS,
        exhausted_message=lambda _, rows: f"ran out of distinct prompts after {rows} rows; ask for fewer")
    return [
        {
            "id": f"ifeval-{difficulty}-c{max_constraints}-s{seed}-{index}",
            "task": "ifeval",
            "subdomain": SUBDOMAINS[instructions[0]["id"].split(":")[0]],
            "prompt": prompt,
            "reference": {"instructions": instructions},
            "source": "passband-procedural",
        }
        for index, (_, (prompt, instructions)) in enumerate(drawn)
    ]


def _draw_problem(
    rng: random.Random, pool: tuple[str, ...], max_constraints: int
) -> tuple[str, list[dict]]:
    """One writing task plus compatible constraints: (prompt, IFEval instructions)."""
    task = rng.choice(TASKS).format(topic=rng.choice(TOPICS))
    num_constraints = rng.randint(1, max_constraints)
    candidates = list(pool)
    rng.shuffle(candidates)
    words = list(WORDS)
    rng.shuffle(words)
    chosen: list[str] = []
    for candidate in candidates:
        if len(chosen) == num_constraints:
            break
        if compatible(chosen, candidate):
            chosen.append(candidate)
    instructions, sentences = [], [task]
    for instruction_id in chosen:
        kwargs, text = make_instruction(instruction_id, rng, words, task)
        instructions.append({"id": instruction_id, "kwargs": kwargs})
        sentences.append(text)
    return " ".join(sentences), instructions
