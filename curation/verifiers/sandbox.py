"""Run untrusted Python in a contained subprocess: time, CPU, memory, processes, files, output,
network and environment all bounded, and nothing it starts outlives it.

The mechanism (root only; Linux namespaces + rlimits, all from util-linux, no Python code runs
between fork and exec, so it is safe under a thread pool):

    prlimit (CPU, address space, processes, file size, no core)
      unshare --net --pid --mount --fork --kill-child     # new namespaces, owned by root
        sh: mount a size-capped tmpfs on /tmp (bound also on /var/tmp, /dev/shm), a fresh /proc,
            copy main.py in, cd /tmp
          setpriv --reuid=U --regid=U --clear-groups --no-new-privs   # drop to an unused uid
            python3 -I main.py

- No network: the new network namespace has only a loopback that is down, so every connect
  (127.0.0.1 or public) fails at once with ENETUNREACH; no packet leaves.
- Process cap: the kernel ignores RLIMIT_NPROC for root, so the program runs as a fresh uid U
  (one per run, from a range no account uses), where the cap holds and counts only this run.
- Nothing survives: the shell is PID 1 of the new PID namespace; when it dies (normal exit, or
  our killpg of the session on timeout) the kernel kills every process left in the namespace,
  including ones that called setsid() to leave our process group.
- Files: the working dir is the new tmpfs (size-capped, freed with the namespace). As uid U the
  program owns nothing else, so writes elsewhere fail; /tmp, /var/tmp, /dev/shm are that tmpfs.
- Environment: an allow-list only (PATH, LANG, LC_ALL, HOME, TMPDIR); `python -I` also ignores
  PYTHON* variables and the user site. /proc is the namespace's own, so other processes'
  command lines and environments are invisible.
- Output: stdout/stderr go to files capped by RLIMIT_FSIZE; at most max_output_bytes are read.
"""

import itertools
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

# uids no account uses (Debian allocates system users < 1000, normal users from 1000, and
# subordinate ranges from 100000 in steps of 65536: we take the top of 32-bit space instead).
_FIRST_UID = 3_000_000_000
_NUM_UIDS = 1_000_000
_uid_counter = itertools.count()
_uid_lock = threading.Lock()

_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8",
        "HOME": "/tmp", "TMPDIR": "/tmp"}

# Runs as root inside the new namespaces; $1 is the tmpfs size, $2 the uid, the rest the
# command. It writes setup_ok into the (root-only) run dir so that a setup failure is told
# apart from the program's own exit codes.
_SETUP = r"""
set -e
mount -t tmpfs -o "size=$1,mode=0700,uid=$2,gid=$2" sandbox /tmp
[ -d /var/tmp ] && mount --bind /tmp /var/tmp
[ -d /dev/shm ] && mount --bind /tmp /dev/shm
mount -t proc proc /proc
cp main.py /tmp/main.py
: > setup_ok
cd /tmp
unset OLDPWD
uid=$2
shift 2
set +e
setpriv --reuid="$uid" --regid="$uid" --clear-groups --no-new-privs --inh-caps=-all \
    --bounding-set=-all -- "$@"
"""


@dataclass(frozen=True)
class SandboxLimits:
    """Limits for one run of untrusted code."""

    wall_timeout_s: float = 10.0
    """Wall-clock limit; the whole process tree is killed when it passes."""
    cpu_time_s: int = 10
    """RLIMIT_CPU in CPU seconds (the kernel SIGKILLs at the limit)."""
    memory_bytes: int = 1 << 30
    """RLIMIT_AS: address space per process, bytes."""
    max_processes: int = 32
    """RLIMIT_NPROC for the run's own uid: processes plus threads at any one time."""
    max_file_bytes: int = 16 << 20
    """RLIMIT_FSIZE: largest file the program may write, stdout/stderr included, bytes."""
    work_dir_bytes: int = 64 << 20
    """Size of the tmpfs working directory (all files together), bytes."""
    max_output_bytes: int = 1 << 20
    """At most this many bytes of stdout and of stderr are read back."""
    python_executable: str = "python3"
    """Interpreter, found on the sandbox PATH; must be readable by an unprivileged uid."""

    def __post_init__(self) -> None:
        # 0 would mean "unlimited" to tmpfs and to some rlimits: refuse it rather than open up.
        for name in ("wall_timeout_s", "cpu_time_s", "memory_bytes", "max_processes",
                     "max_file_bytes", "work_dir_bytes", "max_output_bytes"):
            if not getattr(self, name) > 0:
                raise ValueError(f"SandboxLimits.{name} must be > 0, got {getattr(self, name)!r}")


