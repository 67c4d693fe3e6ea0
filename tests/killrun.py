"""kill -9 a real `passband run` at a random point after a commit, for the resume tests.

`kill_after_commits` starts the command in its own session (so it leads a process group
holding everything it starts: the Prefect ephemeral server, engine workers), polls the artifact
store under the fresh PASSBAND_HOME until N artifacts matching a pattern are committed (their
manifests exist), waits a delay drawn from a seeded RNG, SIGKILLs the whole group and
checks that no process of the group is left alive. It returns what was committed at that moment,
so a test can say exactly where the run died and what its rerun must reuse. `run_to_end` runs a
command to completion and returns its JSON summary line. `kill_rank_after_commits` kills one
torchrun rank of a run instead, and waits for the run to fail by itself.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

BIN = Path(sys.executable).parent / "passband"
POLL_S = 0.05


def passband_env(home: Path) -> dict[str, str]:
    """This environment with only PASSBAND_HOME set among passband's and Prefect's variables, so an
    outer setting (an S3 root, a Prefect server) cannot leak into the run under test."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PASSBAND_", "PREFECT_"))}
    return {**env, "PASSBAND_HOME": str(home)}


def kill_seed() -> int:
    """PASSBAND_KILL_SEED, or a fresh random seed (printed by the caller, so a failure reproduces)."""
    return int(os.environ.get("PASSBAND_KILL_SEED") or random.SystemRandom().randrange(2**32))


def committed(home: Path, pattern: str) -> dict[str, bytes]:
    """Manifests under <home>/artifacts matching `pattern` (a glob ending in manifest.json), by path
    relative to the artifact root -> their bytes (a manifest names its version: a recommit changes it)."""
    root = home / "artifacts"
    return {path.relative_to(root).as_posix(): path.read_bytes() for path in sorted(root.glob(pattern))}


def group_members(pgid: int) -> list[str]:
    """`pid state command` of every live (not zombie) process in process group `pgid`."""
    members = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except (FileNotFoundError, ProcessLookupError):  # the process ended while we listed /proc
            continue
        # comm may hold spaces and parentheses: the fields after it start at the last ')'
        state, _ppid, pgrp = text[text.rindex(")") + 2:].split()[:3]
        if int(pgrp) == pgid and state != "Z":
            members.append(f"{stat.parent.name} {state} {text[text.index('(') + 1:text.rindex(')')]}")
    return members


@dataclass
class Killed:
    """Where a run was killed."""

    seed: int
    commit_seen: str
    """The newest of the first `num_commits` manifests that matched: the point the delay started from."""
    delay_s: float
    """Seconds waited after that commit was seen, drawn uniformly from [0, max_delay_s)."""
    seconds_after_start: float
    """When the SIGKILL was sent, counted from the start of the command."""
    committed: dict[str, bytes]
    """Every manifest matching the pattern once the group was dead: what a rerun finds."""
    stderr_tail: str

    def describe(self) -> str:
        return (f"seed {self.seed}: commit seen {self.commit_seen}; killed {self.delay_s:.2f} s later, "
                f"{self.seconds_after_start:.1f} s into the run, with {len(self.committed)} committed: "
                f"{sorted(self.committed)}")


@contextmanager
def _running(args: list[str], home: Path, label: str) -> Iterator[tuple[subprocess.Popen, Path, float]]:
    """`passband *args` started on `home` in its own session, its output in <home>.<label>.std*:
    (the process, its stderr file, its start on the monotonic clock). Its group is killed at the
    end if it still runs: a failed assertion must not leave the run going."""
    home.mkdir(parents=True, exist_ok=True)
    stderr_path = home.parent / f"{home.name}.{label}.stderr"
    with open(home.parent / f"{home.name}.{label}.stdout", "wb") as out, open(stderr_path, "wb") as err:
        started = time.monotonic()
        proc = subprocess.Popen([str(BIN), *args], cwd=home.parent, env=passband_env(home), stdout=out,
                                stderr=err, start_new_session=True)
        try:
            yield proc, stderr_path, started
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=60)


def _await_commits(proc: subprocess.Popen, args: list[str], home: Path, pattern: str, num_commits: int,
                   started: float, timeout_s: float, stderr_path: Path) -> dict[str, bytes]:
    """The manifests matching `pattern` once there are `num_commits` of them; fails if the run
    exits first or `timeout_s` after `started` passes."""
    while len(seen := committed(home, pattern)) < num_commits:
        assert proc.poll() is None, (f"passband {' '.join(args)} exited ({proc.returncode}) before "
                                     f"committing {num_commits} x {pattern}:\n{stderr_path.read_text()[-3000:]}")
        assert time.monotonic() - started < timeout_s, f"fewer than {num_commits} x {pattern} after {timeout_s} s"
        time.sleep(POLL_S)
    return seen


