"""kill -9 under Muon (issue 70): a real `passband run sft` with `optimizer: muon` on 2 gloo ranks (the flow
launches torchrun), SIGKILLed (its whole process group; the ranks die with torchrun, PR_SET_PDEATHSIG) at a
random point after a checkpoint commit and before the stage ends, then rerun with the same command on the
same home. The rerun resumes from the newest committed checkpoint (DCP shards: each rank's half of every Muon
momentum buffer and AdamW moment) and ends where an uninterrupted run of that command ends, bit for bit: the
weights and the whole optimizer state (every momentum buffer, the AdamW group's moments, the step counts).

The killing is tests/killrun.py's, as in tests/test_kill9.py (which kills AdamW runs); the model is the tiny
Llama built here. PASSBAND_KILL_SEED replays a kill point; run with -s to see where it died.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import torch
import yaml
from mlflow import MlflowClient
from safetensors.torch import load_file

from killrun import alive, committed, kill_after_commits, kill_seed, run_to_end
from passband.tasks.artifacts.store import fetch_artifact
from test_flow_sft import _write_data
from tiny_chat_model import tiny_llama, tiny_tokenizer

RUN_TIMEOUT_S = 900
NUM_STEPS, CHECKPOINT_EVERY = 12, 3
CHECKPOINTS = "checkpoints/sft/*/*/*/manifest.json"


def _final_state(uri: str, tmp_path: Path, label: str) -> tuple[dict[str, torch.Tensor], dict]:
    """(the exported weights, the DCP checkpoint's {"model", "optimizer"} state read into one process)."""
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    folder = fetch_artifact(uri)
    converted = tmp_path / f"{label}.pt"
    dcp_to_torch_save(folder / "shards", converted)
    return load_file(folder / "model.safetensors"), torch.load(converted, weights_only=False)


def _tensors(state: object, prefix: str = "") -> dict[str, torch.Tensor]:
    """Every tensor in a nested state dict by its dotted path (the optimizer's param groups hold none)."""
    if isinstance(state, torch.Tensor):
        return {prefix: state}
    if isinstance(state, dict):
        return {path: tensor for key, value in state.items() for path, tensor in _tensors(value, f"{prefix}.{key}").items()}
    if isinstance(state, list | tuple):
        return {path: tensor for index, value in enumerate(state)
                for path, tensor in _tensors(value, f"{prefix}.{index}").items()}
    return {}


@pytest.mark.slow  # three `passband run sft` processes, each launching 2 torchrun ranks: ~3 min on an idle box,
@pytest.mark.timeout(3600)  # over 20 min at load average 20+ (2026-12-07), past the suite's 900 s
def test_sft_with_muon_on_two_ranks_killed_resumes_bit_for_bit(tmp_path):
    model_dir, data = tmp_path / "tiny", tmp_path / "data.jsonl"
    tiny_llama(seed=0).save_pretrained(model_dir)
    tiny_tokenizer().save_pretrained(model_dir)
    _write_data(data)
    stage = {"name": "s1", "datasets": {str(data): 1.0}, "max_length": 96, "num_steps": NUM_STEPS, "lr": 3e-3,
             "schedule": "cosine", "warmup_steps": 2, "batch_tokens": 300, "micro_batch_tokens": 96,
             "checkpoint_every": CHECKPOINT_EVERY, "seed": 3, "optimizer": "muon"}
    config_file = tmp_path / "sft.yaml"
    config_file.write_text(yaml.safe_dump({"model": str(model_dir), "stages": [stage], "eval": None,
                                           "distributed": {"nproc_per_node": 2}}, sort_keys=False))
    args = ["run", "sft", "--config", str(config_file)]
    full, _, full_s = run_to_end(args, tmp_path / "full", RUN_TIMEOUT_S, "uninterrupted")

    home = tmp_path / "killed"
    # 1.5 s: the 9 steps and 3 checkpoints after the first commit take longer than that on 2 ranks
    killed = kill_after_commits(args, home, CHECKPOINTS, kill_seed(), max_delay_s=1.5, timeout_s=RUN_TIMEOUT_S,
                                done_pattern="stages/sft/*/manifest.json")
    steps = sorted(int(path.split("/")[-2].removeprefix("step-")) for path in killed.committed)
    assert steps and steps[-1] < NUM_STEPS, f"killed after the stage's last checkpoint: {steps}"
    deadline = time.monotonic() + 10  # the ranks die with torchrun (PR_SET_PDEATHSIG), asynchronously
    while (leftovers := _ranks_of(home)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not leftovers, f"ranks of the killed run still alive: {leftovers}"
    rerun, _, rerun_s = run_to_end(args, home, RUN_TIMEOUT_S, "rerun")

    tags = MlflowClient(tracking_uri=f"sqlite:///{home / 'mlflow.db'}").get_run(rerun["mlflow_run_id"]).data.tags
    assert tags["stage.s1.status"] == f"resumed from step {steps[-1]}"
    after = committed(home, CHECKPOINTS)
    assert len(after) == NUM_STEPS // CHECKPOINT_EVERY
    assert all(after[path] == manifest for path, manifest in killed.committed.items())  # none recommitted
    weights, state = _final_state(full["outputs"]["checkpoint"], tmp_path, "full")
    weights_again, state_again = _final_state(rerun["outputs"]["checkpoint"], tmp_path, "rerun")
    assert weights.keys() == weights_again.keys()
    assert all(torch.equal(weights[name], weights_again[name]) for name in weights)
    optimizer, optimizer_again = _tensors(state["optimizer"]), _tensors(state_again["optimizer"])
    assert optimizer.keys() == optimizer_again.keys()
    assert all(torch.equal(optimizer[path], optimizer_again[path]) for path in optimizer)
    momentum = {path: tensor for path, tensor in optimizer.items() if path.endswith(".momentum_buffer")}
    assert len(momentum) == 2 * 7  # 2 layers x (q, k, v, o, gate, up, down): Muon's matrices, one buffer each
    assert all(float(tensor.abs().max()) > 0 for tensor in momentum.values())
    assert sum(path.endswith(".exp_avg_sq") for path in optimizer) == 2 + 2 * 2  # embedding, norms: AdamW's
    start = load_file(model_dir / "model.safetensors")
    assert min(float((weights[name] - start[name]).abs().max()) for name in start) > 1e-4  # every tensor trained
    print(f"\n[kill -9 sft, Muon, 2 ranks]\n  killed: {killed.describe()}\n  last committed step {steps[-1]} of "
          f"{NUM_STEPS}; rerun resumed there; weights ({len(weights)} tensors) and optimizer state ({len(optimizer)} "
          f"tensors, {len(momentum)} momentum buffers) equal the uninterrupted run's bit for bit\n  wall s: "
          f"uninterrupted {full_s:.1f}, killed at {killed.seconds_after_start:.1f}, rerun {rerun_s:.1f}")


def _ranks_of(home: Path) -> list[int]:
    """Live SFT ranks launched for a run on `home` (their launch config sits in its scratch folder)."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            text = cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except (FileNotFoundError, ProcessLookupError):  # ended while we listed /proc
            continue
        if "passband.training.sft.launch" in text and str(home) in text and alive(int(cmdline.parent.name)):
            found.append(int(cmdline.parent.name))
    return found
