"""Chat-format SFT rows from a local JSONL or Parquet file, in the shape training.sft.data reads.

Two row shapes are accepted:
- {"prompt": str | messages, "completion": str, ...} as the curation flow writes them;
- {"messages": [{"role", "content"}, ...]} (the common chat format), whose last message must be
  the assistant's: it becomes `completion`, the messages before it `prompt`.
Unusable rows come back quarantined with their 1-based line or row number and the reason.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from passband.curation.suites.sniff import NUM_ROWS, Sniff, first_records


def chat_row(row: dict[str, Any]) -> tuple[dict[str, Any] | None, str | None]:
    """(row with prompt and completion, None) or (None, why the row cannot be used)."""
    if "messages" not in row:
        if not row.get("prompt") or not isinstance(row.get("completion"), str) or not row["completion"]:
            return None, "needs prompt and a non-empty completion string, or messages"
        return row, None
    messages = row["messages"]
    if not isinstance(messages, list) or len(messages) < 2:
        return None, "messages must be a list of at least a user and an assistant message"
    last = messages[-1]
    if not isinstance(last, dict) or last.get("role") != "assistant" or not last.get("content"):
        return None, "the last message must be a non-empty assistant message"
    rest = {key: value for key, value in row.items() if key != "messages"}
    return {**rest, "prompt": [dict(m) for m in messages[:-1]], "completion": last["content"]}, None


def read_chat_rows(path: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(usable rows, quarantined rows) of a .jsonl or .parquet file."""
    if path.suffix == ".jsonl":
        raw: list[tuple[int, Any]] = []
        quarantined: list[dict[str, Any]] = []
        for number, line in enumerate(path.read_text().splitlines(), start=1):
            if not line.strip():
                continue
            try:
                raw.append((number, json.loads(line)))
            except json.JSONDecodeError as err:  # one bad line must not sink the file
                quarantined.append({"row_number": number, "removed_reason": f"invalid JSON: {err}"})
    elif path.suffix == ".parquet":
        import pyarrow.parquet as pq

        raw, quarantined = list(enumerate(pq.read_table(path).to_pylist(), start=1)), []
    else:
        raise ValueError(f"SFT data file {path}: expected a .jsonl or .parquet file")
    rows, bad = chat_rows(raw)
    return rows, quarantined + bad


def chat_rows(numbered: list[tuple[int, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(usable rows, quarantined rows) of (row number, raw row) pairs, via `chat_row`."""
    rows, quarantined = [], []
    for number, row in numbered:
        if not isinstance(row, dict):
            quarantined.append({"row_number": number, "removed_reason": "not an object"})
            continue
        usable, reason = chat_row(row)
        if usable is None:
            quarantined.append({**row, "row_number": number, "removed_reason": reason})
        else:
            rows.append(usable)
    return rows, quarantined


def sniff_chat_file(source: str, num_rows: int = NUM_ROWS) -> Sniff:
    """The preflight of an SFT chat file (.jsonl or .parquet): its first rows read as SFT reads them."""
    read = first_records(source, "train", num_rows)
    if isinstance(read, str):
        return Sniff(problems=[read])
    records = read[0]
    if not records:
        return Sniff(problems=[f"{source} holds no rows"])
    rows, bad = chat_rows([(r.row_number, r.raw) for r in records if r.error is None])
    reasons = [reason for _, reason in sorted(
        [(r.row_number, r.error) for r in records if r.error is not None]
        + [(row["row_number"], f"row {row['row_number']}: {row['removed_reason']}") for row in bad])]
    if not rows:
        return Sniff(problems=[f"{source}: none of its first {len(records)} rows is a chat row "
                               f"(prompt and completion, or messages); {reasons[0]}"])
    if reasons:
        return Sniff(notes=[f"{source}: {len(reasons)} of its first {len(records)} rows will be quarantined; "
                            f"the first: {reasons[0]}"])
    return Sniff()

