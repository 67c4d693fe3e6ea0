"""Run untrusted Python in a contained subprocess: time, CPU, memory, processes, files, output,
network and environment all bounded, and nothing it starts outlives it.

Two modes give the same guarantees (`sandbox_mode()` picks one once per process):
- "root": the verifier runs as root (its container). New net/PID/mount namespaces; the program
  drops to a fresh uid U per run (from a range no account uses).
- "userns": a normal user. `unshare --user --map-root-user` first makes an unprivileged user
  namespace that owns the net/PID/mount namespaces; the program keeps the namespace's uid 0
  (the caller's uid outside) with every capability dropped.
Neither runs Python code between fork and exec (util-linux only), so both are safe under a
thread pool:

    prlimit (CPU, address space, file size, no core, open files)
      unshare [--user --map-root-user] --net --pid --mount --fork --kill-child
        sh: remount every inherited mount read-only, mount a size-capped tmpfs on /tmp (bound
            also on /var/tmp, /dev/shm), a fresh /proc, copy main.py in, cd /tmp
          prlimit --nproc
            setpriv (root: --reuid=U; both: no capabilities, --no-new-privs)
              python3 -I main.py

- No network: the new network namespace has only a loopback that is down, so every connect
  (127.0.0.1 or public) fails at once with ENETUNREACH; no packet leaves.
- Process cap: RLIMIT_NPROC counts processes per (user namespace, uid) since Linux 5.14. Root
  mode: the kernel ignores the limit for root, so the program runs as fresh uid U, whose count
  is this run's alone. Userns mode: the fresh user namespace gives the run its own count (the
  namespace's init shell included), however many processes the user already runs outside.
- Nothing survives: the shell is PID 1 of the new PID namespace; when it dies (normal exit, or
  our killpg of the session on timeout) the kernel kills every process left in the namespace,
  including ones that called setsid() to leave our process group.
- Files: every mount the namespace inherits is remounted read-only, so the program cannot
  write anywhere outside its tmpfs, even to files its uid owns (in userns mode it is the
  caller outside) or to world-writable directories. The working dir is the new tmpfs
  (size-capped, freed with the namespace); /tmp, /var/tmp, /dev/shm are that tmpfs. Without
  capabilities the program cannot unmount or remount anything.
- Environment: an allow-list only (PATH, LANG, LC_ALL, HOME, TMPDIR); `python -I` also ignores
  PYTHON* variables and the user site. /proc is the namespace's own, so other processes'
  command lines and environments are invisible.
- Output: stdout/stderr go to files capped by RLIMIT_FSIZE; at most max_output_bytes are read.
"""

import functools
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
_TOOLS = ("prlimit", "unshare", "setpriv", "mount", "sh")
_READY = b"passband-sandbox-ready\n"
_NAMESPACES = ["--net", "--pid", "--mount", "--propagation=private", "--fork", "--kill-child"]

