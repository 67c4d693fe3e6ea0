"""Parquet datasets in and out of the artifact store (manifest-last, checksum-verified)."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from prefect import task

from passband.tasks.artifacts.provenance import code_version
from passband.tasks.artifacts.store import fetch_artifact, open_store

DATA_FILE = "data.parquet"


@task(name="commit-table", retries=2, retry_delay_seconds=2)
def commit_table(table: pa.Table, key: str, flow: str, config: dict[str, Any],
                 extra: dict[str, Any] | None = None) -> str:
    """Write `table` as one Parquet file under `key`; return the artifact URI."""
    store = open_store()
    with tempfile.TemporaryDirectory(prefix="passband-table-") as tmp:
        pq.write_table(table, Path(tmp) / DATA_FILE)
        store.commit(key, Path(tmp), flow=flow, config=config, code_version=code_version(),
                     extra={"num_rows": table.num_rows, **(extra or {})})
    return store.uri(key)


@task(name="read-table", retries=2, retry_delay_seconds=2)
def read_table(uri: str) -> pa.Table:
    """The Parquet table of a committed dataset artifact (checksums verified on fetch)."""
    return pq.read_table(fetch_artifact(uri) / DATA_FILE)
