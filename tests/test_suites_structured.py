"""The procedural structured-output suite: deterministic per seed, valid rows, references that
state exactly the facts of the prompt's text."""

import json
import re

import pytest

from passband.curation.suites.rows import validate_row
from passband.curation.suites.structured_suite import generate_structured
from passband.curation.verifiers.json_fields import verify_json


def test_same_seed_same_rows_other_seed_other_rows_and_prefix_stable():
    assert generate_structured(20, seed=3) == generate_structured(20, seed=3)
    assert generate_structured(20, seed=3) != generate_structured(20, seed=4)
    assert generate_structured(20, seed=3)[:5] == generate_structured(5, seed=3)


@pytest.mark.parametrize("difficulty, num_keys", [(0, 2), (1, 3), (2, 3)])
def test_rows_validate_with_distinct_prompts_and_key_counts(difficulty, num_keys):
    rows = generate_structured(40, seed=0, difficulty=difficulty)
    assert [validate_row(row, i) for i, row in enumerate(rows)] == [None] * 40
    assert len({row["prompt"] for row in rows}) == 40
    assert len({row["id"] for row in rows}) == 40
    for row in rows:
        assert row["task"] == "structured"
        assert len(row["reference"]["fields"]) == num_keys
        # every key is named in the prompt, quoted, and every value appears in the text
        for key, value in row["reference"]["fields"].items():
            assert f'"{key}"' in row["prompt"]
            assert re.search(rf"\b{re.escape(str(value))}\b", row["prompt"])


def test_difficulty_two_states_a_distractor_after_the_answer():
    for row in generate_structured(30, seed=0, difficulty=2):
        text = row["prompt"].split("for this text: ")[1]
        first, second = text.split(". ")[:2]
        assert text.endswith("Use the first one. Reply with only the JSON object.")
        values = [str(value) for value in row["reference"]["fields"].values()]
        assert all(re.search(rf"\b{re.escape(value)}\b", first) for value in values)
        # a trip's cities may swap roles, but never every asked value recurs in the distractor
        assert not all(re.search(rf"\b{re.escape(value)}\b", second) for value in values)


def test_a_reference_written_as_json_passes_its_own_row():
    rows = generate_structured(12, seed=1, difficulty=1)
    completions = [json.dumps(row["reference"]["fields"]) for row in rows]
    assert {r.status for r in verify_json(completions, [row["reference"] for row in rows])} == {"pass"}


def test_bad_arguments_raise():
    with pytest.raises(ValueError, match="difficulty must be in 0..2"):
        generate_structured(1, seed=0, difficulty=3)
    with pytest.raises(ValueError, match="num_problems must be >= 0"):
        generate_structured(-1, seed=0)
