"""The procedural math suite: seeded rows over sub-domains, at one difficulty.

The answer format decides both the instruction in the prompt and the extraction rule the
verifier must use. "plain" matches how the demo model was measured (docs/recipe.md section 10:
"answer with just the number", last number extracted); "boxed" is the target format that SFT
teaches. Plain prompts only get integer answers: a last-number extractor reads "3/4" as 4.
"""

import random
from typing import Literal

from passband.curation.suites.math_problems import MAX_DIFFICULTY, SUBDOMAINS, make_problem, render_answer

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
) -> list[dict]:
    """`num_problems` distinct rows, cycling through `subdomains` (all five by default).

    Each sub-domain draws from its own generator seeded by (seed, subdomain, difficulty), so
    adding a sub-domain does not change the problems of the others. Raises ValueError when a
    sub-domain has fewer distinct problems at this difficulty than requested.
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
    seen_prompts: set[str] = set()
    rows = []
    for i in range(num_problems):
        subdomain = chosen[i % len(chosen)]
        for _ in range(MAX_DUPLICATE_DRAWS):
            problem = make_problem(subdomain, rngs[subdomain], difficulty,
                                   integer_only=answer_format == "plain")
            prompt = render_prompt(problem.question, answer_format)
            if prompt not in seen_prompts:
                break
        else:
            raise ValueError(
                f"{subdomain} at difficulty {difficulty} ran out of distinct problems after "
                f"{sum(row['subdomain'] == subdomain for row in rows)}; ask for fewer problems "
                f"or a higher difficulty")
        seen_prompts.add(prompt)
        rows.append({
            "id": f"math-{subdomain}-d{difficulty}-s{seed}-{i}",
            "task": "math",
            "subdomain": subdomain,
            "prompt": prompt,
            "reference": render_answer(problem.answer),
            "source": f"procedural-math-d{difficulty}",
            "difficulty": difficulty,
        })
    return rows
