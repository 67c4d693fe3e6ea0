#!/usr/bin/env bash
# The checks that need a GPU, in one run of under 8 minutes on one GPU (issue 29 item 8); CI has no
# GPU, so run it whenever one is at hand and put its output in the session's note:
#
#     bash scripts/gpu_check.sh [PYTHON]     # PYTHON: the GPU environment's (default .venv-gpu/bin/python,
#                                            # made as README "Install on a GPU machine" says)
#
# 1. what the machine is (nvidia-smi, passband doctor), then the SFT and RL trainers on CUDA
#    (scripts/gpu_check_trainers.py: tokens/s, MFU, peak memory, CPU/GPU agreement);
# 2. the GPU extra's fused loss against ours (Liger's linear cross-entropy, tests marked gpu);
# 3. our vLLM engine on CUDA against raw vLLM: start seconds and tokens/s (scripts/gpu_check.py engine);
# 4. the RL weight sync by the disk path: publish a version, load it into the live engine
#    (scripts/gpu_check.py weights); and by NCCL broadcast, the engine on one GPU and the sender
#    on another (scripts/gpu_check.py broadcast; 2 GPUs, as the next check);
# 5. the RL update on torchrun ranks over NCCL against one process (tests/test_rl_ranks.py: FSDP2
#    puts each rank on its GPU when CUDA is present, training/runtime/distributed.py, and the process
#    group is then NCCL; one rank per GPU, so it needs 2 GPUs, and on one it says so). Not yet run
#    on a GPU: the first run is the check.
# Each check has its own time limit; the script goes on past a failed one and exits non-zero if any failed.
#
#     bash scripts/gpu_check.sh --trainers [ARGS...]   # the trainers alone, on a bare CUDA image
#
# runs only scripts/gpu_check_trainers.py (issue 50 item 6) with $PYTHON (default python3): torch with
# CUDA, transformers and pydantic suffice (no vLLM, Prefect, MLflow, network, nor our package
# installed); ARGS go to it (`--device cpu --shape tiny` on a machine without a GPU, as
# tests/test_gpu_check_trainers.py runs it). The full run runs it right after `machine`, on CUDA. Each of its
# phases prints its figures and appends them to $OUT/gpu_check.jsonl as it ends, so a phase that fails
# (an import missing on the image) loses no other's (scripts/gpu_check_common.py).
# `--trl` adds TRL's GRPOTrainer on the same shape and batch beside our RL update
# (scripts/gpu_check_trl.py); TRL, datasets and pydantic travel to a bare image as wheels
# (scripts/gpu_check_wheels.sh says how). Where one is lent, one call runs both shapes:
#
#     python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site &&
#       bash scripts/gpu_check.sh --trainers --trl && bash scripts/gpu_check.sh --trainers --trl --shape qwen1.5b
set -uo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = "--trainers" ]; then
  shift
  exec "${PYTHON:-python3}" scripts/gpu_check_trainers.py "$@"
fi
PY=${1:-.venv-gpu/bin/python}
BIN=$(dirname "$PY")
failed=()

check() {  # check NAME SECONDS COMMAND...
  local name=$1 limit=$2; shift 2
  echo "=== $name (at most ${limit} s)"
  local start=$SECONDS
  if timeout "$limit" "$@"; then echo "--- $name: ok in $((SECONDS - start)) s"
  else echo "--- $name: FAILED (exit $?) after $((SECONDS - start)) s"; failed+=("$name"); fi
}

check machine 30 bash -c "nvidia-smi && $BIN/passband doctor"
check trainers-on-cuda 300 "$PY" scripts/gpu_check_trainers.py --device cuda
check liger-loss 90 "$BIN/pytest" -q -m gpu tests/test_sft_chunked_loss.py
check engine-vs-raw-vllm 180 "$PY" scripts/gpu_check.py engine
check weight-publish-load 90 "$PY" scripts/gpu_check.py weights
gpus=$("$PY" -c 'import torch; print(torch.cuda.device_count())')
if [ "$gpus" -ge 2 ]; then
  check weight-broadcast 120 "$PY" scripts/gpu_check.py broadcast
  check rl-ranks-nccl 120 "$BIN/pytest" -q tests/test_rl_ranks.py
else
  echo "=== weight-broadcast, rl-ranks-nccl: need 2 GPUs (NCCL takes one per member); this machine has $gpus"
  failed+=("weight-broadcast, rl-ranks-nccl (need 2 GPUs)")
fi

if [ ${#failed[@]} -gt 0 ]; then echo "not passed: ${failed[*]}"; exit 1; fi
echo "all GPU checks passed"
