"""The structured-output verifier against hand-written completions: pass, fail, unparsable."""

import pytest

from passband.curation.verifiers.json_fields import extract_object, value_matches, verify_json

PERSON = {"fields": {"name": "Alice", "age": 30, "city": "Paris"}}


@pytest.mark.parametrize("completion, status, score, detail", [
    ('{"name": "Alice", "age": 30, "city": "Paris"}', "pass", 1.0, "name=1,age=1,city=1"),
    # fenced, surrounded by prose, string case and number-as-string loosened, extra key ignored
    ('Sure!\n```json\n{"name": "alice ", "age": "30", "city": "PARIS", "id": 7}\n```\nDone.',
     "pass", 1.0, "name=1,age=1,city=1"),
    ('{"name": "Alice", "age": 31, "city": "Paris"}', "fail", 2 / 3, "name=1,age=0,city=1"),
    ('{"name": "Alice"}', "fail", 1 / 3, "name=1,age=0,city=0"),
    ('{"Name": "Alice", "Age": 30, "City": "Paris"}', "fail", 0.0, "name=0,age=0,city=0"),
    ('{"name": "Alice", "age": 30.5, "city": "Paris"}', "fail", 2 / 3, "name=1,age=0,city=1"),
    ("Alice is 30 and lives in Paris.", "unparsable", 0.0, "no JSON object found"),
    ("{'name': 'Alice', 'age': 30, 'city': 'Paris'}", "unparsable", 0.0, "no JSON object found"),
    ('{"name": "Alice", "age": 30, "ci', "unparsable", 0.0, "no JSON object found"),  # truncated
    ('["Alice", 30, "Paris"]', "unparsable", 0.0, "no JSON object found"),  # an array, not an object
])
def test_verdicts_on_hand_written_completions(completion, status, score, detail):
    [result] = verify_json([completion], [PERSON])
    assert (result.status, result.detail) == (status, detail)
    assert result.score == pytest.approx(score)


def test_first_object_wins_and_nested_objects_stay_whole():
    assert extract_object('x {"a": {"b": 1}} then {"a": 2}') == {"a": {"b": 1}}
    assert extract_object('brace { in prose, then {"a": 2}') == {"a": 2}


def test_value_rules():
    assert value_matches(30, 30) and value_matches(30.0, 30) and value_matches(" 30 ", 30)
    assert not value_matches("thirty", 30) and not value_matches(True, 1) and not value_matches(30, "30x")
    assert value_matches("Oslo", "oslo") and not value_matches(["Oslo"], "Oslo")


def test_bad_reference_and_length_mismatch_raise():
    with pytest.raises(ValueError, match="reference 0: structured reference needs a non-empty object 'fields'"):
        verify_json(["{}"], [{"fields": {}}])
    with pytest.raises(ValueError, match="field 'a' must be a string or number, got list"):
        verify_json(["{}"], [{"fields": {"a": [1]}}])
    with pytest.raises(ValueError, match="2 completions but 1 references"):
        verify_json(["{}", "{}"], [PERSON])
