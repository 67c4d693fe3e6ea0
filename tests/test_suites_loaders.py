"""Loading user rows from JSONL, Parquet and `datasets` directories, with bad rows quarantined."""

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from passband.curation.suites.loaders import load_rows
from passband.curation.suites.rows import rows_to_table

TESTS = "def check(candidate):\n    assert candidate(1) == 2\n"


def _write_jsonl(path, lines: list[str]) -> None:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def test_jsonl_with_column_map_defaults_and_bad_lines(tmp_path):
    path = tmp_path / "user.jsonl"
    _write_jsonl(path, [
        json.dumps({"question": "What is 2 + 2?", "answer": "4", "level": 1}),   # 1 good
        json.dumps({"question": "What is 6 x 7?", "answer": 42, "id": 17}),      # 2 good, numbers
        '{"question": "broken", "answer": ',                                    # 3 bad JSON
        "",                                                                     # 4 blank: skipped
        json.dumps({"answer": "5"}),                                            # 5 no prompt
        json.dumps(["a", "list"]),                                              # 6 not an object
        json.dumps({"question": "Hi", "answer": ["4"]}),                        # 7 list reference
        json.dumps({"question": "Again", "answer": "1", "id": "17"}),           # 8 duplicate id
        json.dumps({"question": "Code?", "answer": "x", "task": "code"}),       # 9 other task
    ])
    result = load_rows(str(path), task="math",
                       column_map={"question": "prompt", "answer": "reference"})
    assert result.rows == [
        {"prompt": "What is 2 + 2?", "reference": "4", "level": 1, "task": "math",
         "subdomain": "general", "source": "user.jsonl", "id": "user.jsonl-1"},
        {"prompt": "What is 6 x 7?", "reference": "42", "id": "17", "task": "math",
         "subdomain": "general", "source": "user.jsonl"},
    ]
    quarantined = {entry["row_number"]: entry for entry in result.quarantined}
    assert sorted(quarantined) == [3, 5, 6, 7, 8, 9]
    assert quarantined[3]["reason"].startswith("row 3: bad JSON: Expecting value")
    assert quarantined[3]["raw"] == '{"question": "broken", "answer": '
    assert quarantined[5]["reason"] == "row 5: missing field 'prompt'"
    assert quarantined[6]["reason"] == "row 6: expected an object, got list"
    assert quarantined[6]["raw"] == ["a", "list"]
    assert quarantined[7]["reason"].startswith("row 7: math reference must be a non-empty str")
    assert quarantined[8]["reason"] == "row 8: duplicate id '17' (first at row 2)"
    assert quarantined[9]["reason"] == "row 9: task 'code' differs from requested 'math'"


def test_jsonl_code_references_may_be_json_text(tmp_path):
    path = tmp_path / "code.jsonl"
    _write_jsonl(path, [
        json.dumps({"prompt": "Write f.", "reference": json.dumps({"tests": TESTS}),
                    "task": "code", "subdomain": "lists"}),
        json.dumps({"prompt": "Write g.", "reference": "{not json", "task": "code"}),
        json.dumps({"prompt": "Write h.", "reference": {"cases": [{"input": "1"}]},
                    "task": "code"}),
    ])
    result = load_rows(str(path), task=None, column_map=None)
    assert [row["reference"] for row in result.rows] == [{"tests": TESTS}]
    assert result.rows[0]["subdomain"] == "lists"
    assert [(e["row_number"], e["reason"]) for e in result.quarantined] == [
        (2, "row 2: reference is not valid JSON: Expecting property name enclosed in double "
            "quotes"),
        (3, "row 3: each code case needs str 'input' and 'output'"),
    ]


def test_without_a_task_argument_rows_need_their_own_task(tmp_path):
    path = tmp_path / "notask.jsonl"
    _write_jsonl(path, [json.dumps({"prompt": "p", "reference": "1"})])
    result = load_rows(str(path), task=None, column_map=None)
    assert result.rows == []
    assert result.quarantined[0]["reason"] == "row 1: missing field 'task'"


def test_user_parquet_with_nulls_and_a_bad_row(tmp_path):
    path = tmp_path / "user.parquet"
    pq.write_table(pa.table({
        "problem": ["1 + 1?", None, "3 + 4?"],
        "solution": ["2", "5", "7"],
        "subdomain": ["arithmetic", "arithmetic", None],
    }), path)
    result = load_rows(str(path), task="math",
                       column_map={"problem": "prompt", "solution": "reference"})
    assert [row["prompt"] for row in result.rows] == ["1 + 1?", "3 + 4?"]
    assert [row["id"] for row in result.rows] == ["user.parquet-1", "user.parquet-3"]
    assert [row["subdomain"] for row in result.rows] == ["arithmetic", "general"]
    assert result.quarantined == [{
        "row_number": 2, "reason": "row 2: field 'prompt' must be str, got NoneType",
        "raw": {"problem": None, "solution": "5", "subdomain": "arithmetic"}}]


