"""The single-process path of the FSDP2 wrapper leaves the model untouched."""

import torch

from tiny_chat_model import tiny_llama
from training.sft.distributed import shard_for_training, world_size
from training.sft.model_loss import PackedLMLoss


def test_single_process_is_a_no_op(monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    assert world_size() == 1
    module = PackedLMLoss(tiny_llama(), chunk_size=8)
    before = {k: v.clone() for k, v in module.state_dict().items()}
    assert shard_for_training(module) is module
    assert not torch.distributed.is_initialized()
    assert all(type(p) is torch.nn.Parameter for p in module.parameters())  # not DTensor shards
    assert all(torch.equal(before[k], v) for k, v in module.state_dict().items())
