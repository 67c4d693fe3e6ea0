"""What the GPU check's scripts share: device timing helpers and the phase recorder.

`gpu_check_trainers.py` runs `gpu_check_trl.py`'s row and both time with these, so they live here and
each script imports this one (the two scripts used to import each other: a cycle). Like them, this
imports nothing of our package at module level and runs on a bare CUDA image.

`Phases`: a GPU is lent for minutes at a time, so a check must not hold its figures until the end. Each
phase's figures are printed (`name: value`) and appended as one JSON line to `DIR/gpu_check.jsonl`
(DIR: `--out`, default `$OUT`, the folder a lent machine sends back) as soon as the phase finishes; a
phase that raises is recorded as such (its error in one line, the traceback on stderr), the check goes
on with the next, and the script exits non-zero at the end.
"""

from __future__ import annotations

import contextlib
import json
import sys
import time
import traceback
from collections.abc import Iterator
from pathlib import Path

FIGURES_FILE = "gpu_check.jsonl"


def synchronize(device) -> None:
    """Wait for the device's queued kernels (timings on CUDA are otherwise launch times)."""
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def reset_peak(device) -> None:
    """Start a new peak of CUDA's allocated memory (the CPU's peak RSS cannot be reset)."""
    import torch

    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def print_figures(figures: dict[str, object]) -> None:
    for name, value in figures.items():
        print(f"{name}: {value:.4g}" if isinstance(value, float) else f"{name}: {value}", flush=True)


class Phases:
    """The check's figures, phase by phase: every figure so far in `figures`, each phase's written as it ends."""

    def __init__(self, out_dir: str | None):
        self.path = Path(out_dir) / FIGURES_FILE if out_dir else None
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        self.figures: dict[str, object] = {}
        self.failed: list[str] = []

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[dict[str, object]]:
        """`with phases.phase("sft") as figures: figures.update(...)`: recorded when the block ends. An
        exception ends the phase, not the check: it is recorded (and its traceback printed) and swallowed,
        so the phases after it still run and write theirs."""
        figures: dict[str, object] = {}
        start = time.perf_counter()
        record: dict[str, object] = {"phase": name}
        try:
            yield figures
        except Exception as error:  # the point of a phase: one failure must not lose the others' figures
            traceback.print_exc()
            self.failed.append(name)
            record |= {"ok": False, "error": f"{type(error).__name__}: {error}".splitlines()[0]}
            print(f"--- phase {name}: FAILED ({record['error']})", flush=True)
        else:
            record["ok"] = True
            self.figures.update(figures)
            print_figures(figures)
        record |= {"seconds": round(time.perf_counter() - start, 3), "figures": figures}
        if self.path is not None:
            with self.path.open("a") as out:
                out.write(json.dumps(record) + "\n")

    def finish(self) -> int:
        """The last line (every figure as one JSON object) and the exit status: 1 if any phase failed."""
        print(json.dumps(self.figures), flush=True)
        if self.failed:
            print(f"phases that failed: {', '.join(self.failed)}", file=sys.stderr, flush=True)
        return 1 if self.failed else 0
