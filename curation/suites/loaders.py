"""Load user task data (JSONL, Parquet, Hugging Face `datasets`) into suite rows.

A column map renames user columns to the schema (`{"question": "prompt", "answer":
"reference"}`); unmapped columns pass through. Missing optional fields get defaults: `task`
from the `task` argument, `subdomain` "general", `source` the file or hub name, `id`
"<source>-<row number>". Every row that still breaks the schema is quarantined with its
1-based row number (the line number for JSONL), a reason and the raw record; none is dropped.
"""

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from passband.curation.catalog import row_task as catalog_row_task
from passband.curation.suites.rows import REFERENCE_ENCODING_KEY, validate_row

DEFAULT_SUBDOMAIN = "general"
JSONL_SUFFIXES = (".jsonl", ".ndjson")
MAX_RAW_CHARS = 10_000  # a quarantined unreadable line keeps at most this much of its text


@dataclass
class LoadResult:
    """Rows that passed validation, and those that did not."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    # {"row_number": 1-based row (line for JSONL), "reason": str, "raw": the record or line}
    quarantined: list[dict[str, Any]] = field(default_factory=list)


@dataclass(frozen=True)
class Record:
    """One raw record before normalisation; `error` is set when it could not even be read."""

    row_number: int
    raw: Any
    error: str | None = None


def load_rows(
    source: str,
    task: str | None = None,
    column_map: dict[str, str] | None = None,
    split: str = "train",
    name: str | None = None,
    prepare: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
) -> LoadResult:
    """Read `source` (a .jsonl/.parquet file, a `save_to_disk` directory or a hub name).

    `task` fills rows without a task column; a row whose task differs is quarantined.
    `split` picks the split of a hub dataset or of a saved DatasetDict; `name` is a hub
    dataset's config name (GSM8K's `main`). `prepare` rewrites each renamed row before it is
    validated (a public benchmark's own columns into ours: curation/suites/benchmarks.py).
    """
    column_map = column_map or {}
    if source.startswith(HUB_PREFIX):
        dataset = _read_dataset(source.removeprefix(HUB_PREFIX), None, split, name)
        _check_mapped_columns(dataset.column_names, column_map, source)
        return validated_rows([Record(i, raw) for i, raw in enumerate(dataset.to_list(), start=1)],
                          task, column_map, source.removeprefix(HUB_PREFIX), False, prepare)
    path = Path(source)
    json_references = False  # our own Parquet files hold every reference as JSON text
    if path.is_file() and path.suffix in JSONL_SUFFIXES:
        records = read_jsonl(path)
    elif path.is_file() and path.suffix == ".parquet":
        table = pq.read_table(path)
        json_references = (table.schema.metadata or {}).get(REFERENCE_ENCODING_KEY) == b"json"
        _check_mapped_columns(table.column_names, column_map, source)
        records = [Record(i, raw) for i, raw in enumerate(table.to_pylist(), start=1)]
    elif path.is_file():
        raise ValueError(f"{source}: unsupported file type {path.suffix!r}; "
                         f"use {' or '.join(JSONL_SUFFIXES)}, .parquet, or a datasets directory")
    elif not path.exists() and path.suffix in (*JSONL_SUFFIXES, ".parquet"):
        raise FileNotFoundError(f"{source}: no such file")
    else:  # a `save_to_disk` directory, or else a hub dataset name
        dataset = _read_dataset(source, path, split, name)
        _check_mapped_columns(dataset.column_names, column_map, source)
        records = [Record(i, raw) for i, raw in enumerate(dataset.to_list(), start=1)]
    return validated_rows(records, task, column_map, path.name if path.exists() else source, json_references,
                          prepare)


def validated_rows(records: list[Record], task: str | None, column_map: dict[str, str], default_source: str,
               json_references: bool,
               prepare: Callable[[dict[str, Any]], dict[str, Any]] | None = None) -> LoadResult:
    """The records normalised and validated: rows, and the quarantined ones with their reasons."""
    result = LoadResult()
    first_row_of_id: dict[str, int] = {}
    for record in records:
        reason = record.error
        row = None
        if reason is None:
            row, reason = _normalise(record, task, column_map, default_source, json_references, prepare)
        if reason is None and row["id"] in first_row_of_id:
            reason = (f"row {record.row_number}: duplicate id {row['id']!r} "
                      f"(first at row {first_row_of_id[row['id']]})")
        if reason is not None:
            result.quarantined.append(
                {"row_number": record.row_number, "reason": reason, "raw": record.raw})
            continue
        first_row_of_id[row["id"]] = record.row_number
        result.rows.append(row)
    return result


def read_jsonl(path: Path, limit: int | None = None) -> list[Record]:
    """One record per non-blank line (the first `limit` of them; None: all); lines split on "\n"
    only, so row numbers match the file's line numbers even when a line holds a stray "\r"."""
    records: list[Record] = []
    with path.open("rb") as lines:
        for line_number, data in enumerate(lines, start=1):
            line = data.decode("utf-8", "replace")
            if not line.strip():  # blank lines hold no row
                continue
            if limit is not None and len(records) == limit:
                break
            try:
                records.append(Record(line_number, json.loads(data.decode("utf-8"))))
            except UnicodeDecodeError as error:
                records.append(Record(line_number, _cut(line),
                                       f"row {line_number}: not valid UTF-8 at byte {error.start}"))
            except json.JSONDecodeError as error:
                records.append(Record(line_number, _cut(line),
                                       f"row {line_number}: bad JSON: {error.msg} "
                                       f"at column {error.colno}"))
            except RecursionError:
                records.append(Record(line_number, _cut(line),
                                       f"row {line_number}: bad JSON: nested too deeply to parse"))
    return records


def _cut(line: str) -> str:
    """The raw line for the quarantine, without its newline and cut at MAX_RAW_CHARS."""
    return line.rstrip("\n")[:MAX_RAW_CHARS]


HUB_PREFIX = "hub:"
"""`path: hub:owner/name` is always a hub dataset, whatever lies on the local disk."""


def missing_local_file(source: str) -> bool:
    """`source` names a local file or folder that does not exist: a name with a file suffix, a path
    starting with / or ., or a path whose first folder exists here (`data/my_maths` beside a `data/`
    folder is a typo, not a hub dataset). Any other name that does not exist, and any `hub:` name, is
    a hub dataset."""
    if source.startswith(HUB_PREFIX):
        return False
    path = Path(source)
    local = (path.suffix in (*JSONL_SUFFIXES, ".parquet") or source.startswith(("/", "./", "../"))
             or (len(path.parts) > 1 and Path(path.parts[0]).is_dir()))
    return local and not path.exists()


def _read_dataset(source: str, path: Path | None, split: str, name: str | None) -> Any:
    """A `datasets.Dataset` from a `save_to_disk` directory or the hub (`path` None: a `hub:` name;
    imported lazily)."""
    import datasets

    if path is None or not path.is_dir():
        return datasets.load_dataset(source, name, split=split)
    loaded = datasets.load_from_disk(str(path))
    if isinstance(loaded, datasets.DatasetDict):
        if split not in loaded:
            raise ValueError(f"{source}: no split {split!r}; it has {sorted(loaded)}")
        return loaded[split]
    return loaded


def _check_mapped_columns(columns: list[str], column_map: dict[str, str], source: str) -> None:
    """A mapped column missing from a table is a typo, not a bad row: fail once, clearly."""
    missing = [column for column in column_map if column not in columns]
    if missing:
        raise ValueError(f"{source}: column map names {missing}, which are not among the "
                         f"columns {columns}")


def _normalise(
    record: Record,
    task: str | None,
    column_map: dict[str, str],
    default_source: str,
    json_references: bool,
    prepare: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
) -> tuple[dict[str, Any] | None, str | None]:
    """Rename, prepare, fill defaults, decode the reference, validate; (row, None) or (None, reason)."""
    number = record.row_number
    if not isinstance(record.raw, dict):
        return None, f"row {number}: expected an object, got {type(record.raw).__name__}"
    row = {column_map.get(column, column): value for column, value in record.raw.items()}
    if len(row) < len(record.raw):
        return None, f"row {number}: two columns map to one name (column map {column_map})"
    if prepare is not None:
        row = prepare(row)
    if task is not None:
        row["task"] = task if row.get("task") is None else row["task"]
        if row["task"] != task:
            return None, f"row {number}: task {row['task']!r} differs from requested {task!r}"
    for name, default in (("subdomain", DEFAULT_SUBDOMAIN), ("source", default_source)):
        row[name] = default if row.get(name) is None else row[name]
    if row.get("id") is None:
        row["id"] = f"{row['source']}-{number}"
    elif isinstance(row["id"], int) and not isinstance(row["id"], bool):
        row["id"] = str(row["id"])  # numeric ids are common in user data and lose nothing
    reference = row.get("reference")
    if isinstance(reference, dict):  # Arrow struct columns fill the keys a row lacks with None
        reference = row["reference"] = {k: v for k, v in reference.items() if v is not None}
    # An unknown or non-string task is reported by validate_row below.
    row_task = catalog_row_task(row["task"], task) if isinstance(row.get("task"), str) else None
    object_reference = row_task is not None and not row_task.text_reference
    if isinstance(reference, str) and (json_references or object_reference):
        try:
            row["reference"] = json.loads(reference)
        except json.JSONDecodeError as error:
            return None, f"row {number}: reference is not valid JSON: {error.msg}"
    elif row_task is not None and row_task.text_reference and isinstance(reference, int | float) \
            and not isinstance(reference, bool):
        row["reference"] = str(reference)  # a numeric answer column, e.g. 42 -> "42"
    if row_task is not None:
        row, reason = row_task.assemble(row)
        if reason is not None:
            return None, f"row {number}: {reason}"
    reason = validate_row(row, number, task)
    return (None, reason) if reason else (row, None)
