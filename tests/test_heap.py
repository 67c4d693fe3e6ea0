"""training/heap.py `return_freed_host_memory`: a trainer's freed tensors leave its RSS (glibc's mmap threshold fixed).

Each case runs in a process of its own (the threshold is process-wide and glibc's dynamic one moves with what the
process freed before). The pattern is a backward's: tensors of a few MiB freed while small ones made between them
stay live, after one larger free raised glibc's dynamic threshold past them (as a training loop's first step does).
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's malloc is what is fixed")

PATTERN = r"""
import json, sys, torch
from passband.training.heap import return_freed_host_memory

def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096

is_set = return_freed_host_memory() if sys.argv[1] == "trainer" else None
first = torch.ones(2**21)  # 8 MiB, mmapped under glibc's starting threshold (128 KiB); its free raises the threshold
del first
before = rss()
big, small = [], []
for _ in range(64):
    big.append(torch.ones(2**20))  # 4 MiB each, 256 MiB in all
    small.append(torch.ones(1024))  # 4 KiB, live between them
held = rss() - before
big.clear()
print(json.dumps({"set": is_set, "held": held, "kept": rss() - before}))
"""
MIB = 2**20


def _run(mode: str, **env: str) -> dict:
    out = subprocess.run([sys.executable, "-c", PATTERN, mode], env={**os.environ, "OMP_NUM_THREADS": "1", **env},
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def test_glibc_keeps_freed_tensors_resident_and_the_trainers_threshold_returns_them() -> None:
    default = _run("glibc")
    trainer = _run("trainer")
    assert trainer["set"] is True
    assert default["held"] >= 250 * MIB and trainer["held"] >= 250 * MIB  # both touched the 256 MiB
    # glibc's default keeps the 64 freed 4 MiB chunks: each lies between two live 4 KiB ones, so no trim reaches it
    assert default["kept"] >= 250 * MIB
    # the trainers' 1 MiB threshold mmapped each 4 MiB tensor, and its free unmapped it: only the small ones remain
    assert trainer["kept"] <= 8 * MIB


def test_a_users_own_threshold_is_left_as_glibc_read_it() -> None:
    mine = _run("trainer", MALLOC_MMAP_THRESHOLD_=str(64 * 1024))
    assert mine["set"] is False
    assert mine["kept"] <= 8 * MIB  # theirs (64 KiB) returns the freed tensors too
