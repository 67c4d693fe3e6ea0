"""scripts/gpu_check_trainers.py (through gpu_check.sh --trainers) runs on the CPU with a tiny shape:
every line the GPU machine will run, but the CUDA-only ones, runs here first."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_trainer_check_runs_on_the_cpu_and_imports_no_flow_or_task():
    result = subprocess.run(
        ["bash", "scripts/gpu_check.sh", "--trainers", "--device", "cpu", "--shape", "tiny", "--seq-len", "32",
         "--rows", "2", "--steps", "1", "--prompt-len", "6", "--response-len", "8", "--prompts", "1"],
        cwd=ROOT, capture_output=True, text=True, timeout=600, env={**os.environ, "PYTHON": sys.executable})
    assert result.returncode == 0, result.stderr[-3000:]
    figures = json.loads(result.stdout.splitlines()[-1])
    assert figures["device"] == "cpu" and figures["imports_flows_or_tasks"] is False
    for name in ("matmul_peak_tflops", "sft_tokens_per_s", "rl_tokens_per_s", "sft_peak_memory_mb", "sft_mfu", "rl_mfu",
                 "sft_model_peak_mb", "rl_model_peak_mb"):
        assert figures[name] > 0, name
    # the CPU's peak is the process's RSS (python, torch): far above a tiny trainer's modelled bytes
    assert figures["sft_peak_over_model"] > 1 and figures["rl_peak_over_model"] > 1
    # CPU against CPU, both fp32 (this CPU's `auto` may be bf16: then the rounding of bf16)
    tolerance = 0.0 if figures["precision"] == "fp32" else 0.1
    assert figures["logp_max_abs_diff"] <= tolerance and figures["update_rel_diff"] <= max(tolerance, 1e-6)
