"""The analysis a perfect verifier writes for a generated triple: the defect's step named as an
issue, the score it earns, in the rubric's form (curation/grading/texts.py).

SFT data for a verifier, as worked math is for the math task (docs/recipe.md section 10: a small
model learns the format from verified examples before RL): each one earns reward 1 with the
defect check on (tests/test_grading_triples.py).
"""

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
