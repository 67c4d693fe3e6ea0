"""Sandbox and code verifier: hostile programs are contained, and the verdicts are right.

Every hostile program bounds itself (deadlines, at most N forks) so that a broken sandbox fails
the test instead of harming the machine.
"""

import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
import uuid
from pathlib import Path

import pytest

from hostile_programs import FORK_BOMB, host_listener, write_probe
from passband.curation.verifiers import CodeSettings, VerifyResult, verify_code
from passband.curation.verifiers.code import extract_code
from passband.curation.verifiers.sandbox import (
    SandboxError, SandboxLimits, require_sandbox, run_python, sandbox_mode)

REPO_ROOT = Path(__file__).resolve().parents[1]

FAST = SandboxLimits(wall_timeout_s=2.0, cpu_time_s=2)
# For checks whose subject is not the wall limit: on a loaded 2-core box a Python start inside the
# namespaces has taken over 2 s of wall time, which turned a plain failure into a timeout.
ROOMY = SandboxLimits(wall_timeout_s=8.0, cpu_time_s=8)


def run(source: str, limits: SandboxLimits = FAST, stdin: str = ""):
    return run_python(textwrap.dedent(source), stdin=stdin, limits=limits)


def test_plain_program_runs_with_stdin():
    outcome = run("print(int(input()) * 2)", stdin="21\n")
    assert (outcome.returncode, outcome.stdout, outcome.timed_out) == (0, "42\n", False)


def test_missing_interpreter_is_a_sandbox_error_not_a_failed_program():
    with pytest.raises(SandboxError, match="no-such-python"):
        run_python("print(1)", limits=SandboxLimits(python_executable="no-such-python"))


def test_zero_limits_are_refused():
    with pytest.raises(ValueError, match="work_dir_bytes"):
        SandboxLimits(work_dir_bytes=0)


def test_infinite_loop_is_killed_at_the_deadline():
    start = time.monotonic()
    outcome = run("""
        import time
        end = time.monotonic() + 60  # self-bound: a broken sandbox returns after 60 s
        while time.monotonic() < end:
            pass
    """, SandboxLimits(wall_timeout_s=1.0, cpu_time_s=30))
    assert outcome.timed_out and outcome.returncode is None
    assert time.monotonic() - start < 5


def test_cpu_limit_kills_a_busy_program_before_the_wall_clock():
    outcome = run("""
        import time
        end = time.monotonic() + 30
        while time.monotonic() < end:
            pass
    """, SandboxLimits(wall_timeout_s=20.0, cpu_time_s=1))
    assert not outcome.timed_out and outcome.returncode == 128 + 9  # SIGKILL at the hard limit
    assert outcome.wall_s < 5


def test_fork_bomb_is_capped_by_the_process_limit():
    # Forks at most 200 times; children sleep 1 s then exit, so without a cap all 200 succeed.
    outcome = run(FORK_BOMB, SandboxLimits(wall_timeout_s=10.0, max_processes=16))
    assert outcome.returncode == 0, outcome.stderr
    assert int(outcome.stdout) < 16  # the program itself is one of the 16


def test_process_cap_counts_only_this_run():
    # The caller already runs 12 more processes than the cap: a cap per real uid (RLIMIT_NPROC
    # set outside the namespace) would refuse every fork; the run's own count allows them.
    sleepers = [subprocess.Popen(["sleep", "30"]) for _ in range(20)]
    try:
        outcome = run("""
            import os
            pids = [os.fork() or os._exit(0) for _ in range(3)]
            for pid in pids:
                os.waitpid(pid, 0)
            print("forked", len(pids))
        """, SandboxLimits(wall_timeout_s=5.0, max_processes=8))
    finally:
        for sleeper in sleepers:
            sleeper.kill()
            sleeper.wait()
    assert (outcome.returncode, outcome.stdout) == (0, "forked 3\n"), outcome.stderr


def test_sandbox_mode_matches_the_user():
    mode, reason = sandbox_mode()
    assert mode == ("root" if os.geteuid() == 0 else "userns"), reason
    assert require_sandbox() == mode
    outcome = run("import os; print(os.getuid(), os.geteuid())")
    # Root mode drops to a fresh uid; userns mode keeps the namespace's uid 0 (no capabilities).
    expected = f"{outcome.stdout.split()[0]} " * 2 if mode == "root" else "0 0 "
    assert outcome.stdout.replace("\n", " ") == expected
    if mode == "root":
        assert int(outcome.stdout.split()[0]) >= 3_000_000_000
    status = run("print(open('/proc/self/status').read())").stdout
    assert "CapEff:\t0000000000000000" in status and "NoNewPrivs:\t1" in status