# Runs as (namespace) root inside the new namespaces. $1: tmpfs size, $2: RLIMIT_NPROC, $3: the
# uid to drop to ("" in userns mode: keep the namespace's uid 0, capabilities dropped), then the
# command. The first line of stderr, written before the program starts and removed before
# stderr is returned, tells a setup failure apart from the program's own exit codes.
# Remounting: mountinfo field 5 is the mount point (space, tab, newline, backslash as \ooo,
# which printf %b decodes), field 6 its per-mount flags, repeated because a user namespace may
# not clear the nosuid/nodev/noexec/atime flags it inherited. A mount that cannot be made
# read-only fails the setup (set -e) instead of staying writable.
_SETUP = r"""
set -e
mounts=$(cat /proc/self/mountinfo)
printf '%s\n' "$mounts" | while read -r _id _parent _device _root target flags _rest; do
    mount -o "remount,bind,$flags,ro" "$(printf '%b' "$target")"
done
owner=${3:-0}
mount -t tmpfs -o "size=$1,mode=0700,uid=$owner,gid=$owner" sandbox /tmp
[ -d /var/tmp ] && mount --bind /tmp /var/tmp
[ -d /dev/shm ] && mount --bind /tmp /dev/shm
mount -t proc proc /proc
cp main.py /tmp/main.py
cd /tmp
unset OLDPWD
echo passband-sandbox-ready >&2
nproc=$2
uid=$3
shift 3
set +e
if [ -n "$uid" ]; then
    set -- --reuid="$uid" --regid="$uid" --clear-groups -- "$@"
else
    set -- -- "$@"
fi
prlimit --nproc="$nproc:$nproc" -- \
    setpriv --no-new-privs --inh-caps=-all --bounding-set=-all "$@"
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
    """RLIMIT_NPROC for this run alone: processes plus threads at any one time."""
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


@functools.cache
def sandbox_mode() -> tuple[str, str]:
    """("root" | "userns" | "none", why), decided once per process by trying the namespaces.

    Root mode needs euid 0 with CAP_SYS_ADMIN (a privileged container). Userns mode needs a
    non-root user and unprivileged user namespaces (kernel >= 5.14, where RLIMIT_NPROC is
    counted per user namespace). Root without the capability gets no mode: a user namespace
    would map the program to real root, which RLIMIT_NPROC does not bind.
    """
    missing = [tool for tool in _TOOLS if shutil.which(tool, path=_ENV["PATH"]) is None]
    if missing:
        return "none", f"missing {', '.join(missing)} on {_ENV['PATH']} (install util-linux)"
    if os.geteuid() == 0:
        error = _probe([])
        if error:
            return "none", (f"running as root without the right to make namespaces ({error}); "
                            "grant CAP_SYS_ADMIN, or run as a non-root user for the userns mode")
        return "root", "euid 0: net/PID/mount namespaces, a fresh uid per run"
    release = tuple(int(part) for part in os.uname().release.split(".")[:2] if part.isdigit())
    if release < (5, 14):
        return "none", (f"kernel {os.uname().release} counts RLIMIT_NPROC per real uid, not per "
                        "user namespace (needs >= 5.14); run as root instead")
    error = _probe(["--user", "--map-root-user"])
    if error:
        return "none", (f"unprivileged user namespaces unavailable ({error}); enable them "
                        "(sysctl user.max_user_namespaces>0, kernel.unprivileged_userns_clone=1, "
                        "kernel.apparmor_restrict_unprivileged_userns=0) or run as root")
    return "userns", f"uid {os.geteuid()}: an unprivileged user namespace owning net/PID/mount namespaces"


def require_sandbox() -> str:
    """The sandbox mode; ValueError saying what to do when no mode works (for config validation)."""
    mode, reason = sandbox_mode()
    if mode == "none":
        raise ValueError(f"code verification needs the sandbox, and none works here: {reason}")
    return mode


def _probe(user_flags: list[str]) -> str | None:
    """Why the namespaces cannot be made with these unshare flags, or None when they can."""
    probe = subprocess.run(
        ["unshare", *user_flags, *_NAMESPACES, "--",
         "sh", "-c", "mount -t tmpfs probe /tmp && mount -t proc proc /proc"],
        cwd="/", env=_ENV, stdin=subprocess.DEVNULL, capture_output=True, timeout=30,
    )
    if probe.returncode == 0:
        return None
    return probe.stderr.decode("utf-8", "replace").strip()[-300:] or f"exit {probe.returncode}"


def run_python(source: str, stdin: str = "", limits: SandboxLimits = SandboxLimits()) -> SandboxOutcome:
    """Run `source` as a script with `stdin` under `limits`; see the module docstring."""
    mode, reason = sandbox_mode()
    if mode == "none":
        raise SandboxError(f"no sandbox mode works here: {reason}")
    if shutil.which(limits.python_executable, path=_ENV["PATH"]) is None:
        raise SandboxError(f"{limits.python_executable!r} not found on the sandbox PATH {_ENV['PATH']}")
    uid = None
    if mode == "root":
        with _uid_lock:
            uid = _FIRST_UID + next(_uid_counter) % _NUM_UIDS
    run_dir = Path(tempfile.mkdtemp(prefix="passband-sandbox-"))  # mode 0700, the caller's
    try:
        (run_dir / "main.py").write_text(source, encoding="utf-8")
        (run_dir / "stdin").write_text(stdin, encoding="utf-8")
        start = time.monotonic()
        with open(run_dir / "stdin", "rb") as stdin_file, \
                open(run_dir / "stdout", "wb") as stdout_file, \
                open(run_dir / "stderr", "wb") as stderr_file:
            process = subprocess.Popen(
                _command(uid, limits), cwd=run_dir, env=_ENV, stdin=stdin_file,
                stdout=stdout_file, stderr=stderr_file, start_new_session=True, close_fds=True,
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
        with open(run_dir / "stderr", "rb") as stderr_file:
            ready = stderr_file.read(len(_READY)) == _READY
        if not timed_out and returncode != 0 and not ready:
            stderr = (run_dir / "stderr").read_bytes()[:2000].decode("utf-8", "replace")
            raise SandboxError(f"sandbox setup failed ({mode} mode, exit {returncode}): {stderr}")
        stdout, stdout_cut = _read_capped(run_dir / "stdout", limits.max_output_bytes)
        stderr, stderr_cut = _read_capped(run_dir / "stderr", limits.max_output_bytes,
                                          skip=len(_READY) if ready else 0)
    finally:
        shutil.rmtree(run_dir)
    if returncode is not None and returncode < 0:
        returncode = 128 - returncode  # unshare itself killed by signal -returncode
    return SandboxOutcome(returncode, stdout, stderr, timed_out, stdout_cut or stderr_cut, wall_s)


def _command(uid: int | None, limits: SandboxLimits) -> list[str]:
    """Root mode when uid is given, else userns mode."""
    cpu, memory, fsize = limits.cpu_time_s, limits.memory_bytes, limits.max_file_bytes
    # RLIMIT_NPROC is set inside, after unshare: set outside it would also become the new user
    # namespace's cap on all of the caller's processes. In userns mode the namespace's init
    # shell shares the program's (namespace, uid) count, hence + 1.
    nproc = limits.max_processes if uid is not None else limits.max_processes + 1
    user_flags = [] if uid is not None else ["--user", "--map-root-user"]
    return [
        "prlimit", f"--cpu={cpu}:{cpu}", f"--as={memory}:{memory}", f"--fsize={fsize}:{fsize}",
        "--core=0:0", "--nofile=256:256", "--",
        "unshare", *user_flags, *_NAMESPACES, "--",
        "sh", "-c", _SETUP, "sandbox-setup", str(limits.work_dir_bytes), str(nproc),
        "" if uid is None else str(uid),
        limits.python_executable, "-I", "main.py",
    ]


def _read_capped(path: Path, max_bytes: int, skip: int = 0) -> tuple[str, bool]:
    """Up to max_bytes of the file after its first `skip` bytes, decoded, and whether there was more."""
    with open(path, "rb") as file:
        file.seek(skip)
        data = file.read(max_bytes + 1)
    return data[:max_bytes].decode("utf-8", "replace"), len(data) > max_bytes