@dataclass(frozen=True)
class SandboxOutcome:
    """What one run did."""

    returncode: int | None
    """Exit status (128 + n when killed by signal n); None when it timed out."""
    stdout: str
    stderr: str
    timed_out: bool
    output_truncated: bool
    """True when stdout or stderr exceeded max_output_bytes (what was read is cut there)."""
    wall_s: float


class SandboxError(RuntimeError):
    """The sandbox itself could not be set up (not the program's fault)."""


def run_python(source: str, stdin: str = "", limits: SandboxLimits = SandboxLimits()) -> SandboxOutcome:
    """Run `source` as a script with `stdin` under `limits`; see the module docstring."""
    if os.geteuid() != 0:
        raise SandboxError(
            "the code sandbox needs root (network/PID/mount namespaces and a uid switch); "
            "run the verifier as root, e.g. in its container"
        )
    if shutil.which(limits.python_executable, path=_ENV["PATH"]) is None:
        raise SandboxError(f"{limits.python_executable!r} not found on the sandbox PATH {_ENV['PATH']}")
    with _uid_lock:
        uid = _FIRST_UID + next(_uid_counter) % _NUM_UIDS
    run_dir = Path(tempfile.mkdtemp(prefix="passband-sandbox-"))  # mode 0700, root's
    try:
        (run_dir / "main.py").write_text(source, encoding="utf-8")
        (run_dir / "stdin").write_text(stdin, encoding="utf-8")
        command = _command(uid, limits)
        start = time.monotonic()
        with open(run_dir / "stdin", "rb") as stdin_file, \
                open(run_dir / "stdout", "wb") as stdout_file, \
                open(run_dir / "stderr", "wb") as stderr_file:
            process = subprocess.Popen(
                command, cwd=run_dir, env=_ENV, stdin=stdin_file, stdout=stdout_file,
                stderr=stderr_file, start_new_session=True, close_fds=True,
            )
            try:
                returncode = process.wait(timeout=limits.wall_timeout_s)
                timed_out = False
            except subprocess.TimeoutExpired:
                # The session is unshare + the namespace's PID 1; killing PID 1 makes the kernel
                # kill everything else in the namespace.
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
                returncode, timed_out = None, True
        wall_s = time.monotonic() - start
        if not timed_out and returncode != 0 and not (run_dir / "setup_ok").exists():
            stderr = (run_dir / "stderr").read_bytes()[:2000].decode("utf-8", "replace")
            raise SandboxError(f"sandbox setup failed (exit {returncode}): {stderr}")
        stdout, stdout_cut = _read_capped(run_dir / "stdout", limits.max_output_bytes)
        stderr, stderr_cut = _read_capped(run_dir / "stderr", limits.max_output_bytes)
    finally:
        shutil.rmtree(run_dir)
    if returncode is not None and returncode < 0:
        returncode = 128 - returncode  # unshare itself killed by signal -returncode
    return SandboxOutcome(returncode, stdout, stderr, timed_out, stdout_cut or stderr_cut, wall_s)


def _command(uid: int, limits: SandboxLimits) -> list[str]:
    cpu, memory = limits.cpu_time_s, limits.memory_bytes
    nproc, fsize = limits.max_processes, limits.max_file_bytes
    return [
        "prlimit", f"--cpu={cpu}:{cpu}", f"--as={memory}:{memory}", f"--nproc={nproc}:{nproc}",
        f"--fsize={fsize}:{fsize}", "--core=0:0", "--nofile=256:256", "--",
        "unshare", "--net", "--pid", "--mount", "--propagation=private", "--fork",
        "--kill-child", "--",
        "sh", "-c", _SETUP, "sandbox-setup", str(limits.work_dir_bytes), str(uid),
        limits.python_executable, "-I", "main.py",
    ]


def _read_capped(path: Path, max_bytes: int) -> tuple[str, bool]:
    """Up to max_bytes of the file, decoded, and whether there was more."""
    with open(path, "rb") as file:
        data = file.read(max_bytes + 1)
    return data[:max_bytes].decode("utf-8", "replace"), len(data) > max_bytes
