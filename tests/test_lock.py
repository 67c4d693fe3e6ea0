"""One `passband run` per PASSBAND_HOME: a second process fails at once naming the holder, or waits."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

BIN = Path(sys.executable).parent / "passband"

# Holds the lock of the home in argv[1] until its stdin closes; says "held" once it has it.
# It poses as the command line of a real run, which the lock file records.
HOLDER = """
import sys
from pathlib import Path
from passband.tasks.host.lock import home_lock
home = Path(sys.argv[1])
sys.argv = ["/some/venv/bin/passband", "run", "rl", "--preset", "demo"]
with home_lock(home):
    print("held", flush=True)
    sys.stdin.read()
"""

# Takes the lock (argv[2] == "wait": waiting for it); prints how it went.
TAKER = """
import sys, time
from pathlib import Path
from passband.tasks.host.lock import LockHeld, home_lock
try:
    with home_lock(Path(sys.argv[1]), wait=sys.argv[2] == "wait",
                   on_wait=lambda holder: print("waiting on", holder, flush=True)):
        print("acquired", flush=True)
except LockHeld as err:
    print("refused:", err, flush=True)
    sys.exit(3)
"""


def start_holder(home: Path) -> subprocess.Popen:
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(home)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    return holder


def release(holder: subprocess.Popen) -> None:
    holder.stdin.close()
    assert holder.wait(timeout=30) == 0


def test_second_process_is_refused_with_the_holders_pid_and_command(tmp_path: Path) -> None:
    holder = start_holder(tmp_path)
    try:
        taker = subprocess.run([sys.executable, "-c", TAKER, str(tmp_path), "nowait"], capture_output=True,
                               text=True, timeout=60)
        assert taker.returncode == 3, taker.stderr
        assert f"{tmp_path} is in use by another passband run (pid {holder.pid}: passband run rl --preset demo)" \
            in taker.stdout
    finally:
        release(holder)
    # released: the next one gets it, and the file no longer names the finished holder
    taker = subprocess.run([sys.executable, "-c", TAKER, str(tmp_path), "nowait"], capture_output=True,
                           text=True, timeout=60)
    assert taker.stdout == "acquired\n"
    assert (tmp_path / "run.lock").read_text() == ""


def test_waiting_process_gets_the_lock_when_the_holder_ends(tmp_path: Path) -> None:
    holder = start_holder(tmp_path)
    taker = subprocess.Popen([sys.executable, "-c", TAKER, str(tmp_path), "wait"], stdout=subprocess.PIPE,
                             text=True)
    try:
        assert taker.stdout.readline().startswith(f"waiting on pid {holder.pid}")
        time.sleep(0.5)
        assert taker.poll() is None  # still queued while the holder runs
    finally:
        release(holder)
    assert taker.stdout.read() == "acquired\n" and taker.wait(timeout=30) == 0


def test_a_killed_holder_leaves_no_stale_lock(tmp_path: Path) -> None:
    holder = start_holder(tmp_path)
    holder.kill()
    holder.wait(timeout=30)
    taker = subprocess.run([sys.executable, "-c", TAKER, str(tmp_path), "nowait"], capture_output=True,
                           text=True, timeout=60)
    assert taker.stdout == "acquired\n"


def test_passband_run_on_a_busy_home_fails_at_once(tmp_path: Path) -> None:
    home = tmp_path / "home"
    holder = start_holder(home)
    try:
        result = subprocess.run([str(BIN), "run", "sample", "--preset", "smoke"], cwd=tmp_path, capture_output=True,
                                text=True, timeout=120, env={**os.environ, "PASSBAND_HOME": str(home)})
    finally:
        release(holder)
    assert result.returncode == 75, result.stderr[-2000:]
    assert f"is in use by another passband run (pid {holder.pid}: passband run rl --preset demo)" in result.stderr
    assert "--wait" in result.stderr
    assert result.stdout == ""  # nothing ran: no summary line
