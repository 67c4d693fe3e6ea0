"""scripts/gpu_check_trainers.py (through gpu_check.sh --trainers) runs on the CPU with a tiny shape:
every line the GPU machine will run, but the CUDA-only ones, runs here first, TRL's row included (TRL's
wheel alone in .venv/trl, which `make install` puts there, as it travels to the GPU image). Each phase's
figures are written to $OUT/gpu_check.jsonl as it ends, and a phase that fails loses no other's (issue 67
item 5)."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TRL_SITE = ROOT / ".venv" / "trl"
TINY = ["--device", "cpu", "--shape", "tiny", "--seq-len", "32", "--rows", "2", "--steps", "1", "--prompt-len", "6",
        "--response-len", "8", "--prompts", "1", "--trl"]


def _run_check(out: Path, pythonpath: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "scripts/gpu_check.sh", "--trainers", *TINY], cwd=ROOT, capture_output=True,
                          text=True, timeout=600,
                          env={**os.environ, "PYTHON": sys.executable, "PYTHONPATH": pythonpath, "OUT": str(out)})


def _phases(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "gpu_check.jsonl").read_text().splitlines()]


def test_trl_wheel_is_installed_apart():
    """TRL's own folder, not our site-packages: `make install` made it (Makefile), nothing else did."""
    assert (TRL_SITE / "trl" / "__init__.py").is_file(), f"{TRL_SITE} has no trl: run `make install`"
    result = subprocess.run([sys.executable, "-c", "import trl"], capture_output=True, text=True)
    assert result.returncode != 0 and "No module named 'trl'" in result.stderr


def test_trainer_check_runs_on_the_cpu_and_imports_no_flow_or_task(tmp_path):
    result = _run_check(tmp_path, str(TRL_SITE))
    assert result.returncode == 0, result.stderr[-3000:]
    figures = json.loads(result.stdout.splitlines()[-1])
    phases = _phases(tmp_path)  # written phase by phase: together, the last line's figures
    assert [p["phase"] for p in phases] == ["machine", "sft", "rl", "handover", "agreement", "fsdp", "trl",
                                            "memory_model", "imports"]
    assert all(p["ok"] for p in phases) and {k: v for p in phases for k, v in p["figures"].items()} == figures
    assert figures["handover_reserved_mb_before"] == figures["handover_reserved_mb_after"] == 0  # no CUDA here
    assert figures["device"] == "cpu" and figures["imports_flows_or_tasks"] is False
    for name in ("matmul_peak_tflops", "sft_tokens_per_s", "rl_tokens_per_s", "sft_peak_memory_mb", "sft_mfu", "rl_mfu",
                 "sft_model_peak_mb", "rl_model_peak_mb"):
        assert figures[name] > 0, name
    # the CPU's peak is the process's RSS (python, torch): far above a tiny trainer's modelled bytes
    assert figures["sft_peak_over_model"] > 1 and figures["rl_peak_over_model"] > 1
    # CPU against CPU, both fp32 (this CPU's `auto` may be bf16: then the rounding of bf16)
    tolerance = 0.0 if figures["precision"] == "fp32" else 0.1
    assert figures["logp_max_abs_diff"] <= tolerance and figures["update_rel_diff"] <= max(tolerance, 1e-6)
    # one FSDP2 rank (gloo here): the SFT steps' loss is the one process's, to float noise in fp32
    assert figures["fsdp_sft_loss_diff"] <= (1e-5 if figures["precision"] == "fp32" else 1e-2)
    for name in ("fsdp_sft_tokens_per_s", "fsdp_rl_tokens_per_s", "fsdp_sft_peak_memory_mb", "fsdp_rl_peak_memory_mb"):
        assert figures[name] > 0, name
    assert abs(figures["fsdp_rl_vllm_kl"]) < 1e-3  # its updates ran on the batch of its own start weights
    # TRL's row: the same batch (8 completions of exactly 8 tokens), its steps timed apart from its
    # generation, and the ratio of the two updates' seconds
    assert figures["trl_version"] == "1.16.0" and figures["trl_completion_mean_length"] == 8
    assert 0 < figures["trl_generate_s"] < figures["trl_step_s"]
    assert figures["trl_update_s"] == figures["trl_step_s"] - figures["trl_generate_s"]
    assert figures["trl_tokens_per_s"] == 8 * (6 + 8) / figures["trl_update_s"]
    assert figures["rl_update_speedup_over_trl"] == figures["trl_update_s"] / figures["rl_update_s"]


def test_a_failing_phase_keeps_every_other_phases_figures(tmp_path):
    """TRL missing (as on a bare image without its wheels): its phase fails in one line, the figures of the
    phases before it are already on disk, the phases after it still run, and the exit status says so."""
    result = _run_check(tmp_path, "")
    assert result.returncode == 1
    phases = {p["phase"]: p for p in _phases(tmp_path)}
    assert phases["trl"]["ok"] is False and phases["trl"]["error"] == "ModuleNotFoundError: No module named 'trl'"
    assert phases["sft"]["ok"] and phases["sft"]["figures"]["sft_tokens_per_s"] > 0
    assert phases["memory_model"]["ok"] and phases["memory_model"]["figures"]["rl_peak_over_model"] > 1
    assert "phases that failed: trl" in result.stderr
    figures = json.loads(result.stdout.splitlines()[-1])
    assert figures["rl_tokens_per_s"] > 0 and "trl_step_s" not in figures


def test_the_check_scripts_import_no_cycle():
    """gpu_check_trainers runs gpu_check_trl's row; both take their shared pieces from gpu_check_common,
    and neither is imported by the one it imports (issue 65)."""
    imported = {}
    for name in ("gpu_check_trainers", "gpu_check_trl", "gpu_check_common"):
        tree = ast.parse((ROOT / "scripts" / f"{name}.py").read_text())
        imported[name] = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)} | {
            alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    assert "gpu_check_trl" in imported["gpu_check_trainers"] and "gpu_check_trainers" not in imported["gpu_check_trl"]
    assert "gpu_check_common" in imported["gpu_check_trl"] and "gpu_check_common" in imported["gpu_check_trainers"]
    assert not imported["gpu_check_common"] & {"gpu_check_trainers", "gpu_check_trl"}
