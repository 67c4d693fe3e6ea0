#!/usr/bin/env bash
# The wheels the trainer check needs on a bare CUDA image (torch, transformers, accelerate, pandas and
# pyarrow there; no network): pydantic for our configs, TRL and datasets for TRL's row. Downloaded here
# into .whl/ (git-ignored) for Python 3.12 on x86-64 Linux, the versions of constraints.txt, 4.5 MB:
#
#     bash scripts/gpu_check_wheels.sh
#
# and on the GPU machine, from the checkout with .whl/ beside it:
#
#     python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl
#     PYTHONPATH=/tmp/site bash scripts/gpu_check.sh --trainers --trl
set -euo pipefail
cd "$(dirname "$0")/.."
pinned() {  # NAME: its version in constraints.txt (pip spells some names with _, some with -)
  grep -i -E "^${1//[-_]/[-_]}==" constraints.txt | head -1
}
names=(pydantic pydantic_core annotated-types typing-inspection typing_extensions datasets dill multiprocess)
specs=()
for name in "${names[@]}"; do specs+=("$(pinned "$name")"); done
specs+=("$(sed -n 's/^TRL := //p' Makefile)")  # the Makefile's pin, the one TRL the project uses
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  -d .whl "${specs[@]}"
ls -l .whl
