"""A judge's analyses made into a verdict (curation/grading/judged.py), on hand-written texts: the
mean of the parsed scores, scaled verification's label from meta-reviews, and `unparsable` (never
a silent 0) when nothing can be read or no k analyses agree; and the judge's typed settings."""

import pytest
from pydantic import ValidationError

from passband.curation.grading.judged import mean_verdict, read_analyses, read_reviews, scaled_verdict
from passband.curation.grading.texts import EVALUATION_PHRASE, REVIEW_PHRASE, REVIEW_SCORE_PHRASE, SCORE_PHRASE
from passband.training.judge.config import JudgeConfig, ScaledAggregation
from passband.training.engines import SamplingConfig


def analysis(score: str, issues: str = "No issues found.") -> str:
    return f"{EVALUATION_PHRASE}\n{issues}\n{SCORE_PHRASE} \\boxed{{{score}}}"


def review(grade: str) -> str:
    return f"{REVIEW_PHRASE}\nThe issue is real.\n{REVIEW_SCORE_PHRASE} \\boxed{{{grade}}}"


def test_the_mean_counts_only_parsed_analyses():
    texts = [analysis("1"), analysis("0.5", "Issue in step 2: no reason given."), "I like it.", analysis("0.7")]
    result = mean_verdict(read_analyses(texts))
    # (1 + 0.5) / 2: the missing phrases and the 0.7 count for nothing, not as zeros
    assert (result.score, result.status) == (0.75, "fail")
    assert result.detail == "judge mean of 2/4 parsed analyses"
    assert mean_verdict(read_analyses([analysis("1"), analysis("1/2"), analysis("\\frac{1}{2}")])).score == pytest.approx(2 / 3)
    passed = mean_verdict(read_analyses([analysis("1"), analysis("1.0")]))
    assert (passed.score, passed.status) == (1.0, "pass")


def test_a_judge_whose_outputs_cannot_be_read_is_unparsable_not_zero():
    result = mean_verdict(read_analyses(["", f"{EVALUATION_PHRASE}\nfine", analysis("\\boxed{1}")]))
    assert (result.score, result.status) == (0.0, "unparsable")
    assert result.detail.startswith("none of the judge's 3 analyses parsed: missing the phrase")


def test_scaled_verification_labels_by_confirmed_low_scores():
    analyses = read_analyses([analysis("0.5", "Issue in step 1: x."), analysis("0.5", "Issue in step 3: y."),
                              analysis("1"), analysis("0", "Issue in step 2: z."), "no format"])
    reviews = [read_reviews([review("1"), review("0.5")]),  # both >= 0.5: its issue is confirmed
               read_reviews([review("0"), review("0.5")]),  # 1 of 2: not a majority
               [],                                          # scored 1: not reviewed
               read_reviews([review("0"), "unreadable"]),   # the one parsed grade is 0: invented issue
               []]
    # the only confirmed low analysis gives 0.5: one vote, enough for k=1, not for k=2
    one = scaled_verdict(analyses, reviews, k=1)
    assert (one.score, one.status) == (0.5, "fail")
    two = scaled_verdict(analyses, reviews, k=2)
    assert (two.score, two.status) == (0.0, "unparsable")
    assert two.detail == "no 2 of the judge's 5 analyses agree on a confirmed score (4 parsed)"
    # nothing confirmed below 1: the label is 1 when k analyses gave 1
    ones = read_analyses([analysis("1"), analysis("1"), analysis("0.5")])
    unconfirmed = [[], [], read_reviews([review("0")])]
    assert scaled_verdict(ones, unconfirmed, k=2).status == "pass"
    assert scaled_verdict(ones, unconfirmed, k=3).status == "unparsable"


def test_judge_settings_refuse_an_agreement_no_sample_count_can_reach():
    config = JudgeConfig(model="m", sampling=SamplingConfig(n=4), aggregation={"kind": "scaled", "k": 3})
    assert config.aggregation == ScaledAggregation(k=3, num_reviews=2)
    with pytest.raises(ValidationError, match="aggregation.k=5 exceeds sampling.n=4"):
        JudgeConfig(model="m", sampling=SamplingConfig(n=4), aggregation={"kind": "scaled", "k": 5})
    with pytest.raises(ValidationError):
        JudgeConfig(model="m", aggregation={"kind": "median"})
