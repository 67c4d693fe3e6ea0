"""The `passband` command: instant help, clean stdout (one JSON line), clear errors, up/down."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

BIN = Path(sys.executable).parent / "passband"


def passband(*args: str, cwd: Path, env: dict[str, str] | None = None, timeout: float = 600):
    return subprocess.run([str(BIN), *args], cwd=cwd, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})})


def test_help_is_instant(tmp_path: Path) -> None:
    start = time.perf_counter()
    result = passband("--help", cwd=tmp_path)
    elapsed = time.perf_counter() - start
    assert result.returncode == 0
    for command in ("run", "up", "down", "doctor", "verify", "deploy"):
        assert command in result.stdout
    assert elapsed < 1.0, f"passband --help took {elapsed:.2f}s"


def test_unknown_flow_and_bad_setting_fail_fast(tmp_path: Path) -> None:
    result = passband("run", "nosuchflow", cwd=tmp_path)
    assert result.returncode != 0 and "unknown flow 'nosuchflow'" in result.stderr
    result = passband("run", "sample", "--set", "sampling.n=zero", cwd=tmp_path)
    assert result.returncode != 0 and "sampling.n" in result.stderr
    assert result.stdout == ""


def test_run_prints_exactly_one_json_line(tmp_path: Path) -> None:
    """The real model through the transformers engine on 2 prompts: stdout holds only the summary."""
    result = passband(
        "run", "sample", "--preset", "smoke",
        "--set", "engine.kind=hf", "--set", "engine.dtype=float32", "--set", "problems.num_problems=2",
        "--set", "sampling.n=2",
        "--set", "sampling.max_tokens=8", "--set", "kl_subsample=4", cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.splitlines()
    assert len(lines) == 1, result.stdout
    summary = json.loads(lines[0])
    assert summary["flow"] == "sample" and summary["status"] == "completed"
    assert summary["mlflow_run_id"]
    assert summary["metrics"]["num_samples"] == 4
    # an fp32 hf engine samples from the trainer's own fp32 model: no mismatch beyond padding effects
    assert summary["metrics"]["vllm_kl"] < 1e-4
    samples_uri = summary["outputs"]["samples"]
    assert samples_uri.startswith("file://")
    assert (Path(samples_uri.removeprefix("file://")) / "manifest.json").is_file()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_up_and_down_start_and_stop_our_services(tmp_path: Path) -> None:
    env = {"PASSBAND_PREFECT_PORT": str(free_port()), "PASSBAND_MLFLOW_PORT": str(free_port())}
    try:
        result = passband("up", cwd=tmp_path, env=env, timeout=300)
        assert result.returncode == 0, result.stderr[-3000:]
        urls = dict(line.split(": ", 1) for line in result.stdout.splitlines())
        assert urls["prefect"] == f"http://127.0.0.1:{env['PASSBAND_PREFECT_PORT']}"
        with urllib.request.urlopen(urls["prefect"] + "/api/health", timeout=10) as response:
            assert response.status == 200
        with urllib.request.urlopen(urls["mlflow"] + "/health", timeout=10) as response:
            assert response.status == 200
        pids = [int(p.read_text()) for p in (tmp_path / ".passband" / "run").glob("*.pid")]
        assert len(pids) == 2
        doctor = passband("doctor", cwd=tmp_path, env=env, timeout=120)
        assert "prefect-server         running" in doctor.stdout
        from passband.training.engines import EngineConfig

        assert f"engine dtype (auto): {EngineConfig().resolved_dtype()}" in doctor.stdout
    finally:
        result = passband("down", cwd=tmp_path, env=env, timeout=120)
    assert "stopped prefect-server" in result.stdout and "stopped mlflow-ui" in result.stdout
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and any(_alive(pid) for pid in pids):
        time.sleep(0.5)
    assert not any(_alive(pid) for pid in pids)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie of an already-reaped group counts as gone
    return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"


def test_verify_command_scores_rows_and_quarantines_bad_lines(tmp_path: Path) -> None:
    rows = [
        {"id": "a", "completion": "so \\boxed{\\frac{1}{2}}", "reference": "0.5"},
        {"id": "b", "completion": "no answer here", "reference": "3"},
    ]
    source = tmp_path / "in.jsonl"
    source.write_text("".join(json.dumps(r) + "\n" for r in rows) + "not json\n")
    result = passband("verify", "--task", "math", "--rule", "boxed", str(source), "-o", str(tmp_path / "out.jsonl"),
                      cwd=tmp_path)
    assert result.returncode == 3, result.stderr[-2000:]  # the good rows are verified; a row was quarantined
    scored = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert [(r["id"], r["status"], r["score"]) for r in scored] == [("a", "pass", 1.0), ("b", "unparsable", 0.0)]
    quarantined = [json.loads(line) for line in (tmp_path / "out.quarantine.jsonl").read_text().splitlines()]
    assert [q["line"] for q in quarantined] == [3]
    assert "pass=1 unparsable=1 quarantined=1" in result.stderr
