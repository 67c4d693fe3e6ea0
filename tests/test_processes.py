"""tasks/host/processes.py: the one home of spawn, pid files, alive, terminate a group, wait for HTTP."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from passband.tasks.host.processes import ProcessDir, alive


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_spawn_writes_pid_and_log_and_stop_ends_the_whole_group(tmp_path: Path) -> None:
    processes = ProcessDir(tmp_path)
    # the parent forks a grandchild; both belong to the group the spawn started
    script = ("import subprocess, sys, time; print('started', flush=True); "
              "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
              "print(child.pid, flush=True); time.sleep(60)")
    processes.spawn("sleeper", [sys.executable, "-c", script], {})
    pid = processes.pid("sleeper")
    assert pid is not None and processes.pid_file("sleeper").read_text() == str(pid)
    processes.spawn("sleeper", [sys.executable, "-c", "raise SystemExit(1)"], {})  # running: not started twice
    assert processes.pid("sleeper") == pid and processes.names() == ["sleeper"]
    deadline = time.monotonic() + 30
    while len(processes.log_file("sleeper").read_text().split()) < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    started, grandchild = processes.log_file("sleeper").read_text().split()
    assert started == "started" and alive(int(grandchild))

    assert processes.stop("sleeper") is True
    assert processes.pid("sleeper") is None and not processes.pid_file("sleeper").exists()
    deadline = time.monotonic() + 10
    while alive(int(grandchild)) and time.monotonic() < deadline:  # reparented to init, which reaps it
        time.sleep(0.1)
    assert not alive(int(grandchild))
    assert processes.stop("sleeper") is False


def test_a_zombie_is_not_alive() -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    deadline = time.monotonic() + 30
    while Path(f"/proc/{child.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert not alive(child.pid)  # exited, not yet reaped by us
    child.wait()
    assert not alive(child.pid)
    assert alive(1)  # init


def test_wait_http_returns_once_the_url_answers(tmp_path: Path) -> None:
    processes = ProcessDir(tmp_path)
    port = _free_port()
    processes.spawn("web", [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1",
                            "--directory", str(tmp_path)], {})
    try:
        processes.wait_http("web", f"http://127.0.0.1:{port}/", timeout_s=60)
    finally:
        assert processes.stop("web")


def test_wait_http_fails_at_once_with_the_log_when_the_process_exits(tmp_path: Path) -> None:
    processes = ProcessDir(tmp_path)
    processes.spawn("broken", [sys.executable, "-c", "raise SystemExit('port 1 is taken')"], {})
    start = time.monotonic()
    with pytest.raises(RuntimeError, match=r"(?s)broken exited while starting.*port 1 is taken"):
        processes.wait_http("broken", f"http://127.0.0.1:{_free_port()}/", timeout_s=120)
    assert time.monotonic() - start < 60
