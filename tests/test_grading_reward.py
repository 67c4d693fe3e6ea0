"""The verifier's reward R_format x (1 - |s' - s|) [x R_meta] by hand, its labels, and the task in
the grouped verification and `passband verify`."""

import json

import pytest

from passband.curation.catalog import VerifierSettings, task
from passband.curation.catalog.verify import verify_groups
from passband.curation.grading.labels import reference_error
from passband.curation.grading.meta import defect_check, invented_issues
from passband.curation.grading.reward import score_reward, verify_grading
from passband.curation.grading.texts import EVALUATION_PHRASE, SCORE_PHRASE


def analysis(score: str, issues: str = "No issues found.") -> str:
    return f"{EVALUATION_PHRASE}\n{issues}\n{SCORE_PHRASE} \\boxed{{{score}}}"


@pytest.mark.parametrize(("predicted", "label", "reward"), [
    (1.0, 1.0, 1.0), (0.5, 1.0, 0.5), (0.0, 1.0, 0.0), (1.0, 0.5, 0.5), (0.5, 0.5, 1.0), (0.0, 0.5, 0.5),
    (1.0, 0.0, 0.0), (0.5, 0.0, 0.5), (0.0, 0.0, 1.0)])
def test_score_reward_is_one_minus_the_distance(predicted, label, reward):
    assert score_reward(predicted, label) == reward


def test_rewards_and_statuses_against_the_label():
    results = verify_grading([analysis("0.5"), analysis("1"), analysis("0"), "The solution looks right. 1"],
                             [{"score": 1}, {"score": 1.0}, {"score": 1}, {"score": 1}])
    assert [(r.score, r.status) for r in results] == [(0.5, "fail"), (1.0, "pass"), (0.0, "fail"), (0.0, "unparsable")]
    assert results[0].detail == "score 0.5 against label 1"
    assert results[3].detail == f"missing the phrase {EVALUATION_PHRASE!r}"


def test_an_unformatted_output_can_be_rewarded_zero_instead_of_masked():
    [result] = verify_grading([analysis("0.7")], [{"score": 0}], unformatted="fail")
    assert (result.score, result.status, result.detail) == (0.0, "fail", "score '0.7' is not 0, 0.5 or 1")


def test_defect_check_grades_the_named_issues_against_the_injected_defect():
    assert defect_check("Issue in step 2: 75 / 5 is 15.", 2) == 1.0
    assert defect_check("Issue in step 1: hm.\nIssue in step 2: 75 / 5 is 15.", 2) == 0.5  # found it, and invented one
    assert defect_check("Issue in step 1: hm.", 2) == 0.0  # missed it
    assert defect_check("No issues found.", 2) == 0.0
    assert defect_check("No issues found.", None) == 1.0  # a complete solution
    assert defect_check("Issue in step 3: the answer is off.", None) == 0.0  # an issue that does not exist
    assert invented_issues("Issue in step 1: a.\nIssue in step 2: b.\nIssue in step 4: c.", 2) == [1, 4]


def test_meta_reward_multiplies_in_the_defect_check():
    wrong_at_2 = {"score": 0.0, "defect": "wrong_step", "defect_step": 2}
    complete = {"score": 1.0, "defect": "complete", "defect_step": None}
    completions = [analysis("0", "Issue in step 2: 75 / 5 is 15, not 16."),  # R_score 1 x R_meta 1
                   analysis("0", "Issue in step 1: x.\nIssue in step 2: y."),  # 1 x 0.5
                   analysis("0", "Issue in step 3: the answer is wrong."),  # 1 x 0: the right score, the wrong issue
                   analysis("0.5", "Issue in step 2: slightly off."),  # 0.5 x 1
                   analysis("1"),  # complete, no issues: 1 x 1
                   analysis("1", "Issue in step 1: unclear.")]  # an invented issue: 1 x 0
    results = verify_grading(completions, [wrong_at_2] * 4 + [complete] * 2, meta="defect_check")
    assert [r.score for r in results] == [1.0, 0.5, 0.0, 0.5, 1.0, 0.0]
    assert [r.status for r in results] == ["pass", "fail", "fail", "fail", "pass", "fail"]
    assert results[1].detail == "score 0 against label 0; defect check 0.5 (wrong_step at step 2)"
    with pytest.raises(ValueError, match="reference 1: meta 'defect_check' needs the injected defect"):
        verify_grading([analysis("1"), analysis("1")], [complete, {"score": 1}], meta="defect_check")


