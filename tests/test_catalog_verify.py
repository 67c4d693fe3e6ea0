"""verify_groups: rows of mixed tasks, each task's verifier called once, results in row order."""

import pytest

from passband.curation.catalog import VerifierSettings
from passband.curation.catalog.verify import verify_groups

IFEVAL_NO_COMMA = {"instructions": [{"id": "punctuation:no_comma", "kwargs": {}}]}


def test_mixed_tasks_come_back_in_row_and_sample_order():
    results = verify_groups(
        ["math", "structured", "ifeval", "math"],
        ["7", {"fields": {"city": "Oslo", "days": 3}}, IFEVAL_NO_COMMA, "\\frac{1}{2}"],
        [["so 7", "it is 8", "no idea"],
         ['{"city": "oslo", "days": 3}', '{"city": "Oslo", "days": 4}', "Oslo, 3 days"],
         ["no commas here", "one, comma"],
         []],
        VerifierSettings(),
    )
    assert [[r.status for r in group] for group in results] == [
        ["pass", "fail", "unparsable"], ["pass", "fail", "unparsable"], ["pass", "fail"], []]
    assert [r.score for r in results[1]] == [1.0, 0.5, 0.0]


def test_each_tasks_settings_reach_its_verifier():
    boxed = VerifierSettings(math={"answer_format": "boxed"})
    completions = [["The answer is \\boxed{12}.", "The answer is 12."]]
    assert [r.status for r in verify_groups(["math"], ["12"], completions, boxed)[0]] == ["pass", "unparsable"]
    assert [r.status for r in verify_groups(["math"], ["12"], completions, VerifierSettings())[0]] == ["pass", "pass"]
    # loose mode drops a first line such as "Sure:" before checking
    wrapped = [["Sure, here it is:\nno commas at all"]]
    assert verify_groups(["ifeval"], [IFEVAL_NO_COMMA], wrapped, VerifierSettings())[0][0].status == "fail"
    loose = VerifierSettings(ifeval={"mode": "loose"})
    assert verify_groups(["ifeval"], [IFEVAL_NO_COMMA], wrapped, loose)[0][0].status == "pass"


def test_mismatched_lengths_and_unknown_tasks_raise():
    with pytest.raises(ValueError, match="2 task names, 1 references and 2 completion groups"):
        verify_groups(["math", "math"], ["1"], [[], []], VerifierSettings())
    with pytest.raises(ValueError, match="unknown task 'chess'"):
        verify_groups(["chess"], ["1"], [["1"]], VerifierSettings())
