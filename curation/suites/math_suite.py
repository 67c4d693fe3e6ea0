"""The procedural math suite: seeded rows over sub-domains, at one difficulty.

The answer format decides both the instruction in the prompt and the extraction rule the
verifier must use. "plain" matches how the demo model was measured (docs/recipe.md section 10:
"answer with just the number", last number extracted); "boxed" is the target format that SFT
teaches. Plain prompts only get integer answers: a last-number extractor reads "3/4" as 4.
"""

import random
from typing import Literal

from passband.curation.suites.math_problems import MAX_DIFFICULTY, SUBDOMAINS, make_problem, render_answer
from passband.curation.suites.round_robin import draw_round_robin

AnswerFormat = Literal["boxed", "plain"]
# Consecutive duplicate draws after which a (subdomain, difficulty) counts as exhausted.
MAX_DUPLICATE_DRAWS = 500


def extraction_rule_for(answer_format: str) -> str:
    """The verifier's extraction rule matching the prompt's instruction."""
    if answer_format == "boxed":
        return "boxed"
    if answer_format == "plain":
        return "last_number"
    raise ValueError(f"answer_format must be 'boxed' or 'plain', got {answer_format!r}")


def instruction_for(answer_format: str) -> str:
    """The sentence appended to every question."""
    if answer_format == "boxed":
        return "Put the final answer in \\boxed{}."
    if answer_format == "plain":
        return "Answer with just the number."
    raise ValueError(f"answer_format must be 'boxed' or 'plain', got {answer_format!r}")


def render_prompt(question: str, answer_format: str) -> str:
    """The prompt: the question, then the instruction that fixes how the answer is written."""
    return f"{question} {instruction_for(answer_format)}"


def question_of(prompt: str) -> str:
    """`prompt` without a trailing answer-format instruction of this suite: one problem asked for a
    boxed and for a plain answer is one question (what decontamination must compare)."""
    for answer_format in ("boxed", "plain"):
        suffix = f" {instruction_for(answer_format)}"
        if prompt.endswith(suffix):
            return prompt[: -len(suffix)]
    return prompt


def generate_math(
    num_problems: int,
    seed: int,
    difficulty: int = 0,
    subdomains: list[str] | None = None,
    answer_format: AnswerFormat = "boxed",
    balanced: bool = True,
) -> list[dict]:
    """`num_problems` distinct rows, cycling through `subdomains` (all five by default).

    Each sub-domain draws from its own generator seeded by (seed, subdomain, difficulty), so
    adding a sub-domain does not change the problems of the others. Balanced, raises ValueError
    when a sub-domain has fewer distinct problems at this difficulty than its share; unbalanced, a
    sub-domain that runs out leaves the cycle and the others fill the rest (difficulty 0 holds 32
    combinatorics questions but 100 arithmetic ones). Rows before the first sub-domain runs out
    are the same either way.
    """
    if num_problems < 0:
        raise ValueError(f"num_problems must be >= 0, got {num_problems}")
    if not 0 <= difficulty <= MAX_DIFFICULTY:
        raise ValueError(f"difficulty must be in 0..{MAX_DIFFICULTY}, got {difficulty}")
    instruction_for(answer_format)  # refuse an unknown format before drawing anything
    chosen = list(SUBDOMAINS) if subdomains is None else list(subdomains)
    unknown = [name for name in chosen if name not in SUBDOMAINS]
    if unknown or not chosen:
        raise ValueError(f"subdomains must be a non-empty subset of {list(SUBDOMAINS)}, "
                         f"got {subdomains!r}")
    rngs = {name: random.Random(f"math:{name}:{difficulty}:{seed}") for name in chosen}
    integer_only = answer_format == "plain"

    def exhausted(subdomain: str | None, drawn: int) -> str:
        if subdomain is None:
            return (f"the sub-domains {chosen} at difficulty {difficulty} hold {drawn} distinct "
                    f"problems, fewer than the {num_problems} asked for")
        return (f"{subdomain} at difficulty {difficulty} ran out of distinct problems after {drawn}; "
                f"ask for fewer problems, a higher difficulty, or an unbalanced draw")

    drawn = draw_round_robin(
        chosen, lambda name: make_problem(name, rngs[name], difficulty, integer_only),
        key=lambda problem: render_prompt(problem.question, answer_format), num=num_problems,
        max_duplicate_draws=MAX_DUPLICATE_DRAWS, exhausted_message=exhausted, balanced=balanced)
    return [
        {
            "id": f"math-{subdomain}-d{difficulty}-s{seed}-{i}",
            "task": "math",
            "subdomain": subdomain,
            "prompt": render_prompt(problem.question, answer_format),
            "reference": render_answer(problem.answer),
            "source": f"procedural-math-d{difficulty}",
            "difficulty": difficulty,
        }
        for i, (subdomain, problem) in enumerate(drawn)
    ]
