"""A look at the first rows of a problem file or dataset before a run: the preflight's data check.

A run reads its sources when their stage starts, which can be forty minutes in. Here a source is
opened and its first rows are read and validated exactly as the loader will (column map, the
task's reference check), so an empty file, binary junk, a column-map typo or a bad reference fails
when the config is read. Only the first `num_rows` rows are read: a 100 MB file costs what a
10-row one does.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from passband.curation.suites.loaders import (HUB_PREFIX, JSONL_SUFFIXES, REFERENCE_ENCODING_KEY, Record,
                                              read_jsonl, validated_rows)

NUM_ROWS = 20
"""Rows read from each source: enough for a systematic problem (every row), cheap on any file."""
SAVED_DATASET_FILES = ("state.json", "dataset_dict.json")
"""What `datasets`' save_to_disk writes into a folder (a Dataset, a DatasetDict)."""


@dataclass
class Sniff:
    """What a look at a source found: `problems` stop the run, `notes` are printed beside it."""

    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def first_records(source: str, split: str, num_rows: int) -> tuple[list[Record], list[str] | None, bool] | str:
    """(the first records, the table's columns (None for JSONL), whether references are JSON text)
    of a local file or saved dataset, or why it cannot be read at all."""
    path = Path(source)
    if path.is_dir():
        if not any((path / name).is_file() for name in SAVED_DATASET_FILES):
            return (f"{source} is a folder without a saved dataset (datasets' save_to_disk writes "
                    f"{' or '.join(SAVED_DATASET_FILES)}; for JSONL or Parquet name the file)")
        import datasets

        loaded = datasets.load_from_disk(str(path))
        if isinstance(loaded, datasets.DatasetDict):
            if split not in loaded:
                return f"{source}: no split {split!r}; it has {sorted(loaded)}"
            loaded = loaded[split]
        head = loaded.select(range(min(num_rows, len(loaded))))
        return [Record(i, raw) for i, raw in enumerate(head.to_list(), start=1)], loaded.column_names, False
    if path.suffix in JSONL_SUFFIXES:
        return read_jsonl(path, limit=num_rows), None, False
    try:
        parquet = pq.ParquetFile(path)
    except pa.ArrowInvalid as err:  # a file named .parquet that is not one
        return f"{source}: not a Parquet file ({err})"
    batch = next(parquet.iter_batches(batch_size=num_rows), None)
    rows = [] if batch is None else batch.to_pylist()
    json_references = (parquet.schema_arrow.metadata or {}).get(REFERENCE_ENCODING_KEY) == b"json"
    return [Record(i, raw) for i, raw in enumerate(rows, start=1)], parquet.schema_arrow.names, json_references


def sniff_problems(source: str, task: str | None = None, column_map: dict[str, str] | None = None,
                   split: str = "train", num_rows: int = NUM_ROWS) -> Sniff:
    """The preflight of a problem source (ProblemSource's path, task, column_map, split): its first
    rows read and validated as `load_rows` will. A hub dataset is not opened (that is a download)."""
    column_map = column_map or {}
    path = Path(source)
    if source.startswith(HUB_PREFIX) or not path.exists():
        return Sniff()
    read = first_records(source, split, num_rows)
    if isinstance(read, str):
        return Sniff(problems=[read])
    records, columns, json_references = read
    if not records:
        return Sniff(problems=[f"{source} holds no rows"])
    seen = columns if columns is not None else sorted({key for r in records if isinstance(r.raw, dict) for key in r.raw})
    unknown = [name for name in column_map if name not in seen]
    if unknown and seen:
        return Sniff(problems=[f"{source}: column_map names {', '.join(map(repr, unknown))}, not among the columns "
                               f"of its first rows ({', '.join(seen)})"])
    result = validated_rows(records, task, column_map, path.name, json_references)
    first_bad = result.quarantined[0] if result.quarantined else None
    if not result.rows:
        return Sniff(problems=[f"{source}: none of its first {len(records)} rows is usable; {first_bad['reason']}"])
    if first_bad is not None:
        return Sniff(notes=[f"{source}: {len(result.quarantined)} of its first {len(records)} rows will be quarantined; "
                            f"the first: {first_bad['reason']}"])
    return Sniff()


def merge(sniffs: list[Sniff]) -> Sniff:
    """Every problem and note of several looks."""
    return Sniff(problems=[p for s in sniffs for p in s.problems], notes=[n for s in sniffs for n in s.notes])

