"""A judge model's analyses of one rollout, made into the verdict a programmatic verifier would
return (docs/recipe.md section 9): same statuses, so RL masks and evaluation counts them alike.

Pure: the analyses are sampled by the judge runner (training/judge/); here they arrive as texts.
An output the parser cannot read counts for nothing (aggregate.py), and when no analysis can be
read, or scaled verification finds no agreement, the rollout is `unparsable`: masked out of the
gradient, never a silent 0.
"""

from passband.curation.grading.aggregate import mean_score, scaled_label
from passband.curation.grading.parse import Verdict, parse_verdict
from passband.curation.grading.texts import REVIEW_PHRASE, REVIEW_SCORE_PHRASE
from passband.curation.verifiers.result import VerifyResult


def read_analyses(texts: list[str]) -> list[Verdict]:
    """The judge's analyses, parsed (score None where unparsable)."""
    return [parse_verdict(text) for text in texts]


def read_reviews(texts: list[str]) -> list[Verdict]:
    """The meta-verifier's reviews of one analysis, parsed with the review phrases."""
    return [parse_verdict(text, REVIEW_PHRASE, REVIEW_SCORE_PHRASE) for text in texts]


def scores_of(verdicts: list[Verdict]) -> list[float | None]:
    return [None if verdict.score is None else float(verdict.score) for verdict in verdicts]


def needs_review(verdict: Verdict) -> bool:
    """Scaled verification meta-checks only the analyses that found an issue (a parsed score below 1)."""
    return verdict.score is not None and verdict.score < 1


def _verdict(score: float | None, detail: str, why_none: str) -> VerifyResult:
    if score is None:
        return VerifyResult(0.0, "unparsable", why_none)
    return VerifyResult(score, "pass" if score == 1.0 else "fail", detail)


def mean_verdict(analyses: list[Verdict]) -> VerifyResult:
    """Score = the mean of the parsed analyses' scores; `pass` when it is 1."""
    scores = scores_of(analyses)
    parsed = sum(score is not None for score in scores)
    first_problem = next((verdict.problem for verdict in analyses if verdict.score is None), "")
    return _verdict(mean_score(scores), f"judge mean of {parsed}/{len(scores)} parsed analyses",
                    f"none of the judge's {len(scores)} analyses parsed: {first_problem}")


def scaled_verdict(analyses: list[Verdict], reviews: list[list[Verdict]], k: int) -> VerifyResult:
    """Score = scaled verification's label (aggregate.scaled_label) from the analyses and the
    meta-reviews of each (empty for an analysis not reviewed); `unparsable` when no k agree."""
    scores = scores_of(analyses)
    grades = [scores_of(group) for group in reviews]
    label = scaled_label(scores, grades, k)
    parsed = sum(score is not None for score in scores)
    return _verdict(label, f"judge scaled label of {parsed}/{len(scores)} parsed analyses (k={k})",
                    f"no {k} of the judge's {len(scores)} analyses agree on a confirmed score "
                    f"({parsed} parsed)")
