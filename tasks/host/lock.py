"""One writer per PASSBAND_HOME: `passband run` holds an exclusive lock on `<home>/run.lock`.

Two runs on one home would interleave writes to the same MLflow database, artifact store and
stage cache (and, with the same config, race to commit the same keys). `fcntl.flock` is released
by the kernel when the holder exits, crash or kill -9 included, so a stale lock never blocks.
The holder writes its pid and command line into the file, so a second run can name it.
"""

from __future__ import annotations

import fcntl
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

LOCK_NAME = "run.lock"


class LockHeld(RuntimeError):
    """Another process holds the home's lock; the message names its pid and command."""


def holder(path: Path) -> str:
    """What the lock file says about its holder ("pid 123: passband run rl"), or "unknown"."""
    text = path.read_text().strip() if path.is_file() else ""
    return text or "unknown (it has not written its pid yet)"


@contextmanager
def home_lock(home: Path, wait: bool = False,
              on_wait: Callable[[str], None] | None = None) -> Iterator[Path]:
    """Hold `<home>/run.lock` for the duration; yield its path.

    Held elsewhere: raise LockHeld at once, or with `wait=True` call `on_wait(holder)` once and
    block until the holder is done.
    """
    home.mkdir(parents=True, exist_ok=True)
    path = home / LOCK_NAME
    # "a", not "w": opening must not truncate the holder's pid line before we own the lock
    with open(path, "a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            current = holder(path)
            if not wait:
                raise LockHeld(
                    f"{home} is in use by another passband run ({current}); wait for it to finish,"
                    f" rerun with --wait to queue behind it, or point PASSBAND_HOME elsewhere"
                ) from None
            if on_wait is not None:
                on_wait(current)
            fcntl.flock(handle, fcntl.LOCK_EX)
        handle.seek(0)
        handle.truncate()
        handle.write(f"pid {os.getpid()}: {' '.join([Path(sys.argv[0]).name, *sys.argv[1:]])}\n")
        handle.flush()
        try:
            yield path
        finally:
            # emptied before release, so a later reader never names a finished process
            handle.seek(0)
            handle.truncate()
            handle.flush()
            fcntl.flock(handle, fcntl.LOCK_UN)
