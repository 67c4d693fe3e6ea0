"""The RL run's rollouts artifact: one Parquet part per iteration under one key, manifest last.

Each iteration re-commits the artifact with its parts so far plus the new one (the store writes
the manifest last, so a reader sees the parts before or after, never half of one). A part is
named by its iteration, and parts from a later iteration than the one being written (a crash after
the rollouts were kept but before the checkpoint) are dropped: the resumed run writes them again.
"""

from __future__ import annotations

import re
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from passband.tasks.artifacts.provenance import code_version
from passband.tasks.artifacts.store import fetch_artifact, open_store
from passband.training.rl.monitoring.rollout_records import ROLLOUT_COLUMNS

ROLLOUTS_TAG = "rollouts_uri"
"""The MLflow tag on an RL run naming its rollouts artifact (what `passband rollouts RUN` reads)."""
_PART = re.compile(r"iter-(\d{6})\.parquet")


def rollouts_key(run_key: str) -> str:
    return f"rollouts/rl/{run_key}"


def part_name(iteration: int) -> str:
    return f"iter-{iteration:06d}.parquet"


def records_table(records: list[dict[str, Any]]) -> pa.Table:
    """The records as a table with every column of ROLLOUT_COLUMNS, in that order."""
    return pa.Table.from_pylist(records).select(list(ROLLOUT_COLUMNS)) if records else \
        pa.table({name: pa.array([], pa.null()) for name in ROLLOUT_COLUMNS})


def keep_rollouts(records: list[dict[str, Any]], run_key: str, iteration: int, config: dict[str, Any]) -> tuple[str, int]:
    """(artifact URI, bytes of this iteration's part): the run's rollouts artifact with `records`
    as iteration `iteration`'s part."""
    store, key = open_store(), rollouts_key(run_key)
    with tempfile.TemporaryDirectory(prefix="passband-rollouts-") as tmp:
        parts = Path(tmp)
        if store.exists(key):
            for old in store.fetch(key).iterdir():
                match = _PART.fullmatch(old.name)
                if match and int(match.group(1)) < iteration:
                    shutil.copyfile(old, parts / old.name)
        pq.write_table(records_table(records), parts / part_name(iteration))
        size = (parts / part_name(iteration)).stat().st_size
        uri = store.commit(key, parts, flow="rl", config=config, code_version=code_version(),
                           extra={"num_iterations": len(list(parts.iterdir()))})
    return uri, size


def read_rollouts(uri: str) -> pa.Table:
    """Every part of a rollouts artifact, in iteration order (checksums verified on fetch)."""
    folder = fetch_artifact(uri)
    parts = sorted(path for path in folder.iterdir() if _PART.fullmatch(path.name))
    return pa.concat_tables([pq.read_table(path) for path in parts], promote_options="default") if parts else \
        records_table([])
