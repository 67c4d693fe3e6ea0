"""The ifeval reference check (issue 52): an unknown instruction id or kwargs its checker cannot
take is refused by `reference_error` (a plain function: reference -> reason or None), which the
catalog task, the loader and `passband verify` share, so a bad row is quarantined when it loads
instead of crashing scoring mid-run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from passband.curation.catalog import TASKS
from passband.curation.suites.loaders import load_rows
from passband.curation.verifiers.ifeval import reference_error, verify_ifeval


def one(instruction_id: object, **kwargs: object) -> dict:
    return {"instructions": [{"id": instruction_id, "kwargs": kwargs}]}


GOOD = [
    one("punctuation:no_comma"),
    one("length_constraints:number_words", num_words=3, relation="less than"),
    one("keywords:existence", keywords=["ocean", "tide"]),
    one("length_constraints:nth_paragraph_first_word", num_paragraphs=2, nth_paragraph=1, first_word="so"),
    # the Hugging Face copy of IFEval stores every kwarg, None where unused
    one("punctuation:no_comma", num_words=None, keywords=None),
    {"instructions": [{"id": "change_case:english_lowercase"}]},  # no kwargs at all
]


@pytest.mark.parametrize("reference", GOOD)
def test_usable_references_pass(reference: dict) -> None:
    assert reference_error(reference) is None
    assert TASKS["ifeval"].reference_error(reference) is None
    verify_ifeval(["some text"], [reference])  # and score without raising


@pytest.mark.parametrize(("reference", "reason"), [
    (one("no:such"), "instructions[0]: unknown instruction id 'no:such'; known ids: ["),
    (one("length_constraint:number_words", num_words=3, relation="at least"),
     "unknown instruction id 'length_constraint:number_words'; did you mean 'length_constraints:number_words'?"),
    (one(["keywords:existence"]), "unknown instruction id ['keywords:existence']"),
    (one("length_constraints:number_words", num_wordz=3),
     "instruction 'length_constraints:number_words': bad kwargs: unknown ['num_wordz']; "
     "missing ['num_words', 'relation'] (it takes num_words: int, relation: str)"),
    (one("punctuation:no_comma", num_words=3), "bad kwargs: unknown ['num_words'] (it takes no kwargs)"),
    (one("length_constraints:number_words", num_words="3", relation="less than"),
     "kwarg 'num_words' must be int, got '3' (str)"),
    (one("length_constraints:number_words", num_words=True, relation="less than"),
     "kwarg 'num_words' must be int, got True (bool)"),
    (one("length_constraints:number_words", num_words=3.0, relation="less than"),
     "kwarg 'num_words' must be int, got 3.0 (float)"),
    (one("keywords:existence", keywords="ocean"), "kwarg 'keywords' must be list[str], got 'ocean' (str)"),
    (one("keywords:existence", keywords=["ocean", 7]), "kwarg 'keywords' must be list[str], got ['ocean', 7]"),
    (one("startend:end_checker", end_phrase=5), "kwarg 'end_phrase' must be str, got 5 (int)"),
    (one("length_constraints:number_words", num_words=3, relation="more than"),
     "relation must be one of ('less than', 'at least'), got 'more than'"),
    (one("length_constraints:number_words", num_words=-1, relation="at least"), "kwarg 'num_words' must be >= 0"),
    (one("length_constraints:nth_paragraph_first_word", num_paragraphs=2, nth_paragraph=-5, first_word="so"),
     "kwarg 'nth_paragraph' must be >= 1, got -5"),
    ({"instructions": [{"id": "punctuation:no_comma", "kwargs": ["x"]}]}, "kwargs must be an object, got list"),
    ({"instructions": [{"kwargs": {}}]}, "instruction must be an object with an 'id'"),
    ({"instructions": [GOOD[0]["instructions"][0], {"id": "no:such"}]}, "instructions[1]: unknown instruction id"),
    ({"instructions": []}, "reference needs a non-empty list 'instructions'"),
    ({"instructions": "no_comma"}, "reference needs a non-empty list 'instructions'"),
    ("punctuation:no_comma", "reference needs a non-empty list 'instructions'"),
])
def test_unusable_references_name_the_instruction_and_kwarg(reference: object, reason: str) -> None:
    error = reference_error(reference)
    assert error is not None and reason in error, error
    assert "\n" not in error
    assert TASKS["ifeval"].reference_error(reference) == error  # the catalog task asks the verifier


def test_every_refused_reference_would_have_failed_scoring() -> None:
    """What the check refuses is what scoring cannot take (the crash it prevents)."""
    for reference in (one("length_constraints:number_words", num_words="3", relation="less than"),
                      one("length_constraints:nth_paragraph_first_word", num_paragraphs=1,
                          nth_paragraph=-5, first_word="so")):
        with pytest.raises(ValueError, match="row 0: instructions\\[0\\]"):
            verify_ifeval(["one two"], [reference])


def test_the_loader_quarantines_a_bad_reference_naming_the_row(tmp_path: Path) -> None:
    source = tmp_path / "mine.jsonl"
    rows = [{"prompt": "Write a line.", "reference": one("punctuation:no_comma")},
            {"prompt": "Write three words.", "reference": one("length_constraints:number_words", num_wordz=3)},
            {"prompt": "Write.", "reference": one("no:such")}]
    source.write_text("".join(json.dumps(row) + "\n" for row in rows))
    result = load_rows(str(source), task="ifeval")
    assert [row["prompt"] for row in result.rows] == ["Write a line."]
    assert [(q["row_number"], q["reason"].split(": ")[:2]) for q in result.quarantined] == [
        (2, ["row 2", "instructions[0]"]), (3, ["row 3", "instructions[0]"])]
    assert "num_wordz" in result.quarantined[0]["reason"] and "'no:such'" in result.quarantined[1]["reason"]
