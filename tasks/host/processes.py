"""Background processes we own, one home for them: the local stack (`passband up`), the
PostgreSQL stack, the task workers, and the scratch space a dead process leaves.

A folder `root` holds `run/<name>.pid` and `logs/<name>.log` of each process started there. Every
process gets its own session, so its pid is the id of a process group that holds whatever it forks
(the MLflow server's uvicorn workers, vLLM's engine core), and stopping it stops them all. A pid
file outlives a crash: whether its process runs is asked of the kernel, and a zombie (killed, not
yet reaped by the process that started it) counts as gone.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
import urllib.request
from pathlib import Path


def alive(pid: int) -> bool:
    """Whether process `pid` runs (a zombie does not; one of another user does)."""
    try:
        os.kill(pid, 0)  # signal 0: only asks whether the process exists
    except ProcessLookupError:
        return False
    except PermissionError:  # it exists, owned by another user
        return True
    stat = Path(f"/proc/{pid}/stat")
    # the state follows the parenthesized command name, which may itself hold ") "
    return not (stat.is_file() and stat.read_text().rsplit(")", 1)[1].split()[0] == "Z")


def terminate_group(pid: int, grace_s: float = 15.0) -> None:
    """SIGTERM the process group `pid`, then SIGKILL it if it is still there after `grace_s` (the
    MLflow server's uvicorn workers sometimes outlive the first SIGTERM)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        # a leader this process started stays a zombie, and keeps its group listed, until reaped
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)
        try:
            os.killpg(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.3)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)


class ProcessDir:
    """The processes started under `root`: `run/<name>.pid`, `logs/<name>.log`."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def pid_file(self, name: str) -> Path:
        return self.root / "run" / f"{name}.pid"

    def log_file(self, name: str) -> Path:
        return self.root / "logs" / f"{name}.log"

    def names(self) -> list[str]:
        """Every name with a pid file, running or not, sorted."""
        return sorted(path.stem for path in (self.root / "run").glob("*.pid"))

    def pid(self, name: str) -> int | None:
        """The process (group) id of `name` while it runs, else None."""
        path = self.pid_file(name)
        if not path.is_file():
            return None
        pid = int(path.read_text())
        return pid if alive(pid) else None

    def spawn(self, name: str, argv: list[str], env: dict[str, str]) -> None:
        """Start `argv` as process group `name` unless it runs, its output appended to its log and
        `env` over this process's environment."""
        if self.pid(name) is not None:
            return
        for folder in ("run", "logs"):
            (self.root / folder).mkdir(parents=True, exist_ok=True)
        with open(self.log_file(name), "ab") as log:
            proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, **env},
                                    start_new_session=True)
        self.pid_file(name).write_text(str(proc.pid))

    def stop(self, name: str) -> bool:
        """Terminate the group `name` if it runs and forget its pid file; whether it ran."""
        pid = self.pid(name)
        if pid is not None:
            terminate_group(pid)
        self.pid_file(name).unlink(missing_ok=True)
        return pid is not None

    def wait_http(self, name: str, url: str, timeout_s: float) -> None:
        """Wait until `url` answers 200; fail at once, with the end of its log, if `name` exits first."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError):  # refused, reset, timed out, or an HTTP error status
                with urllib.request.urlopen(url, timeout=2):
                    return
            if self.pid(name) is None:
                log = self.log_file(name)
                tail = log.read_text()[-3000:] if log.is_file() else "(no log)"
                raise RuntimeError(f"{name} exited while starting; the end of {log}:\n{tail}")
            time.sleep(0.5)
        raise TimeoutError(f"{name} did not answer {url} within {timeout_s:.0f}s (see {self.log_file(name)})")
