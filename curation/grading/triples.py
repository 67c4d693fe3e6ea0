"""Labelled grading triples (X, Y, s) from our own math suite, with known quality (issue 31 item 2).

X is a math-suite problem, Y a worked solution in numbered steps (curation/grading/steps.py) into
which one defect of a known kind is injected, and s the score that defect earns
(curation/grading/labels.py: complete 1; unjustified_step, minor_slip 0.5; wrong_step,
wrong_result 0). Each row's reference records the defect and its step, so an analysis can be
checked against it (curation/grading/meta.py), and `answer` holds X's right answer, so the labels
can be checked independently: Y's boxed answer verifies against it exactly when s > 0.

Problems are drawn from generators seeded in their own namespace ("grading:..."), cycling through
the sub-domains with distinct questions (as the math suite draws them); the defect kind cycles
through `defects` by row, and where it goes is drawn from a generator seeded by the row.
"""

import random
from collections.abc import Callable

from passband.curation.grading.labels import DEFECT_SCORES, DefectKind
from passband.curation.grading.steps import chain_for, plan_defect, render_solution
from passband.curation.grading.texts import grading_prompt
from passband.curation.suites.math_problems import SUBDOMAINS, make_problem, render_answer
from passband.curation.suites.round_robin import draw_round_robin

MAX_DIFFICULTY = 2
"""Triples use the math suite's difficulties 0-2: short chains a small verifier can follow."""
DEFECT_CYCLE: tuple[DefectKind, ...] = (
    "complete", "unjustified_step", "wrong_step", "complete", "minor_slip", "wrong_result")
"""The default cycle of defect kinds: each score, 1, 0.5 and 0, on a third of the rows."""
MAX_DUPLICATE_DRAWS = 500  # consecutive repeats after which a sub-domain counts as exhausted
MAX_UNUSABLE_DRAWS = 1000  # consecutive problems without a chain after which a sub-domain has none


def generate_triples(num_problems: int, seed: int, difficulty: int = 0, subdomains: list[str] | None = None,
                     defects: tuple[DefectKind, ...] | list[DefectKind] = DEFECT_CYCLE,
                     balanced: bool = True, excluded: Callable[[str], bool] = lambda _question: False) -> list[dict]:
    """`num_problems` rows {id, task, subdomain, prompt, reference, source, difficulty, problem,
    solution, answer}, the reference {"score", "defect", "defect_step"}; no problem X whose question
    is `excluded` (e.g. held out) is drawn."""
    if not 0 <= difficulty <= MAX_DIFFICULTY:
        raise ValueError(f"grading triples: difficulty must be in 0..{MAX_DIFFICULTY}, got {difficulty}")
    unknown = [kind for kind in defects if kind not in DEFECT_SCORES]
    if unknown or not defects:
        raise ValueError(f"grading triples: defects must be a non-empty list of {list(DEFECT_SCORES)}, got {defects!r}")
    chosen = list(SUBDOMAINS) if subdomains is None else list(subdomains)
    if not chosen or any(name not in SUBDOMAINS for name in chosen):
        raise ValueError(f"grading triples: subdomains must be a non-empty subset of {list(SUBDOMAINS)}, "
                         f"got {subdomains!r}")
    rngs = {name: random.Random(f"grading:{name}:{difficulty}:{seed}") for name in chosen}

    def draw(subdomain: str):
        for _ in range(MAX_UNUSABLE_DRAWS):
            problem = make_problem(subdomain, rngs[subdomain], difficulty, integer_only=True)
            chain = chain_for(problem)
            if chain is not None:
                return problem, chain
        raise ValueError(f"grading triples: {subdomain} at difficulty {difficulty} drew {MAX_UNUSABLE_DRAWS} "
                         f"problems in a row that have no worked chain; leave it out of subdomains")

    def exhausted(subdomain: str | None, drawn: int) -> str:
        where = "the sub-domains" if subdomain is None else subdomain
        return (f"grading triples: {where} at difficulty {difficulty} ran out of distinct questions after "
                f"{drawn} for {num_problems}; ask for fewer, a higher difficulty, or an unbalanced draw")

    drawn = draw_round_robin(chosen, draw, key=lambda item: item[0].question, num=num_problems,
                             max_duplicate_draws=MAX_DUPLICATE_DRAWS, exhausted_message=exhausted, balanced=balanced,
                               excluded=excluded)
    rows = []
    for index, (subdomain, (problem, chain)) in enumerate(drawn):
        kind = defects[index % len(defects)]
        defect = plan_defect(chain, kind, random.Random(f"grading-defect:{subdomain}:{difficulty}:{seed}:{index}"))
        solution = render_solution(chain, defect)
        rows.append({
            "id": f"grading-{subdomain}-d{difficulty}-s{seed}-{index}",
            "task": "proof_grading",
            "subdomain": subdomain,
            "prompt": grading_prompt(problem.question, solution),
            "reference": {"score": DEFECT_SCORES[kind], "defect": kind, "defect_step": defect.step},
            "source": f"graded-math-d{difficulty}",
            "difficulty": difficulty,
            "problem": problem.question,
            "solution": solution,
            "answer": render_answer(problem.answer),
        })
    return rows
