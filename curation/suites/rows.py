"""The task-suite row schema, its validation, and its Arrow/Parquet form.

Every suite (generated or loaded) yields rows `{id, task, subdomain, prompt, reference, source}`.
The reference is a str for math (a LaTeX answer) and a dict for code (`tests`/`cases`) and
ifeval (`instructions`). Parquet cannot hold a column that is sometimes a string and sometimes
a struct, so `rows_to_table` stores `reference` as JSON text and `table_to_rows` decodes it.
Extra columns (e.g. `difficulty`, `pass_rate`) pass through untouched.
"""

import json
from typing import Any, TypedDict

import pyarrow as pa

ROW_FIELDS = ("id", "task", "subdomain", "prompt", "reference", "source")
TASKS = ("math", "code", "ifeval")
# Schema metadata key marking a table whose `reference` column is JSON text (our own files),
# so loaders can tell them from user Parquet files whose reference column is plain text.
REFERENCE_ENCODING_KEY = b"passband.reference_encoding"


class Row(TypedDict):
    """One task-suite row; extra keys are allowed and carried along."""

    id: str
    task: str  # one of TASKS
    subdomain: str  # e.g. "algebra", "strings"; used for stratified sampling
    prompt: str
    reference: str | dict[str, Any]  # str for math, dict for code and ifeval
    source: str  # where the row came from: a generator name, a file, a hub dataset


def validate_row(row: dict[str, Any], index: int) -> str | None:
    """Return why `row` (at position `index`) breaks the schema, or None if it is valid."""
    if not isinstance(row, dict):
        return f"row {index}: expected an object, got {type(row).__name__}"
    for field in ROW_FIELDS:
        if field not in row:
            return f"row {index}: missing field {field!r}"
    for field in ("id", "task", "subdomain", "prompt", "source"):
        if not isinstance(row[field], str):
            return f"row {index}: field {field!r} must be str, got {type(row[field]).__name__}"
    for field in ("id", "prompt"):
        if not row[field].strip():
            return f"row {index}: field {field!r} is empty"
    task, reference = row["task"], row["reference"]
    if task not in TASKS:
        return f"row {index}: task {task!r} is not one of {list(TASKS)}"
    if task == "math":
        if not isinstance(reference, str) or not reference.strip():
            return f"row {index}: math reference must be a non-empty str, got {reference!r:.80}"
        return None
    if not isinstance(reference, dict):
        return f"row {index}: {task} reference must be an object, got {type(reference).__name__}"
    if task == "code":
        return _code_reference_problem(reference, index)
    if not isinstance(reference.get("instructions"), list):
        return f"row {index}: ifeval reference needs a list 'instructions'"
    return None


def _code_reference_problem(reference: dict[str, Any], index: int) -> str | None:
    """A code reference holds `tests` (Python source) or `cases` (stdin/stdout pairs)."""
    if "tests" in reference:
        if not isinstance(reference["tests"], str) or not reference["tests"].strip():
            return f"row {index}: code reference 'tests' must be non-empty Python source"
        if not isinstance(reference.get("entry_point", ""), str):
            return f"row {index}: code reference 'entry_point' must be a str"
        return None
    if "cases" in reference:
        cases = reference["cases"]
        if not isinstance(cases, list) or not cases:
            return f"row {index}: code reference 'cases' must be a non-empty list"
        for case in cases:
            if not (isinstance(case, dict) and isinstance(case.get("input"), str)
                    and isinstance(case.get("output"), str)):
                return f"row {index}: each code case needs str 'input' and 'output'"
        return None
    return f"row {index}: code reference needs 'tests' or 'cases'"


def rows_to_table(rows: list[dict[str, Any]]) -> pa.Table:
    """Rows -> Arrow table; schema columns first, extras after in first-seen order.

    `reference` becomes JSON text; extra columns are typed by Arrow's inference (a row
    lacking an extra column gets null there).
    """
    columns = list(ROW_FIELDS)
    for row in rows:
        columns.extend(key for key in row if key not in columns)
    data = {
        column: [row.get(column) for row in rows] for column in columns if column != "reference"
    }
    data["reference"] = [json.dumps(row.get("reference")) for row in rows]
    table = pa.table({column: data[column] for column in columns})
    if not rows:  # Arrow infers `null` for empty lists; keep the schema columns as strings
        table = pa.table({column: pa.array([], pa.string()) for column in columns})
    return table.replace_schema_metadata({REFERENCE_ENCODING_KEY: b"json"})


def table_to_rows(table: pa.Table) -> list[dict[str, Any]]:
    """Arrow table written by `rows_to_table` -> rows, with `reference` decoded from JSON."""
    rows = table.to_pylist()
    for row in rows:
        row["reference"] = json.loads(row["reference"])
    return rows