def kill_after_commits(args: list[str], home: Path, pattern: str, seed: int, max_delay_s: float,
                       timeout_s: float, num_commits: int = 1, done_pattern: str | None = None) -> Killed:
    """Start `passband *args` on `home`, SIGKILL its process group `U(0, max_delay_s)` seconds after
    `num_commits` manifests matching `pattern` exist, and check the whole group is gone.

    Fails if the run ends before the kill, or if `done_pattern` (the stage's final artifact) was
    already committed when it was killed: the kill would then test nothing.
    """
    delay_s = random.Random(seed).uniform(0, max_delay_s)
    with _running(args, home, "killed") as (proc, stderr_path, started):
        seen = _await_commits(proc, args, home, pattern, num_commits, started, timeout_s, stderr_path)
        time.sleep(delay_s)
        assert proc.poll() is None, (f"passband {' '.join(args)} finished {delay_s:.2f} s after commit "
                                     f"{num_commits}, before the kill: lower max_delay_s or give it more work")
        os.killpg(proc.pid, signal.SIGKILL)  # the session's id is the leader's pid
        killed_at = time.monotonic() - started
    assert proc.returncode == -signal.SIGKILL, f"exit status {proc.returncode}, not killed by SIGKILL"
    # SIGKILL is delivered asynchronously; every member must be gone within moments (zombies are dead
    # processes waiting for their parent, init here, to reap them).
    deadline = time.monotonic() + 10
    while (alive := group_members(proc.pid)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not alive, f"processes of the killed run survived SIGKILL: {alive}"
    after = committed(home, pattern)
    if done_pattern is not None:
        assert not committed(home, done_pattern), (f"{done_pattern} was committed before the kill: the run had "
                                                    "finished its work; lower max_delay_s or give it more work")
    newest = max(seen, key=lambda path: (home / "artifacts" / path).stat().st_mtime)
    return Killed(seed, newest, delay_s, killed_at, after, stderr_path.read_text()[-3000:])


def run_to_end(args: list[str], home: Path, timeout_s: float, label: str) -> tuple[dict, str, float]:
    """(the JSON summary line, stderr, wall seconds) of `passband *args` run to completion on `home`."""
    home.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    result = subprocess.run([str(BIN), *args], cwd=home.parent, env=passband_env(home), capture_output=True,
                            text=True, timeout=timeout_s, start_new_session=True)
    wall_s = time.monotonic() - started
    (home.parent / f"{home.name}.{label}.stderr").write_text(result.stderr)
    assert result.returncode == 0, f"passband {' '.join(args)} ({label}) failed:\n{result.stderr[-4000:]}"
    lines = result.stdout.splitlines()
    assert len(lines) == 1, f"expected one JSON line on stdout, got {result.stdout!r}"
    summary = json.loads(lines[0])
    assert summary["status"] == "completed", summary
    return summary, result.stderr, wall_s


def descendants(pid: int) -> list[int]:
    """Every live descendant of `pid`, from /proc (torchrun's ranks sit in sessions of their own,
    outside the run's process group, but stay its descendants)."""
    parents = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except (FileNotFoundError, ProcessLookupError):
            continue
        state, ppid = text[text.rindex(")") + 2:].split()[:2]
        if state != "Z":
            parents[int(stat.parent.name)] = int(ppid)
    found, frontier = [], [pid]
    while frontier:
        parent = frontier.pop()
        kids = [child for child, ppid in parents.items() if ppid == parent]
        found += kids
        frontier += kids
    return found


def rank_pids(pid: int) -> dict[int, int]:
    """{RANK: pid} of the torchrun ranks among `pid`'s descendants (their environment has RANK and
    LOCAL_RANK, which torchrun sets)."""
    ranks = {}
    for child in descendants(pid):
        try:
            raw = Path(f"/proc/{child}/environ").read_bytes()
        except (FileNotFoundError, ProcessLookupError):
            continue
        environ = dict(item.split("=", 1) for item in raw.decode(errors="replace").split("\0") if "=" in item)
        if "RANK" in environ and "LOCAL_RANK" in environ:
            ranks[int(environ["RANK"])] = child
    return ranks


def alive(pid: int) -> bool:
    """`pid` runs (or is stopped): neither gone nor a zombie."""
    stat = Path(f"/proc/{pid}/stat")
    try:
        return stat.read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


@dataclass
class RankKilled:
    """Where one torchrun rank of a run was killed, and how the run ended."""

    seed: int
    rank: int
    delay_s: float
    seconds_after_start: float
    seconds_to_exit: float
    """From the rank's SIGKILL to the run's own exit."""
    returncode: int
    committed: dict[str, bytes]
    stderr: str

    def describe(self) -> str:
        return (f"seed {self.seed}: rank {self.rank} killed {self.delay_s:.2f} s after the first commit, "
                f"{self.seconds_after_start:.1f} s into the run; the run exited with {self.returncode} "
                f"{self.seconds_to_exit:.1f} s later, with {len(self.committed)} committed")


def kill_rank_after_commits(args: list[str], home: Path, pattern: str, seed: int, max_delay_s: float,
                            timeout_s: float, rank: int, exit_bound_s: float) -> RankKilled:
    """Start `passband *args` on `home`, SIGKILL torchrun rank `rank` `U(0, max_delay_s)` seconds
    after the first manifest matching `pattern`, and wait at most `exit_bound_s` for the run to
    end by itself; check every rank is gone then."""
    delay_s = random.Random(seed).uniform(0, max_delay_s)
    ranks: dict[int, int] = {}
    with _running(args, home, "rank-killed") as (proc, stderr_path, started):
        try:
            _await_commits(proc, args, home, pattern, 1, started, timeout_s, stderr_path)
            time.sleep(delay_s)
            ranks = rank_pids(proc.pid)
            assert rank in ranks and proc.poll() is None, f"no rank {rank} to kill (ranks {ranks}): run over?"
            os.kill(ranks[rank], signal.SIGKILL)
            killed_at = time.monotonic()
            proc.wait(timeout=exit_bound_s)
            exited_after = time.monotonic() - killed_at
            deadline = time.monotonic() + 10  # SIGKILL of a rank whose parent died lands asynchronously
            while (survivors := [pid for pid in ranks.values() if alive(pid)]) and time.monotonic() < deadline:
                time.sleep(0.1)
        finally:  # ranks sit outside the run's group: a failed assertion must not leave them going
            for pid in ranks.values():
                if alive(pid):
                    os.kill(pid, signal.SIGKILL)
    assert not survivors, f"ranks {survivors} outlived the run (ranks {ranks})"
    return RankKilled(seed, rank, delay_s, killed_at - started, exited_after, proc.returncode,
                      committed(home, pattern), stderr_path.read_text())
