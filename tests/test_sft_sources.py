"""Chat-format SFT files: both row shapes read, bad rows quarantined with their line number."""

import json

import pyarrow as pa
import pyarrow.parquet as pq

from passband.training.sft.sources import read_chat_rows


def test_jsonl_rows_and_quarantine(tmp_path):
    path = tmp_path / "chat.jsonl"
    lines = [
        json.dumps({"prompt": "2+2?", "completion": "4", "band": "mid"}),
        json.dumps({"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "1+1?"},
                                 {"role": "assistant", "content": "2"}]}),
        "{not json",
        json.dumps({"messages": [{"role": "user", "content": "hi"}, {"role": "user", "content": "again"}]}),
        "",
        json.dumps({"prompt": "3+3?"}),
    ]
    path.write_text("\n".join(lines) + "\n")
    rows, quarantined = read_chat_rows(path)
    assert rows == [
        {"prompt": "2+2?", "completion": "4", "band": "mid"},
        {"prompt": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "1+1?"}], "completion": "2"},
    ]
    assert [q["row_number"] for q in quarantined] == [3, 4, 6]
    assert quarantined[0]["removed_reason"].startswith("invalid JSON")
    assert quarantined[1]["removed_reason"] == "the last message must be a non-empty assistant message"


def test_parquet_rows(tmp_path):
    path = tmp_path / "chat.parquet"
    pq.write_table(pa.table({"prompt": ["a", "b"], "completion": ["x", ""]}), path)
    rows, quarantined = read_chat_rows(path)
    assert rows == [{"prompt": "a", "completion": "x"}]
    assert quarantined == [{"prompt": "b", "completion": "", "row_number": 2,
                            "removed_reason": "needs prompt and a non-empty completion string, or messages"}]
