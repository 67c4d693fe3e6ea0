"""The analysis a perfect verifier writes for a generated triple: the defect's step named as an
issue, the score it earns, in the rubric's form (curation/grading/texts.py).

SFT data for a verifier, as worked math is for the math task (docs/recipe.md section 10: a small
model learns the format from verified examples before RL): each one earns reward 1 with the
defect check on (tests/test_grading_triples.py).
"""

from collections.abc import Callable

from passband.curation.grading.texts import EVALUATION_PHRASE, SCORE_PHRASE

ISSUES = {
    "unjustified_step": "the step states its value without the computation or the reason behind it",
    "minor_slip": "a number in its computation is written wrong, although the value it reaches is right",
    "wrong_step": "its computation is wrong, and the final answer carries the error",
    "wrong_result": "the answer it states is not the value the steps before it reach",
}
"""What the analysis says of each defect kind, at the defect's step."""


def worked_analysis(reference: dict) -> str:
    """The analysis of a triple whose reference records its defect {"score", "defect", "defect_step"}."""
    kind = reference["defect"]
    issues = "No issues found." if kind == "complete" else f"Issue in step {reference['defect_step']}: {ISSUES[kind]}."
    return f"{EVALUATION_PHRASE}\n{issues}\n{SCORE_PHRASE} \\boxed{{{reference['score']:g}}}"


def worked_analysis_rows(num_examples: int, seed: int, difficulty: int = 0, subdomains: list[str] | None = None,
                         balanced: bool = True,
                         excluded: Callable[[str], bool] = lambda _question: False) -> tuple[list[dict], list[dict]]:
    """(verified rows, quarantined rows): `num_examples` generated triples (curation/grading/triples.py,
    with `seed`; none of whose problems is `excluded`, e.g. an eval set's) with the worked analysis of
    each as `completion`. A row is verified when its analysis earns reward 1 with the defect check
    on; one that does not comes back quarantined with the verifier's detail."""
    from passband.curation.grading.reward import verify_grading
    from passband.curation.rows import quarantine
    from passband.curation.grading.triples import generate_triples

    triples = generate_triples(num_examples, seed, difficulty, subdomains, balanced=balanced, excluded=excluded)
    rows = [{**row, "id": f"worked-{row['id']}", "completion": worked_analysis(row["reference"]),
             "source": f"worked-analysis-d{difficulty}"} for row in triples]
    results = verify_grading([row["completion"] for row in rows], [row["reference"] for row in rows],
                             meta="defect_check")
    kept = [row for row, result in zip(rows, results) if result.status == "pass"]
    failed = [quarantine(row, f"verifier {result.status}: {result.detail}") for row, result in zip(rows, results) if result.status != "pass"]
    return kept, failed
