"""Checkpoints as artifacts, for SFT and RL alike: scratch space, manifest-last commits, lookup.

A trainer writes a checkpoint directory into scratch space under PASSBAND_HOME
(training/checkpoint.py writes it under a temporary name first); `commit_checkpoint` commits it
to the artifact store manifest-last, so a crash never leaves a checkpoint a rerun would read.
Checkpoints are written at known steps, so the newest is found by probing keys newest first:
the store needs no listing.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from prefect import task
from prefect.cache_policies import NONE

from passband.tasks.provenance import code_version
from passband.tasks.settings import StackSettings
from passband.tasks.store import open_store


@contextmanager
def scratch_dir(prefix: str) -> Iterator[Path]:
    """A temporary directory under PASSBAND_HOME (beside the artifacts, not in a small /tmp)."""
    home = StackSettings.from_env().home
    home.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=prefix, dir=home) as scratch:
        yield Path(scratch)


@task(name="commit-checkpoint", retries=2, retry_delay_seconds=5, cache_policy=NONE)
def commit_checkpoint(local_dir: str, key: str, flow: str, config: dict[str, Any], extra: dict[str, Any]) -> str:
    """Commit a checkpoint directory under `key` (manifest last) and return its URI."""
    store = open_store()
    store.commit(key, Path(local_dir), flow=flow, config=config, code_version=code_version(), extra=extra)
    return store.uri(key)


def newest_committed(keys_newest_first: Iterable[str]) -> str | None:
    """The first of these checkpoint keys that is committed, or None."""
    store = open_store()
    return next((key for key in keys_newest_first if store.exists(key)), None)
