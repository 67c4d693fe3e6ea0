"""User-labelled grading triples through the loaders: JSONL and Parquet, a column map, and bad
labels quarantined with their row and field."""

import json

import pyarrow as pa
import pyarrow.parquet as pq

from passband.curation.grading.texts import grading_prompt
from passband.curation.grading.triples import generate_triples
from passband.curation.suites.loaders import load_rows
from passband.curation.suites.rows import rows_to_table
from passband.curation.suites.source import ProblemSource

SOLUTION = "Step 1: Add: 2 + 3 = 5.\nStep 2: So the answer is \\boxed{5}."


def write_jsonl(path, records) -> str:
    path.write_text("".join(json.dumps(record) + "\n" for record in records))
    return str(path)


def test_jsonl_triples_get_their_prompt_and_reference(tmp_path):
    path = write_jsonl(tmp_path / "triples.jsonl", [
        {"id": "t1", "problem": "What is 2 + 3?", "solution": SOLUTION, "score": 1},
        {"problem": "What is 2 + 3?", "solution": SOLUTION, "score": 0.7},
        {"problem": "What is 2 + 3?", "solution": SOLUTION, "score": "1"},
        {"problem": "What is 2 + 3?", "score": 0},
        {"problem": "What is 2 + 3?", "solution": SOLUTION},
        {"id": "t6", "prompt": "my own rendering", "reference": {"score": 0.5}},
    ])
    result = load_rows(path, task="proof_grading")
    assert [row["id"] for row in result.rows] == ["t1", "t6"]
    first = result.rows[0]
    assert first["prompt"] == grading_prompt("What is 2 + 3?", SOLUTION)
    assert first["reference"] == {"score": 1} and "score" not in first
    assert (first["problem"], first["solution"], first["task"]) == ("What is 2 + 3?", SOLUTION, "proof_grading")
    assert result.rows[1]["prompt"] == "my own rendering"
    assert [(q["row_number"], q["reason"]) for q in result.quarantined] == [
        (2, "row 2: proof_grading reference 'score' must be 0, 0.5 or 1, got 0.7"),
        (3, "row 3: proof_grading reference 'score' must be the number 0, 0.5 or 1, got '1' (str)"),
        (4, "row 4: proof_grading needs str 'solution' (or a rendered 'prompt')"),
        (5, "row 5: proof_grading needs a label: 'score' (0, 0.5 or 1) or a 'reference' {\"score\": s}"),
    ]


def test_a_column_map_renames_the_users_triples(tmp_path):
    path = write_jsonl(tmp_path / "mine.jsonl", [{"question": "Q?", "proof": "P.", "grade": 0.5, "task": "proof_grading"}])
    source = ProblemSource(path=path, column_map={"question": "problem", "proof": "solution", "grade": "score"})
    [row] = source.load().rows
    assert (row["prompt"], row["reference"], row["id"]) == (grading_prompt("Q?", "P."), {"score": 0.5}, "mine.jsonl-1")


def test_parquet_triples_user_columns_and_our_own_files(tmp_path):
    user = tmp_path / "user.parquet"
    pq.write_table(pa.table({"problem": ["Q1?", "Q2?"], "solution": ["S1.", "S2."], "score": [0.0, 0.25]}), user)
    result = load_rows(str(user), task="proof_grading")
    assert [row["reference"] for row in result.rows] == [{"score": 0.0}]
    assert [q["reason"] for q in result.quarantined] == [
        "row 2: proof_grading reference 'score' must be 0, 0.5 or 1, got 0.25"]
    # generated triples written as our own Parquet come back as they were
    rows = generate_triples(12, 5, 1)
    ours = tmp_path / "ours.parquet"
    pq.write_table(rows_to_table(rows), ours)
    loaded = load_rows(str(ours))
    assert (loaded.rows, loaded.quarantined) == (rows, [])