def test_our_parquet_files_round_trip_through_the_loader(tmp_path):
    rows = [
        {"id": "m", "task": "math", "subdomain": "algebra", "prompt": "Solve.",
         "reference": "\\frac{1}{2}", "source": "gen", "difficulty": 3},
        {"id": "c", "task": "code", "subdomain": "lists", "prompt": "Write f.",
         "reference": {"tests": TESTS, "entry_point": "f"}, "source": "gen", "difficulty": 1},
    ]
    path = tmp_path / "suite.parquet"
    pq.write_table(rows_to_table(rows), path)
    result = load_rows(str(path), task=None, column_map=None)
    assert result.rows == rows
    assert result.quarantined == []


def test_column_map_naming_an_absent_column_fails_once(tmp_path):
    path = tmp_path / "user.parquet"
    pq.write_table(pa.table({"prompt": ["p"], "answer": ["1"]}), path)
    with pytest.raises(ValueError, match=r"column map names \['solution'\]"):
        load_rows(str(path), task="math", column_map={"solution": "reference"})


def test_two_columns_mapping_to_one_name_are_quarantined(tmp_path):
    path = tmp_path / "clash.jsonl"
    _write_jsonl(path, [json.dumps({"question": "q", "prompt": "p", "reference": "1"})])
    result = load_rows(str(path), task="math", column_map={"question": "prompt"})
    assert result.quarantined[0]["reason"].startswith("row 1: two columns map to one name")


def test_datasets_directory_with_splits(tmp_path):
    import datasets

    train = datasets.Dataset.from_list([
        {"q": "What is 1 + 2?", "a": "3", "tag": "easy"},
        {"q": "", "a": "4", "tag": "empty"},
    ])
    test = datasets.Dataset.from_list([{"q": "What is 5 + 5?", "a": "10", "tag": "held"}])
    datasets.DatasetDict({"train": train, "test": test}).save_to_disk(str(tmp_path / "dd"))
    column_map = {"q": "prompt", "a": "reference"}
    result = load_rows(str(tmp_path / "dd"), task="math", column_map=column_map)
    assert [(row["prompt"], row["reference"], row["tag"], row["id"]) for row in result.rows] == [
        ("What is 1 + 2?", "3", "easy", "dd-1")]
    assert [(e["row_number"], e["reason"]) for e in result.quarantined] == [
        (2, "row 2: field 'prompt' is empty")]
    held = load_rows(str(tmp_path / "dd"), task="math", column_map=column_map, split="test")
    assert [row["reference"] for row in held.rows] == ["10"]
    with pytest.raises(ValueError, match=r"no split 'validation'; it has \['test', 'train'\]"):
        load_rows(str(tmp_path / "dd"), task="math", column_map=column_map, split="validation")


def test_single_saved_dataset_with_struct_references(tmp_path):
    import datasets

    # Arrow merges the two reference shapes into one struct, filling absent keys with None.
    datasets.Dataset.from_list([
        {"prompt": "Write f.", "reference": {"tests": TESTS, "cases": None}},
        {"prompt": "Echo.", "reference": {"tests": None,
                                          "cases": [{"input": "a\n", "output": "a\n"}]}},
        {"prompt": "Nothing.", "reference": {"tests": None, "cases": None}},
    ]).save_to_disk(str(tmp_path / "ds"))
    result = load_rows(str(tmp_path / "ds"), task="code", column_map=None)
    assert [row["reference"] for row in result.rows] == [
        {"tests": TESTS}, {"cases": [{"input": "a\n", "output": "a\n"}]}]
    assert [(e["row_number"], e["reason"]) for e in result.quarantined] == [
        (3, "row 3: code reference needs 'tests' or 'cases'")]


def test_missing_and_unsupported_files(tmp_path):
    with pytest.raises(FileNotFoundError, match="no such file"):
        load_rows(str(tmp_path / "absent.jsonl"), task="math", column_map=None)
    (tmp_path / "data.csv").write_text("prompt,reference\n")
    with pytest.raises(ValueError, match="unsupported file type '.csv'"):
        load_rows(str(tmp_path / "data.csv"), task="math", column_map=None)
