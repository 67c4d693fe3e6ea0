"""The RL ranks without publishing (version None: the flow's NCCL broadcast path) equal one process.

FSDP2 leaves its root unit gathered after a forward with no backward (the update scores theta_k and its
closing metrics under no_grad); the optimizer then steps the shards, and the next update's first forward
read the stale gathered embedding, norm and head. Publishing a version resharded them by accident, so
only the path that publishes nothing drifted: 8.5e-3 from one process after three AdamW updates
(training/runtime/distributed.py: reshard_units).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from test_muon_trainers import _max_diff, _torchrun, _weights
from test_rl_ranks import _batch
from tiny_chat_model import tiny_llama, tiny_tokenizer
from passband.training.rl.config import RLAlgoConfig
from passband.training.rl.launch import RanksConfig, batch_request, write_request


@pytest.mark.slow  # one torchrun launch of 2 ranks: about a minute on the 2-core box
def test_two_ranks_that_publish_nothing_equal_one_process(tmp_path, monkeypatch):
    from passband.training.rl.trainer import open_trainer
    from passband.training.rl.update import rl_update

    monkeypatch.delenv("WORLD_SIZE", raising=False)
    algo = RLAlgoConfig(lr=3e-3, precision="fp32", micro_batch_size=5, grad_clip=0.5)
    model_dir = tmp_path / "model"
    start = tiny_llama(seed=0, hidden=32).eval()
    start.save_pretrained(model_dir)
    tiny_tokenizer().save_pretrained(model_dir)
    batches = [_batch(start, seed) for seed in (1, 2, 3)]
    state = {"iteration": 3, "consumed": {"math": 6}, "prompt_ids": [], "best": None, "metrics": {}}
    requests = [batch_request(batch, seed, None) for batch, seed in zip(batches, (11, 12, 13))]
    requests += [{"kind": "checkpoint", "name": "iter-000003", "state": state}, {"kind": "stop"}]
    for number, request in enumerate(requests, start=1):
        write_request(tmp_path / "two", number, request)
    replies = _torchrun(2, "passband.training.rl.launch", RanksConfig(model=model_dir, algo=algo,
                                                                      work_dir=tmp_path / "two"))
    assert [reply["weights"] for reply in replies[1:4]] == [None, None, None]  # nothing was published
    two = _weights(Path(replies[4]["checkpoint"]))  # replies[0] is the ranks' ready line

    one = open_trainer(model_dir, ["math"], algo)
    losses = []
    for batch, seed in zip(batches, (11, 12, 13)):
        metrics = rl_update(one.model, one.ref_model, one.optimizer, batch, algo, torch.Generator().manual_seed(seed))
        losses.append(metrics["loss"])
    one_final = {k: v for k, v in one.model.state_dict().items() if k != "lm_head.weight"}
    print(f"3 AdamW updates, nothing published: max |2 ranks - 1 process| = {_max_diff(two, one_final):.3g}")
    assert [reply["metrics"]["loss"] for reply in replies[1:4]] == pytest.approx(losses, abs=1e-5)
    assert _max_diff(two, one_final) <= 1e-5
