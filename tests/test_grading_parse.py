"""The verifier's output format (R_format) and score parser, on hand-written analyses."""

from fractions import Fraction

import pytest

from passband.curation.grading.parse import issue_steps, parse_verdict
from passband.curation.grading.texts import (
    EVALUATION_PHRASE, META_RUBRIC, REVIEW_PHRASE, REVIEW_SCORE_PHRASE, RUBRIC, SCORE_PHRASE, grading_prompt,
    meta_prompt)

OPEN, CLOSE = EVALUATION_PHRASE, SCORE_PHRASE


@pytest.mark.parametrize(("text", "score"), [
    (f"{OPEN}\nIssue in step 2: 75 / 5 is 15, not 16.\n{CLOSE} \\boxed{{0}}", Fraction(0)),
    (f"{OPEN}\nNo issues found.\n{CLOSE} \\boxed{{1}}", Fraction(1)),
    (f"{OPEN} step 2 has no reason. {CLOSE} $\\boxed{{0.5}}$", Fraction(1, 2)),
    (f"{OPEN} fine. **{CLOSE}** \\boxed{{.5}}", Fraction(1, 2)),
    (f"{OPEN} fine. {CLOSE} \\(\\boxed{{1/2}}\\)", Fraction(1, 2)),
    (f"{OPEN} fine. {CLOSE} \\boxed{{\\frac{{1}}{{2}}}}", Fraction(1, 2)),
    (f"{OPEN} fine. {CLOSE}\n\\boxed{{ 1.0 }} That is all.", Fraction(1)),
    (f"Let me think.\n{OPEN} Étape 1 est juste: 3 × 4 = 12 ✓. {CLOSE} \\boxed{{1}}", Fraction(1)),  # unicode prose
    # the last score phrase counts: an analysis may quote the phrase before its own verdict
    (f"{OPEN} it ends with '{CLOSE} \\boxed{{1}}', wrongly. {CLOSE} \\boxed{{0}}", Fraction(0)),
])
def test_well_formed_analyses_give_their_score(text, score):
    verdict = parse_verdict(text)
    assert (verdict.score, verdict.problem) == (score, "")


def test_the_analysis_is_the_text_between_the_phrases():
    verdict = parse_verdict(f"preamble {OPEN}\n Issue in step 2: no reason given.\n{CLOSE} \\boxed{{0.5}}")
    assert verdict.analysis == "Issue in step 2: no reason given."


@pytest.mark.parametrize(("text", "problem"), [
    ("", f"missing the phrase {OPEN!r}"),
    (f"Issue in step 2: wrong. {CLOSE} \\boxed{{0}}", f"missing the phrase {OPEN!r}"),
    (f"{OPEN} Issue in step 2: wrong. The score is \\boxed{{0}}", f"missing the phrase {CLOSE!r}"),
    (f"{CLOSE} \\boxed{{0}} {OPEN} fine.", f"the phrase {CLOSE!r} comes before {OPEN!r}"),
    (f"{OPEN} fine. {CLOSE} 1", "0 boxes after the score phrase; one \\boxed{} expected"),
    (f"{OPEN} fine. {CLOSE} \\boxed{{1}} or \\boxed{{0.5}}", "2 boxes after the score phrase; one \\boxed{} expected"),
    (f"{OPEN} fine. {CLOSE} probably \\boxed{{1}}", "text between the score phrase and its \\boxed{}"),
    (f"{OPEN} fine. {CLOSE} \\boxed{{}}", "the \\boxed{} after the score phrase is empty or unclosed"),
    (f"{OPEN} fine. {CLOSE} \\boxed{{1", "the \\boxed{} after the score phrase is empty or unclosed"),
    (f"{OPEN} fine. {CLOSE} \\boxed{{0.7}}", "score '0.7' is not 0, 0.5 or 1"),
    (f"{OPEN} fine. {CLOSE} \\boxed{{2}}", "score '2' is not 0, 0.5 or 1"),
    (f"{OPEN} fine. {CLOSE} \\boxed{{½}}", "score '½' is not 0, 0.5 or 1"),
    (f"{OPEN} fine. {CLOSE} \\boxed{{１}}", "score '１' is not 0, 0.5 or 1"),  # a full-width digit
    (f"{OPEN} fine. {CLOSE} \\boxed{{1/0}}", "score '1/0' is not 0, 0.5 or 1"),
    (f"{OPEN} fine. {CLOSE} \\boxed{{one}}", "score 'one' is not 0, 0.5 or 1"),
    (f"{OPEN.lower()} fine. {CLOSE} \\boxed{{1}}", f"missing the phrase {OPEN!r}"),  # the phrases are fixed
])
def test_malformed_outputs_are_unparsable_with_the_reason(text, problem):
    verdict = parse_verdict(text)
    assert (verdict.score, verdict.problem) == (None, problem)


def test_the_meta_verifiers_output_is_read_with_its_own_phrases():
    review = f"{REVIEW_PHRASE} Step 2 really is wrong. {REVIEW_SCORE_PHRASE} \\boxed{{1}}"
    assert parse_verdict(review, REVIEW_PHRASE, REVIEW_SCORE_PHRASE).score == Fraction(1)
    assert parse_verdict(review).problem == f"missing the phrase {OPEN!r}"


def test_issue_steps_are_read_in_order_once_each():
    analysis = "Issue in step 2: no reason.\nissue in step 3: 4 x 5 is 20.\nIssue in step 2: again.\nStep 1 is fine."
    assert issue_steps(analysis) == [2, 3]
    assert issue_steps("No issues found.") == []


def test_the_prompts_hold_the_rubric_the_problem_and_the_solution():
    prompt = grading_prompt("What is 2 + 3?", "Step 1: Add: 2 + 3 = 5.\nStep 2: So the answer is \\boxed{5}.")
    assert prompt.startswith(RUBRIC)
    assert prompt.endswith("Problem:\nWhat is 2 + 3?\n\nSolution:\nStep 1: Add: 2 + 3 = 5.\n"
                           "Step 2: So the answer is \\boxed{5}.")
    # the rubric states both fixed phrases, the last followed by the box to fill
    assert f"\n{OPEN}\n" in RUBRIC and RUBRIC.endswith(f"{CLOSE} \\boxed{{<0, 0.5 or 1>}}")
    meta = meta_prompt("X", "Y", "Issue in step 1: wrong.")
    assert meta.startswith(META_RUBRIC) and meta.endswith("Evaluation:\nIssue in step 1: wrong.")
    assert META_RUBRIC.endswith(f"{REVIEW_SCORE_PHRASE} \\boxed{{<0, 0.5 or 1>}}")
