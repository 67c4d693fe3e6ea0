"""The GPU image can compile Triton's kernels (issue 67 item 2): Triton builds a C driver stub the first
time a kernel runs (vLLM with enforce_eager: false, Liger's loss), so the image needs a C compiler. No
Docker engine runs where the suite runs, so the Dockerfile is parsed: its base image, and a compiler
installed before the Python packages."""

from __future__ import annotations

import re
from pathlib import Path

DOCKERFILE = Path(__file__).resolve().parents[1] / "infra" / "passband.Dockerfile"
COMPILERS = {"gcc", "build-essential", "clang"}


def _instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) per instruction, continuation lines joined, comments dropped."""
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    lines = [line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    return [(line.split(None, 1)[0].upper(), line.split(None, 1)[1]) for line in lines]


def test_the_gpu_image_installs_a_c_compiler_before_the_packages():
    steps = _instructions()
    (base,) = [arguments for instruction, arguments in steps if instruction == "FROM"]
    cuda_devel = re.match(r"nvidia/cuda:\S+-devel", base) is not None  # a CUDA devel image has gcc
    runs = [arguments for instruction, arguments in steps if instruction == "RUN"]
    compiler_at = next((i for i, run in enumerate(runs) if "apt-get install" in run
                        and COMPILERS & set(run.split())), None)
    pip_at = next(i for i, run in enumerate(runs) if "pip install" in run)
    assert base == "python:3.11-slim" or cuda_devel, base
    assert cuda_devel or (compiler_at is not None and compiler_at < pip_at), runs
    # and Python's headers, which Triton's stub includes: the python images carry them; a Debian one needs -dev
    assert base.startswith("python:") or any("python3-dev" in run or "python3.11-dev" in run for run in runs)