@pytest.mark.parametrize(("reference", "error"), [
    ({"score": 0.5}, None),
    ({"score": 0, "defect": "wrong_result", "defect_step": 3}, None),
    ({"score": 1, "defect": "complete"}, None),
    (0.5, "proof_grading reference must be an object {'score': 0, 0.5 or 1}, got float"),
    ({}, "proof_grading reference needs 'score' (0, 0.5 or 1)"),
    ({"score": 0.7}, "proof_grading reference 'score' must be 0, 0.5 or 1, got 0.7"),
    ({"score": "1"}, "proof_grading reference 'score' must be the number 0, 0.5 or 1, got '1' (str)"),
    ({"score": True}, "proof_grading reference 'score' must be the number 0, 0.5 or 1, got True (bool)"),
    ({"score": 1, "grade": 1}, "proof_grading reference has unknown keys ['grade']; it takes "
                               "['score', 'defect', 'defect_step']"),
    ({"score": 1, "defect": "typo"}, "proof_grading reference 'defect' must be one of ['complete', "
                                     "'unjustified_step', 'minor_slip', 'wrong_step', 'wrong_result'], got 'typo'"),
    ({"score": 1, "defect": "minor_slip", "defect_step": 1},
     "proof_grading reference: defect 'minor_slip' scores 0.5, not 1"),
    ({"score": 0, "defect": "wrong_step"},
     "proof_grading reference 'defect_step' must be a step number >= 1 for defect 'wrong_step', got None"),
    ({"score": 1, "defect": "complete", "defect_step": 2},
     "proof_grading reference: a complete solution has no 'defect_step', got 2"),
])
def test_reference_errors_name_the_field(reference, error):
    assert reference_error(reference) == error


def test_a_bad_label_refuses_the_batch_naming_its_index():
    with pytest.raises(ValueError, match=r"reference 1: proof_grading reference 'score' must be 0, 0.5 or 1, got 0.7"):
        verify_grading([analysis("1"), analysis("1")], [{"score": 1}, {"score": 0.7}])


def test_the_catalog_task_verifies_beside_math_in_one_grouped_call():
    settings = VerifierSettings()
    results = verify_groups(["math", "proof_grading"], ["5", {"score": 0.5}],
                            [["The answer is 5.", "It is 4."], [analysis("0.5"), analysis("1"), "no verdict"]],
                            settings)
    assert [[(r.score, r.status) for r in group] for group in results] == [
        [(1.0, "pass"), (0.0, "fail")], [(1.0, "pass"), (0.5, "fail"), (0.0, "unparsable")]]
    meta = VerifierSettings(proof_grading={"meta": "defect_check"}).proof_grading
    [graded] = task("proof_grading").verify([analysis("1", "Issue in step 1: x.")],
                                            [{"score": 1.0, "defect": "complete", "defect_step": None}], meta)
    assert (graded.score, graded.status) == (0.0, "fail")


def test_passband_verify_scores_a_file_of_analyses(tmp_path):
    from passband.cli.verify_cmd import verify_file

    rows = [{"id": "a", "completion": analysis("1"), "reference": {"score": 1}},
            {"id": "b", "completion": analysis("0"), "reference": {"score": 0.5}},
            {"id": "c", "completion": analysis("1"), "reference": {"score": 0.7}}]
    source = tmp_path / "in.jsonl"
    source.write_text("".join(json.dumps(row) + "\n" for row in rows))
    counts = verify_file("proof_grading", source, tmp_path / "out.jsonl")
    assert counts == {"pass": 1, "fail": 1, "quarantined": 1}
    scored = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert [(row["id"], row["score"], row["status"]) for row in scored] == [("a", 1.0, "pass"), ("b", 0.5, "fail")]
    [bad] = [json.loads(line) for line in (tmp_path / "out.quarantine.jsonl").read_text().splitlines()]
    assert (bad["line"], bad["reason"]) == (3, "proof_grading reference 'score' must be 0, 0.5 or 1, got 0.7")
