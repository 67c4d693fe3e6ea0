"""Row schema validation and the Parquet round trip of mixed reference types."""

import pyarrow.parquet as pq
import pytest

from passband.curation.suites.rows import rows_to_table, table_to_rows, validate_row

MATH = {"id": "m1", "task": "math", "subdomain": "algebra", "prompt": "Solve x + 1 = 3.",
        "reference": "\\frac{1}{2}", "source": "unit"}
CODE = {"id": "c1", "task": "code", "subdomain": "lists", "prompt": "Write f.",
        "reference": {"tests": "def check(candidate):\n    assert candidate() == 1\n",
                      "entry_point": "f"}, "source": "unit"}
CASES = {**CODE, "id": "c2", "reference": {"cases": [{"input": "1\n", "output": "2\n"}]}}
IFEVAL = {"id": "i1", "task": "ifeval", "subdomain": "format", "prompt": "Write in caps.",
          "reference": {"instructions": [{"id": "change_case:english_capital", "kwargs": {}}]},
          "source": "unit"}


def test_valid_rows_pass():
    for row in (MATH, CODE, CASES, IFEVAL):
        assert validate_row(row, 1) is None


@pytest.mark.parametrize("change, expected", [
    ({"prompt": None}, "row 7: field 'prompt' must be str, got NoneType"),
    ({"prompt": "  "}, "row 7: field 'prompt' is empty"),
    ({"task": "poetry"}, "row 7: task 'poetry' is not one of ['math', 'code', 'ifeval', 'structured', 'proof_grading']"),
    ({"reference": 42}, "row 7: math reference must be a non-empty str, got 42"),
    ({"task": "code"}, "row 7: code reference must be an object, got str"),
    ({"task": "code", "reference": {"tests": ""}},
     "row 7: code reference 'tests' must be non-empty Python source"),
    ({"task": "code", "reference": {"tests": "assert True", "entry_point": 3}},
     "row 7: code reference 'entry_point' must be a str"),
    ({"task": "code", "reference": {"cases": [{"input": "1"}]}},
     "row 7: each code case needs str 'input' and 'output'"),
    ({"task": "code", "reference": {"entry_point": "f"}},
     "row 7: code reference needs 'tests' or 'cases'"),
    ({"task": "ifeval", "reference": {"instructions": "caps"}},
     "row 7: reference needs a non-empty list 'instructions'"),
])
def test_invalid_rows_name_row_and_field(change, expected):
    assert validate_row({**MATH, **change}, 7) == expected


def test_missing_field_and_non_object():
    row = dict(MATH)
    del row["source"]
    assert validate_row(row, 2) == "row 2: missing field 'source'"
    assert validate_row(["not", "a", "row"], 3) == "row 3: expected an object, got list"


def test_parquet_round_trip_keeps_mixed_references_and_extras(tmp_path):
    rows = [{**MATH, "difficulty": 2}, CODE, {**IFEVAL, "pass_rate": 0.25}]
    path = tmp_path / "rows.parquet"
    pq.write_table(rows_to_table(rows), path)
    table = pq.read_table(path)
    # Stored as JSON text: one string column whatever the reference type.
    assert table.column("reference").type == "string"
    assert table.column("reference").to_pylist()[0] == '"\\\\frac{1}{2}"'
    assert table.column_names == ["id", "task", "subdomain", "prompt", "reference", "source",
                                  "difficulty", "pass_rate"]
    back = table_to_rows(table)
    assert back[0] == {**MATH, "difficulty": 2, "pass_rate": None}
    assert back[1] == {**CODE, "difficulty": None, "pass_rate": None}
    assert back[2] == {**IFEVAL, "difficulty": None, "pass_rate": 0.25}


def test_empty_table_keeps_string_schema():
    table = rows_to_table([])
    assert table.num_rows == 0
    assert table.column("prompt").type == "string"
    assert table_to_rows(table) == []
