"""FSDP2 under torchrun; a no-op in a single process.

Launch (one node, 8 GPUs):  torchrun --standalone --nproc_per_node 8 -m <entry point that calls
shard_for_training and then train_stage>. torchrun sets WORLD_SIZE/RANK/LOCAL_RANK; with
WORLD_SIZE == 1 (or unset) nothing here changes the model.

What is sharded: every decoder layer is its own FSDP unit (all-gathered just before it runs,
freed after), then the root `PackedLMLoss` wrapper, so the embeddings, final norm and the tied
head are gathered for the whole forward *including the chunked loss*, whose head weight is used
outside the decoder. That is why the loop calls the wrapper and never `lm.base_model` directly.

Not done yet, so `train_stage` refuses WORLD_SIZE > 1 with a ValueError: splitting each step's micro-batches across
ranks (every rank must run the same number of forward passes, or collectives hang), and
gathering a full state dict on rank 0 for checkpoints (torch.distributed.checkpoint or
get_model_state_dict(full_state_dict=True, cpu_offload=True)).
"""

from __future__ import annotations

import os

import torch


def world_size() -> int:
    return int(os.environ.get("WORLD_SIZE", "1"))


def shard_for_training(loss_module: torch.nn.Module) -> torch.nn.Module:
    """Wrap a `PackedLMLoss` with fully_shard when WORLD_SIZE > 1; return it unchanged otherwise."""
    if world_size() == 1:
        return loss_module
    from torch.distributed.fsdp import fully_shard

    if not torch.distributed.is_initialized():
        torch.distributed.init_process_group()
    if torch.cuda.is_available():
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    for layer in loss_module.lm.base_model.layers:
        fully_shard(layer)
    fully_shard(loss_module)
    return loss_module
