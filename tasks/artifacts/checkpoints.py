"""Checkpoints as artifacts, for SFT and RL alike: scratch space, manifest-last commits, lookup.

A trainer writes a checkpoint directory into scratch space under `<PASSBAND_HOME>/scratch`
(training/checkpoint.py writes it under a temporary name first); `commit_checkpoint` commits it
to the artifact store manifest-last, so a crash never leaves a checkpoint a rerun would read.
A process killed with -9 cannot delete its scratch (an RL run leaves a copy of the model there),
so each scratch dir is named after its process and the next one removes those of dead processes.
Checkpoints are written at known steps, so the newest is found by probing keys newest first:
the store needs no listing.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from prefect import task
from prefect.cache_policies import NONE

from passband.tasks.artifacts.provenance import code_version
from passband.tasks.artifacts.store import open_store
from passband.tasks.host.processes import alive
from passband.tasks.host.settings import StackSettings


SCRATCH = "scratch"
_OWNER = re.compile(r"-pid(\d+)-")


@contextmanager
def scratch_dir(prefix: str) -> Iterator[Path]:
    """A temporary directory under <PASSBAND_HOME>/scratch (beside the artifacts, not in a small
    /tmp), named `<prefix>pid<this pid>-...`; scratch left by dead processes is removed first."""
    root = StackSettings.from_env().home / SCRATCH
    root.mkdir(parents=True, exist_ok=True)
    remove_orphaned_scratch(root)
    with tempfile.TemporaryDirectory(prefix=f"{prefix}pid{os.getpid()}-", dir=root) as scratch:
        yield Path(scratch)


def remove_orphaned_scratch(root: Path) -> list[str]:
    """Delete the scratch dirs under `root` whose owning process no longer exists; their names."""
    removed = []
    for path in sorted(root.iterdir()):
        owner = _OWNER.search(path.name)
        if owner and not alive(int(owner.group(1))):
            shutil.rmtree(path)
            removed.append(path.name)
    return removed


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
