"""The verifier's reward against a label s (docs/recipe.md section 9):
R = R_format(V') x R_score x R_meta, with R_score = 1 - |s' - s|.

R_format is 1 when the output has both fixed phrases and one score of 0, 0.5 or 1 after the
second (curation/grading/parse.py). An output that fails it is `unparsable`, reward 0, which RL
masks out of the gradient as it masks every task's unreadable output (docs/recipe.md section 4);
`unformatted="fail"` rewards it 0 instead, the reference's R_format. R_meta is a setting: "off"
(1), or "defect_check", the analysis checked against the defect a synthetic triple records
(curation/grading/meta.py). A judge model's meta-verdict would be a third.
"""

from typing import Literal

from passband.curation.grading.labels import reference_error
from passband.curation.grading.meta import defect_check
from passband.curation.grading.parse import parse_verdict
from passband.curation.verifiers.result import VerifyResult, check_batch

MetaReward = Literal["off", "defect_check"]
Unformatted = Literal["unparsable", "fail"]


def score_reward(predicted: float, label: float) -> float:
    """R_score = 1 - |s' - s|: 1 for the label's score, 0.5 one step away, 0 for 0 against 1."""
    return 1.0 - abs(predicted - label)


def verify_grading(completions: list[str], references: list[dict], meta: MetaReward = "off",
                   unformatted: Unformatted = "unparsable") -> list[VerifyResult]:
    """One result per analysis: score R, status `pass` when R is 1, else `fail`; `unparsable`
    (or `fail`, by `unformatted`) when R_format is 0."""
    check_batch(completions, references, reference_error)
    if meta == "defect_check":
        for index, reference in enumerate(references):
            if "defect" not in reference:
                raise ValueError(f"reference {index}: meta 'defect_check' needs the injected defect "
                                 f"(a generated triple's 'defect'); this one holds only a score")
    results = []
    for completion, reference in zip(completions, references):
        verdict = parse_verdict(completion)
        if verdict.score is None:
            results.append(VerifyResult(0.0, unformatted, verdict.problem))
            continue
        predicted, label = float(verdict.score), float(reference["score"])
        reward = score_reward(predicted, label)
        detail = f"score {predicted:g} against label {label:g}"
        if meta == "defect_check":
            grade = defect_check(verdict.analysis, reference.get("defect_step"))
            reward *= grade
            detail += f"; defect check {grade:g} ({reference['defect']} at step {reference.get('defect_step')})"
        results.append(VerifyResult(reward, "pass" if reward == 1.0 else "fail", detail))
    return results
