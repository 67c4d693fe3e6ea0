"""Checkpoints of torchrun ranks: each rank writes its own shards (torch.distributed.checkpoint).

A checkpoint the ranks write has training/checkpoint.py's directory, with the trainer state
sharded rather than gathered:
  shards/               DCP: {"model": the weights, "optimizer": the optimizer state (AdamW's two
                        moments, or Muon's one momentum buffer per matrix: training/optim/)}, keyed by
                        parameter name, one file per rank (__<rank>_0.distcp) and `.metadata`
  model.safetensors (+ config.json, generation_config.json), tokenizer files
                        the HF export the engines, evaluation and MLflow read: the weights
                        gathered to rank 0 (no optimizer state is gathered)
  rng.pt                rank 0's RNG states (every rank restores them on a resume)
  trainer_state.json    as in one process
There is no optimizer.pt. The directory is written under `.<name>.partial` and renamed by rank 0
once every rank's shards are on disk (DCP's `.metadata` is written after all of them), so a
crash never leaves a half-written checkpoint under the final name. Under more than one node the
ranks must share the checkpoint directory's storage.

Resuming is independent of how many ranks wrote the checkpoint and of its layout: the weights
(training/runtime/meta_init.py `fill_weights` under ranks; the HF export in one process) and then the
optimizer and RNG states (`restore_training_state`). DCP reshards on load (N ranks -> M, one process
included); a one-process checkpoint (optimizer.pt) is read by rank 0 and broadcast, every rank
keeping its shards.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import torch

SHARDS = "shards"
"""The folder of a ranks' checkpoint holding DCP's files."""


def is_sharded(path: Path) -> bool:
    """Whether the checkpoint at `path` was written by ranks (DCP shards, no optimizer.pt)."""
    return (path / SHARDS / ".metadata").is_file()


def sharded_state(model: torch.nn.Module, optimizer: torch.optim.Optimizer | None) -> dict[str, Any]:
    """The {"model", "optimizer"} state DCP saves and loads in place: this rank's shards (the
    plain tensors in one process), keyed by name; a tied alias is left out (it is its parameter).
    A fresh AdamW gets its moments allocated (a zero step at lr 0) so that they can be loaded into."""
    from torch.distributed.checkpoint.state_dict import get_model_state_dict, get_optimizer_state_dict

    from passband.training.checkpoint import tied_parameter_aliases

    aliases = tied_parameter_aliases(model)
    state: dict[str, Any] = {"model": {name: tensor for name, tensor in get_model_state_dict(model).items()
                                       if name not in aliases}}
    if optimizer is not None:
        state["optimizer"] = get_optimizer_state_dict(model, optimizer)
    return state


def save_sharded_checkpoint(out_dir: Path, name: str, model: Any, tokenizer: Any, optimizer: torch.optim.Optimizer,
                            trainer_state: dict[str, Any]) -> Path:
    """Write checkpoint `out_dir/name` from every rank (a collective: each rank calls it with its
    shards of `model`, a transformers model sharded by FSDP2, and of `optimizer`); its path."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    from passband.training.checkpoint import capture_rng_state, tied_parameter_aliases
    from passband.training.runtime.distributed import rank

    final, partial = out_dir / name, out_dir / f".{name}.partial"
    if rank() == 0:
        out_dir.mkdir(parents=True, exist_ok=True)
        if partial.exists():  # a crashed save's leftovers
            shutil.rmtree(partial)
    torch.distributed.barrier()
    dcp.save(sharded_state(model, optimizer), checkpoint_id=partial / SHARDS)
    # The export: the weights alone are gathered, to rank 0's host memory ({} on the other ranks).
    full = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    if rank() == 0:
        aliases = tied_parameter_aliases(model)  # written once, as one process writes them
        model.save_pretrained(partial, state_dict={k: v for k, v in full.items() if k not in aliases})
        full.clear()
        tokenizer.save_pretrained(partial)
        torch.save(capture_rng_state(), partial / "rng.pt")
        (partial / "trainer_state.json").write_text(json.dumps(trainer_state, indent=2, sort_keys=True))
        if final.exists():
            shutil.rmtree(final)
        os.replace(partial, final)
    torch.distributed.barrier()  # no rank returns the path before it exists
    return final


def load_sharded_weights(path: Path, model: torch.nn.Module) -> None:
    """The weights of the ranks' checkpoint at `path` into `model`'s allocated tensors (this rank's
    shards under ranks, the plain tensors in one process), resharded to this world."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

    state = sharded_state(model, None)
    dcp.load(state, checkpoint_id=path / SHARDS)  # in place
    set_model_state_dict(model, state["model"], options=StateDictOptions(strict=False))


def restore_training_state(path: Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """The optimizer state and RNG states of checkpoint `path` (either layout, written by any number of
    ranks) into `optimizer` over `model`'s parameters (sharded under ranks, plain in one process);
    the weights are the caller's (`fill_weights` under ranks). Returns its trainer_state.json.
    A collective under ranks."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict

    from passband.training.checkpoint import read_trainer_state, restore_rng_state
    from passband.training.optim.optimizer import optimizer_order_names
    from passband.training.runtime.distributed import optimizer_state_by_name, rank, world_size

    if is_sharded(path):
        state = {"optimizer": sharded_state(model, optimizer)["optimizer"]}
        dcp.load(state, checkpoint_id=path / SHARDS)  # in place, resharded to this world
        set_optimizer_state_dict(model, optimizer, state["optimizer"])
    elif world_size() == 1:  # torch casts the moments to their parameter's device
        optimizer.load_state_dict(torch.load(path / "optimizer.pt", map_location="cpu", weights_only=True))
    else:  # rank 0 reads the one-process state; every rank keeps its shards
        full = {}
        if rank() == 0:  # optimizer.pt's indices run group by group (Muon's matrices first), not in model order
            full = optimizer_state_by_name(torch.load(path / "optimizer.pt", map_location="cpu", weights_only=True),
                                           optimizer_order_names(model, optimizer))
        set_optimizer_state_dict(model, optimizer, full,
                                 options=StateDictOptions(full_state_dict=True, broadcast_from_rank0=True))
    restore_rng_state(torch.load(path / "rng.pt", map_location="cpu", weights_only=True))
    return read_trainer_state(path)