def test_memory_hog_hits_the_address_space_limit():
    outcome = run("""
        blocks = []
        for _ in range(100):  # at most 100 x 64 MiB = 6.4 GiB
            blocks.append(bytearray(64 << 20))
        print("allocated everything")
    """, SandboxLimits(wall_timeout_s=10.0, memory_bytes=256 << 20))
    assert outcome.returncode == 1 and "MemoryError" in outcome.stderr
    assert "allocated everything" not in outcome.stdout


def test_huge_output_is_capped():
    outcome = run("""
        import sys
        for _ in range(64):  # 64 MiB in total
            sys.stdout.write("x" * (1 << 20))
    """, SandboxLimits(wall_timeout_s=10.0, max_file_bytes=4 << 20, max_output_bytes=1 << 20))
    assert outcome.output_truncated
    assert outcome.stdout == "x" * (1 << 20)
    assert outcome.returncode != 0 and "File too large" in outcome.stderr


def test_writing_outside_the_working_dir_fails():
    marker = f"passband-escape-{uuid.uuid4().hex}"
    repo_file = Path.cwd() / marker
    outcome = run(write_probe([str(repo_file), f"/etc/{marker}", f"/root/{marker}", f"/{marker}"])
                  + textwrap.dedent(f"""
        import os
        open("/tmp/{marker}", "w").write("x")   # lands in the sandbox's own tmpfs
        open("local.txt", "w").write("ok")      # the working dir is writable
        print(os.getcwd())
    """))
    assert outcome.returncode == 0, outcome.stderr
    # EROFS: every inherited mount is read-only; EACCES where a path is not ours anyway;
    # ENOENT where the sandbox's tmpfs hides it (a checkout under /tmp, as CI's may be).
    lines = outcome.stdout.splitlines()
    assert set(lines[:4]) <= {"EROFS", "EACCES", "ENOENT"} and lines[4] == "/tmp", outcome.stdout
    assert not repo_file.exists() and not Path("/etc", marker).exists()
    assert not Path("/tmp", marker).exists()  # the host's /tmp is untouched


def _writable_dir_outside_tmp() -> Path:
    """A directory the test's uid may write, outside /tmp, /var/tmp, /dev/shm (which the sandbox
    hides): the one the root run prepared for the unprivileged re-run, else one in the repo."""
    prepared = os.environ.get("PASSBAND_TEST_WRITABLE_DIR")
    return Path(prepared) if prepared else REPO_ROOT


def test_files_the_caller_could_write_stay_read_only():
    # A world-writable directory and a file the caller owns: uid U (root mode) may write the
    # first and the namespace's uid 0 (userns mode: the caller outside) both, but for the
    # read-only remount of every inherited mount.
    directory = Path(tempfile.mkdtemp(prefix=".passband-sandbox-test-", dir=_writable_dir_outside_tmp()))
    try:
        directory.chmod(0o777)
        owned = directory / "owned.txt"
        owned.write_text("original")
        owned.chmod(0o666)
        outcome = run(write_probe([str(owned), str(directory / "new.txt")]))
        assert outcome.returncode == 0, outcome.stderr
        hidden = any(str(directory).startswith(d) for d in ("/tmp/", "/var/tmp/", "/dev/shm/"))
        assert outcome.stdout.split() == (["ENOENT"] * 2 if hidden else ["EROFS"] * 2)
        assert owned.read_text() == "original" and not (directory / "new.txt").exists()
    finally:
        shutil.rmtree(directory)


def test_network_connections_fail_fast():
    listener = host_listener()
    port = listener.getsockname()[1]
    outcome = run(f"""
        import socket, time
        for address in [("127.0.0.1", {port}), ("1.1.1.1", 80), ("8.8.8.8", 53)]:
            start = time.monotonic()
            try:
                socket.create_connection(address, timeout=3).close()
                print("connected", address)
            except OSError as error:
                print(type(error).__name__, round(time.monotonic() - start, 2))
    """, SandboxLimits(wall_timeout_s=15.0))
    lines = outcome.stdout.split("\n")[:3]
    assert [line.split()[0] for line in lines] == ["OSError"] * 3, outcome.stdout
    assert all(float(line.split()[1]) < 0.5 for line in lines)  # unreachable, not a timeout
    with pytest.raises(BlockingIOError):
        listener.accept()  # nothing reached the parent's listener
    listener.close()


