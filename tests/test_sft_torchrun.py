"""The SFT stage under `torchrun --nproc_per_node 2` (FSDP2 on CPU, gloo) ends where one process does.

Same tiny Llama, data and seed four ways: one process in this test (the reference, checkpoints at
steps 2 and 4), two ranks from scratch (built on meta, rank 0's read broadcast; their checkpoints
sharded by DCP, the AdamW state read back here in one process), two ranks resuming from the
one-process step-2 checkpoint (rank 0 reads it, every rank keeps its shards), and one torchrun rank (`distributed.torchrun_at_one_rank`: unsharded, so bit for bit the one process).
"""

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml
from safetensors.torch import load_file

from tiny_chat_model import tiny_llama, tiny_tokenizer
from passband.training.sft.config import StageConfig
from passband.training.runtime.checkpoint_shards import restore_training_state
from passband.training.model_source import load_causal_lm
from passband.training.sft.launch import LaunchConfig, local_stage_examples, run
from passband.training.sft.packing import group_micro_batches, pack_first_fit_decreasing
from passband.training.sft.sampler import StepSampler

REPO = Path(__file__).resolve().parents[1]
# micro_batch_tokens == max_length: one packed row per micro-batch, so steps split into several.
# Activation checkpointing as in the flow's default stage: HF's per-layer recompute inside FSDP units.
# fp32: the comparison below bounds rounding from the ranks' summation order, which bf16 autocast
# would swamp (its own rounding is ~1e-3 relative per matmul).
STAGE = dict(name="foundation", max_length=96, num_steps=4, lr=3e-3, warmup_steps=1, batch_tokens=300,
             micro_batch_tokens=96, grad_clip=0.5, checkpoint_every=2, seed=5, activation_checkpointing=True,
             precision="fp32")


def _write_rows(path):
    rng = random.Random(0)
    rows = []
    for _ in range(30):
        a, b = rng.randint(0, 99), rng.randint(0, 99)
        rows.append({"prompt": f"{a}+{b}=?", "completion": f"{a}+{b}={a + b}. " * rng.randint(1, 3)})
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))


def _torchrun(config, tmp_path, name, nproc=2):
    """Launch the documented entry point on `nproc` CPU ranks; return rank 0's per-step metrics."""
    config_file = tmp_path / f"{name}.yaml"
    config_file.write_text(yaml.safe_dump(config.model_dump(mode="json")))
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    env.pop("WORLD_SIZE", None)
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node",
                           str(nproc), "-m", "passband.training.sft.launch", str(config_file)],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-4000:]
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert lines[-1] == {"checkpoint": str(config.out_dir / "step_000004"), "num_steps": 4}
    saved = [line for line in lines[:-1] if "checkpoint_saved" in line]  # rank 0 announces each checkpoint
    assert [line["step"] for line in saved] == sorted({2, 4} - ({2} if config.resume_from else set()))
    return {line["step"]: line for line in lines[:-1] if "loss" in line}


def test_two_ranks_match_one_process(tmp_path, monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    model_dir = tmp_path / "model"
    tiny_llama(seed=0, hidden=32).save_pretrained(model_dir)
    tiny_tokenizer().save_pretrained(model_dir)
    _write_rows(tmp_path / "rows.jsonl")
    stage = StageConfig(datasets={str(tmp_path / "rows.jsonl"): 1.0}, **STAGE)
    config = LaunchConfig(model=model_dir, out_dir=tmp_path / "one", stage=stage)

    # The split must be uneven somewhere, so that a rank runs a zero-weight padding pass.
    examples = local_stage_examples(stage, tiny_tokenizer())
    sampler = StepSampler([len(e.input_ids) for e in examples], stage.batch_tokens, stage.seed)
    num_micro_batches = []
    for _ in range(stage.num_steps):
        lengths = [len(examples[i].input_ids) for i in sampler.next_step()]
        rows = pack_first_fit_decreasing(lengths, stage.max_length)
        num_micro_batches.append(len(group_micro_batches([sum(lengths[i] for i in r) for r in rows], 96)))
    assert any(n % 2 for n in num_micro_batches), num_micro_batches

    one_metrics = {}
    run(config, on_metrics=lambda m, s: one_metrics.__setitem__(s, m))
    two_metrics = _torchrun(config.model_copy(update={"out_dir": tmp_path / "two"}), tmp_path, "two")
    resumed_metrics = _torchrun(config.model_copy(update={"out_dir": tmp_path / "resumed",
                                                          "resume_from": tmp_path / "one" / "step_000002"}),
                                tmp_path, "resumed")
    assert sorted(resumed_metrics) == [3, 4]
    one_rank_metrics = _torchrun(config.model_copy(update={"out_dir": tmp_path / "one_rank"}), tmp_path, "one_rank", 1)

    one = load_file(tmp_path / "one" / "step_000004" / "model.safetensors")
    print("steps' micro-batches", num_micro_batches)
    for name in ("two", "resumed"):
        weights = load_file(tmp_path / name / "step_000004" / "model.safetensors")
        assert sorted(weights) == sorted(one)  # the tied head is written once, as in one process
        diff = max(float((weights[k] - one[k]).abs().max()) for k in one)
        print(f"{name}: max |weight - one process| = {diff:.3g}")
        # fp32; the ranks' gradients add in another order and the clipping norm is summed from
        # per-shard norms, so the runs differ by rounding (measured < 1e-7), while one AdamW step
        # moves a weight by ~lr = 3e-3: a dropped or doubled micro-batch is far above 1e-5.
        assert diff < 1e-5
        # AdamW is blind to a uniform gradient scale (averaging over ranks instead of summing
        # moved the weights by only 1.2e-7), so the pre-clip gradient norm and the loss are
        # compared too: they catch a wrong normalisation by its factor.
        for step, metrics in (two_metrics if name == "two" else resumed_metrics).items():
            for key in ("loss", "grad_norm", "num_loss_tokens", "padding_fraction", "lr"):
                assert metrics[key] == pytest.approx(one_metrics[step][key], rel=1e-5), (name, step, key)
    one_rank = load_file(tmp_path / "one_rank" / "step_000004" / "model.safetensors")
    assert sorted(one_rank) == sorted(one) and all(torch.equal(one_rank[k], one[k]) for k in one)
    assert {step: m["loss"] for step, m in one_rank_metrics.items()} == {step: m["loss"] for step, m in one_metrics.items()}
    one_adam = torch.load(tmp_path / "one" / "step_000002" / "optimizer.pt", weights_only=True)
    # The 2 ranks' checkpoint is sharded (no optimizer.pt): its AdamW state read back in one process.
    two_checkpoint = tmp_path / "two" / "step_000002"
    assert not (two_checkpoint / "optimizer.pt").exists() and (two_checkpoint / "shards" / ".metadata").is_file()
    reader = load_causal_lm(two_checkpoint)
    reader_adam = torch.optim.AdamW(reader.parameters())
    restore_training_state(two_checkpoint, reader, reader_adam)
    two_adam = reader_adam.state_dict()
    assert two_adam["param_groups"][0]["params"] == one_adam["param_groups"][0]["params"]
    for index, moments in one_adam["state"].items():
        for key, value in moments.items():
            torch.testing.assert_close(two_adam["state"][index][key], value, rtol=1e-4, atol=1e-9)
