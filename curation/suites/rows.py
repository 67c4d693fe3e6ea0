"""The task-suite row schema, its validation, and its Arrow/Parquet form.

Every suite (generated or loaded) yields rows `{id, task, subdomain, prompt, reference, source}`.
The reference is the task's own (a str for math, a dict for code, ifeval and structured);
each catalog task says what makes one valid (`Task.reference_error`). Parquet cannot hold a
column that is sometimes a string and sometimes a struct, so `rows_to_table` stores `reference` as JSON text and `table_to_rows` decodes it.
Extra columns (e.g. `difficulty`, `pass_rate`) pass through untouched.
"""

import json
from typing import Any, TypedDict

import pyarrow as pa

from passband.curation.catalog import TASKS, row_task

ROW_FIELDS = ("id", "task", "subdomain", "prompt", "reference", "source")
# Schema metadata key marking a table whose `reference` column is JSON text (our own files),
# so loaders can tell them from user Parquet files whose reference column is plain text.
REFERENCE_ENCODING_KEY = b"passband.reference_encoding"


class Row(TypedDict):
    """One task-suite row; extra keys are allowed and carried along."""

    id: str
    task: str  # a key of curation.catalog.TASKS, or a user's task (curation/catalog/user.py)
    subdomain: str  # e.g. "algebra", "strings"; used for stratified sampling
    prompt: str
    reference: str | dict[str, Any]  # str for math, dict for the other tasks
    source: str  # where the row came from: a generator name, a file, a hub dataset


def validate_row(row: dict[str, Any], index: int, declared: str | None = None) -> str | None:
    """Return why `row` (at position `index`) breaks the schema, or None if it is valid.

    `declared` is the task its source declares: a name that is no task of ours or of the user's
    code is accepted there, unchecked, as a task whose reward the config names
    (VerifierSettings.rewards; the flow's config checks the name), and an import path is taken
    only there (catalog.row_task)."""
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
    checked = row_task(row["task"], declared)
    if checked is None and row["task"] != declared:
        return f"row {index}: task {row['task']!r} is not one of {list(TASKS)}"
    problem = None if checked is None else checked.reference_error(row["reference"])
    return None if problem is None else f"row {index}: {problem}"


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