def test_parent_environment_is_invisible(monkeypatch):
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "fake-secret-for-test")
    monkeypatch.setenv("MLFLOW_TRACKING_TOKEN", "fake-token-for-test")
    outcome = run(f"""
        import os
        print(sorted(os.environ))
        for path in ["/proc/1/environ", "/proc/{os.getpid()}/environ", "/proc/{os.getppid()}/cmdline"]:
            try:
                print(path, open(path, "rb").read())
            except OSError as error:
                print(path, type(error).__name__)
    """)
    assert outcome.returncode == 0, outcome.stderr
    assert "fake-secret" not in outcome.stdout and "fake-token" not in outcome.stdout
    visible = eval(outcome.stdout.splitlines()[0])
    assert set(visible) <= {"PATH", "LANG", "LC_ALL", "HOME", "TMPDIR", "PWD", "SHLVL", "LC_CTYPE"}


def _processes_with(marker: str) -> list[int]:
    """Host pids whose command line contains marker (read independently of the sandbox)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if marker.encode() in (entry / "cmdline").read_bytes():
                    pids.append(int(entry.name))
            except OSError:
                continue
    return pids


@pytest.mark.parametrize("parent_waits", [True, False])
def test_grandchildren_do_not_survive(parent_waits):
    # The grandchild leaves the process group (setsid) and sleeps 20 s; the parent either
    # loops past the deadline or exits at once. Either way the grandchild must be gone.
    marker = f"passband-grandchild-{uuid.uuid4().hex}"
    outcome = run(f"""
        import subprocess, sys, time
        subprocess.Popen([sys.executable, "-c", "import os, time; os.setsid(); time.sleep(20)",
                          "{marker}"])
        time.sleep(0.3)
        print("spawned", flush=True)
        end = time.monotonic() + (20 if {parent_waits} else 0)
        while time.monotonic() < end:
            time.sleep(0.05)
    """, SandboxLimits(wall_timeout_s=4.0, cpu_time_s=5))  # room for a slow start on a loaded box
    assert outcome.stdout == "spawned\n"
    assert outcome.timed_out == parent_waits
    # The kernel kills the namespace's processes when its init dies, asynchronously: allow them
    # a bounded moment to finish dying (a survivor sleeps 20 s, far past this deadline).
    deadline = time.monotonic() + 5
    while _processes_with(marker) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _processes_with(marker) == []


NOBODY = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"]


@pytest.mark.skipif(os.geteuid() != 0, reason="this run is already unprivileged (userns mode)")
def test_the_whole_file_passes_as_an_unprivileged_user():
    # Root runs the root mode above; the same file as `nobody` runs the userns mode, so one
    # `pytest` run checks both. Nothing may be skipped there except this test itself.
    probe = subprocess.run([*NOBODY, sys.executable, "-c", "import passband.curation.verifiers.sandbox"],
                           cwd="/", capture_output=True, text=True)
    assert probe.returncode == 0, (
        f"user nobody cannot import passband from {sys.executable} (the checkout and venv, and "
        f"every folder above them, must be readable and searchable by others): {probe.stderr}")
    writable = Path(tempfile.mkdtemp(prefix=".passband-nobody-", dir=REPO_ROOT))
    try:
        os.chown(writable, 65534, 65534)
        result = subprocess.run(
            [*NOBODY, sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs",
             "-k", "not as_an_unprivileged_user", __file__],
            cwd="/", capture_output=True, text=True, timeout=300,
            env={"PATH": os.environ["PATH"], "HOME": "/nonexistent",
                 "PASSBAND_TEST_WRITABLE_DIR": str(writable)},
        )
    finally:
        shutil.rmtree(writable)
    summary = result.stdout.strip().splitlines()[-1]
    print(f"\nas nobody: {summary}")
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert " passed" in summary and "skipped" not in summary and "failed" not in summary, summary


def test_extract_code_takes_the_last_fenced_block():
    text = "```python\nx = 1\n```\nthen\n```\ny = 2\n```\n"
    assert extract_code(text) == "y = 2\n"
    assert extract_code("```py\nz = 3\n```") == "z = 3\n"
    assert extract_code("no code here") is None
    assert extract_code("```python\n\n```") is None
    assert extract_code("print(1)", "whole") == "print(1)"


ADD_TESTS = {"tests": "def check(candidate):\n    assert candidate(2, 3) == 5\n", "entry_point": "add"}
SOLUTION_THEN_USAGE = ("```python\ndef add(a, b):\n    return a + b\n```\n"
                      "Example:\n```python\nprint(add(2, 3))\n```\n")


def test_entry_block_prefers_the_last_block_defining_the_entry_point():
    assert extract_code(SOLUTION_THEN_USAGE, entry_point="add") == "def add(a, b):\n    return a + b\n"
    # Of two defining blocks the later one (a revised solution) wins.
    revised = "```python\ndef add(a, b):\n    return 0\n```\n```python\ndef add(a, b):\n    return a + b\n```"
    assert extract_code(revised, entry_point="add") == "def add(a, b):\n    return a + b\n"
    # A longer name that merely starts with the entry point does not count as defining it.
    assert extract_code("```python\ndef add(a, b):\n    pass\n```\n```python\ndef add_all(xs):\n    pass\n```",
                        entry_point="add_all") == "def add_all(xs):\n    pass\n"


def test_entry_block_falls_back_to_the_last_block_when_none_defines_it():
    text = "```python\nx = 1\n```\n```python\nprint(add(2, 3))\n```"
    assert extract_code(text, entry_point="add") == "print(add(2, 3))\n"
    assert extract_code(SOLUTION_THEN_USAGE, entry_point=None) == "print(add(2, 3))\n"


def test_last_block_mode_still_takes_the_last_block():
    assert extract_code(SOLUTION_THEN_USAGE, "last_block", entry_point="add") == "print(add(2, 3))\n"


def test_verify_code_runs_the_solution_not_the_usage_block():
    [result] = verify_code([SOLUTION_THEN_USAGE], [ADD_TESTS], CodeSettings(limits=FAST))
    assert result.status == "pass"
    # The old behaviour ran the usage block alone: `add` is undefined there.
    [last] = verify_code([SOLUTION_THEN_USAGE], [ADD_TESTS], CodeSettings("last_block", FAST))
    assert last.status == "fail" and "NameError" in last.detail


def test_verify_code_tests_format():
    completions = [
        "```python\ndef add(a, b):\n    return a + b\n```",
        "```python\ndef add(a, b):\n    return a - b\n```",
        "I would add them.",
        "```python\ndef add(a, b):\n    while True:\n        pass\n```",
    ]
    results = verify_code(completions, [ADD_TESTS] * 4, CodeSettings(limits=ROOMY))
    assert [(r.score, r.status) for r in results] == [
        (1.0, "pass"), (0.0, "fail"), (0.0, "unparsable"), (0.0, "timeout")]
    assert "AssertionError" in results[1].detail


def test_entry_point_check_is_not_appended_twice():
    # The tests already call check(); appending another call would run it twice.
    tests = "calls = []\ndef check(f):\n    calls.append(f)\n    assert len(calls) == 1 and f(1, 1) == 2\ncheck(add)\n"
    code = "```python\ndef add(a, b):\n    return a + b\n```"
    [result] = verify_code([code], [{"tests": tests, "entry_point": "add"}], CodeSettings(limits=FAST))
    assert result.status == "pass"


def test_verify_code_cases_format_scores_the_fraction_passed():
    cases = [{"input": "1 2\n", "output": "3"},
             {"input": "10   20\n", "output": " 30 \n"},   # whitespace-normalized compare
             {"input": "-1 1\n", "output": "1"}]           # deliberately wrong expectation
    code = "```python\na, b = map(int, input().split())\nprint(a + b)\n```"
    [result] = verify_code([code], [{"cases": cases}], CodeSettings(limits=FAST))
    assert result.score == pytest.approx(2 / 3) and result.status == "fail"
    assert result.detail.startswith("2/3 cases passed; case 2: expected '1'")
    [perfect] = verify_code([code], [{"cases": cases[:2]}], CodeSettings(limits=FAST))
    assert perfect == VerifyResult(1.0, "pass", "2/2 cases passed")


def test_bad_code_reference_is_named():
    with pytest.raises(ValueError, match="reference 1: .*neither 'tests' nor 'cases'"):
        verify_code(["x", "y"], [ADD_TESTS, {"test": "typo"}])


def test_parallel_throughput():
    # 16 trivial programs through 2 workers; each run costs ~0.1 s of process setup.
    code = "```python\nprint(sum(map(int, input().split())))\n```"
    references = [{"cases": [{"input": f"{i} {i}", "output": str(2 * i)}]} for i in range(16)]
    start = time.monotonic()
    results = verify_code([code] * 16, references, CodeSettings(limits=ROOMY), max_workers=2)
    elapsed = time.monotonic() - start
    print(f"\nsandbox throughput: {16 / elapsed:.1f} programs/s with 2 workers")
    assert [r.status for r in results] == ["pass"] * 16
    assert elapsed < 10
