"""Hostile programs that bound themselves, shared by the sandbox's tests and the Python tool's."""

import socket
import textwrap

FORK_BOMB = """
import os, time
num_forked = 0
for _ in range(200):
    try:
        pid = os.fork()
    except OSError:
        break
    if pid == 0:
        time.sleep(1)
        os._exit(0)
    num_forked += 1
print(num_forked)
"""
"""Forks at most 200 times; children sleep 1 s then exit, so without a process cap all 200 succeed.
Prints how many forks succeeded."""


def write_probe(paths: list[str]) -> str:
    """A program that tries to write each path and prints the errno name (or "wrote")."""
    return textwrap.dedent(f"""
        import errno
        for path in {paths!r}:
            try:
                open(path, "w").write("x")
                print("wrote", path)
            except OSError as error:
                print(errno.errorcode[error.errno])
    """)


def host_listener() -> socket.socket:
    """A non-blocking TCP listener on the host's loopback (its port: getsockname()[1]): a sandboxed
    connect must never reach it (accept() then raises BlockingIOError)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    listener.setblocking(False)
    return listener
