"""training/heap.py: the trainers' `heap` setting, a trainer's freed tensors kept in glibc's heap or returned.

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

from passband.training.heap import heap_returns

pytestmark = pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's malloc is what is fixed")

PATTERN = r"""
import ctypes, json, sys, torch
from passband.training.heap import use_heap

class MallInfo2(ctypes.Structure):  # glibc's struct mallinfo2: ten size_t counters
    _fields_ = [(name, ctypes.c_size_t) for name in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                       "fsmblks", "uordblks", "fordblks", "keepcost")]

mallinfo2 = ctypes.CDLL(None).mallinfo2
mallinfo2.restype = MallInfo2

def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096

returns = [use_heap(setting, int(tokens)) for setting, tokens in (arg.split(":") for arg in sys.argv[1:])]
first = torch.ones(2**21)  # 8 MiB, mmapped under glibc's starting threshold (128 KiB); its free raises the threshold
del first
before = rss()
big, small = [], []
for _ in range(64):
    big.append(torch.ones(2**20))  # 4 MiB each, 256 MiB in all
    small.append(torch.ones(1024))  # 4 KiB, live between them
held = rss() - before
mmapped = mallinfo2().hblkhd  # bytes malloc holds in mmapped blocks, the 4 MiB tensors among them if mmapped
big.clear()
print(json.dumps({"returns": returns, "held": held, "mmapped": mmapped, "kept": rss() - before}))
"""
MIB = 2**20


def _run(*settings: str, **env: str) -> dict:
    """The pattern in a fresh process after `use_heap` with each "setting:tokens" of `settings`, in order."""
    out = subprocess.run([sys.executable, "-c", PATTERN, *settings], env={**os.environ, "OMP_NUM_THREADS": "1", **env},
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def test_heap_returns_from_4096_tokens_a_rank_on_auto() -> None:
    assert [heap_returns("auto", tokens) for tokens in (384, 4095, 4096, 65536)] == [False, False, True, True]
    assert heap_returns("return", 1) and not heap_returns("keep", 65536)


def test_kept_blocks_stay_resident_and_returned_ones_leave() -> None:
    default = _run()
    kept = _run("keep:65536")  # a process that never returned: glibc's default, untouched
    returned = _run("return:1")
    auto_short, auto_long = _run("auto:2048"), _run("auto:8192")
    assert (kept["returns"], returned["returns"], auto_short["returns"], auto_long["returns"]) == \
        ([False], [True], [False], [True])
    for run in (default, kept, returned, auto_short, auto_long):
        assert run["held"] >= 250 * MIB  # each touched the 256 MiB
    # glibc keeps the 64 freed 4 MiB chunks: each lies between two live 4 KiB ones, so no trim reaches it
    for run in (default, kept, auto_short):
        assert run["kept"] >= 250 * MIB
    # returned: each 4 MiB tensor was mmapped (threshold 1 MiB) and its free unmapped it; only the small ones remain
    for run in (returned, auto_long):
        assert run["kept"] <= 8 * MIB


def test_a_stage_that_keeps_after_one_that_returned_keeps_again() -> None:
    again = _run("return:1", "keep:1")  # an SFT run's short stage after a long one
    returned = _run("return:1")
    assert again["returns"] == [True, False]
    # glibc's own count of mmapped bytes while the 64 tensors live: "return" mmapped them, "keep" after it did not
    assert returned["mmapped"] >= 256 * MIB
    assert again["mmapped"] <= 16 * MIB


def test_a_users_own_threshold_is_left_as_glibc_read_it() -> None:
    mine = _run("return:1", MALLOC_MMAP_THRESHOLD_=str(64 * 1024))
    assert mine["returns"] == [False]
    assert mine["kept"] <= 8 * MIB  # theirs (64 KiB) returns the freed tensors too
