"""Selective activation checkpointing under FSDP2: two gloo ranks (`torchrun --nproc_per_node 2`, the SFT
launcher) with `activation_checkpointing: selective` end where one process without checkpointing does.
The policy's cache sits inside each layer's checkpoint with FSDP2's gather and reshard hooks, which run
again when the layer is recomputed in backward."""

from pathlib import Path

import pytest
from safetensors.torch import load_file

from test_sft_torchrun import STAGE, _torchrun, _write_rows
from tiny_chat_model import tiny_llama, tiny_tokenizer
from passband.training.sft.config import StageConfig
from passband.training.sft.launch import LaunchConfig, run


@pytest.mark.slow
def test_two_ranks_with_selective_match_one_process_without(tmp_path, monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    model_dir = tmp_path / "model"
    tiny_llama(seed=0, hidden=32).save_pretrained(model_dir)
    tiny_tokenizer().save_pretrained(model_dir)
    _write_rows(tmp_path / "rows.jsonl")
    stage = StageConfig(datasets={str(tmp_path / "rows.jsonl"): 1.0}, **{**STAGE, "activation_checkpointing": "none"})
    one_metrics = {}
    run(LaunchConfig(model=model_dir, out_dir=tmp_path / "one", stage=stage),
        on_metrics=lambda m, s: one_metrics.__setitem__(s, m))
    selective = LaunchConfig(model=model_dir, out_dir=tmp_path / "two",
                             stage=stage.model_copy(update={"activation_checkpointing": "selective"}))
    two_metrics = _torchrun(selective, tmp_path, "two")

    one = load_file(tmp_path / "one" / "step_000004" / "model.safetensors")
    two = load_file(tmp_path / "two" / "step_000004" / "model.safetensors")
    # fp32: the ranks add their gradients in another order (measured < 1e-7 without checkpointing,
    # tests/test_sft_torchrun.py), while one AdamW step moves a weight by ~lr = 3e-3
    assert max(float((two[k] - one[k]).abs().max()) for k in one) < 1e-5
    for step, metrics in two_metrics.items():
        for key in ("loss", "grad_norm", "num_loss_tokens"):
            assert metrics[key] == pytest.approx(one_metrics[step][key], rel=1e-5), (step, key)


@pytest.mark.slow
def test_rl_update_on_two_ranks_with_selective_matches_one_process_without(tmp_path, monkeypatch):
    """The RL update on 2 gloo ranks (training/rl/launch.py) with selective checkpointing, two updates, against
    the in-process trainer without checkpointing: the same weights and metrics (fp32)."""
    import torch

    from test_rl_ranks import two_updates_on_ranks
    from passband.training.rl.config import RLAlgoConfig
    from passband.training.rl.trainer import open_trainer
    from passband.training.rl.update import rl_update

    monkeypatch.delenv("WORLD_SIZE", raising=False)
    algo = RLAlgoConfig(lr=3e-3, precision="fp32", micro_batch_size=5, grad_clip=0.5, attention="sdpa",
                        activation_checkpointing="none")
    selective = algo.model_copy(update={"activation_checkpointing": "selective"})
    _, model_dir, batches, replies = two_updates_on_ranks(tmp_path, selective, engine_dtype="float32")
    two_final = load_file(Path(replies[3]["checkpoint"]) / "model.safetensors")
    one = open_trainer(model_dir, ["math"], algo)
    one_metrics = [rl_update(one.model, one.ref_model, one.optimizer, batch, algo, torch.Generator().manual_seed(seed))
                   for batch, seed in zip(batches, (11, 12))]
    one_final = {k: v for k, v in one.model.state_dict().items() if k != "lm_head.weight"}
    assert max(float((two_final[k] - one_final[k]).abs().max()) for k in one_final) <= 1e-5
    for reply, ones in zip((replies[1], replies[2]), one_metrics, strict=True):
        for key in ("loss", "grad_norm", "entropy"):
            assert reply["metrics"][key] == pytest.approx(ones[key], rel=1e-5, abs=1e-6), key
