"""Run by tests/test_muon_ranks.py, under `torchrun --nproc_per_node N` (FSDP2 on gloo) or as one plain process:

    muon_ranks.py train OUT MATRICES_PER_RANK   3 Muon steps on the tiny Llama of tests/test_muon.py; after
                                                step 2 a DCP checkpoint (weights + optimizer) in OUT/ckpt;
                                                the final weights, gathered, in OUT/weights.safetensors
    muon_ranks.py resume OUT CKPT               a model of another init, CKPT's weights and Muon state loaded
                                                (resharded to this world), step 3: OUT/resumed.safetensors

Every rank sees the step's 4 rows and runs rows rank, rank + N, ...; its loss is weighted by its share of
the rows and FSDP sums the ranks' gradients (training/runtime/distributed.py's rule), so the gradient is the
one-process one up to summation order."""

import sys
from pathlib import Path

import torch
import torch.distributed.checkpoint as dcp
from safetensors.torch import save_file
from torch.distributed.checkpoint.state_dict import (StateDictOptions, get_model_state_dict, get_optimizer_state_dict,
                                                     set_model_state_dict, set_optimizer_state_dict)

from test_muon import MUON_FP32, batch, loss_of, tiny_model
from passband.training.optim.optimizer import build_optimizer
from passband.training.runtime.distributed import close_process_group, open_process_group, rank, world_size


def shard(model: torch.nn.Module) -> torch.nn.Module:
    """As training/runtime/distributed.py shard_units: each decoder layer a unit, then the root; summed gradients."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh("cpu", (world_size(),))
    for layer in model.model.layers:
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    for unit in [*model.model.layers, model]:
        unit.set_gradient_divide_factor(1.0)
        unit.set_force_sum_reduction_for_comms(True)
    return model


def step(model: torch.nn.Module, optimizer: torch.optim.Optimizer, seed: int) -> None:
    ids = batch(seed)
    mine = ids[rank()::world_size()]
    optimizer.zero_grad()
    (loss_of(model, mine) * len(mine) / len(ids)).backward()
    optimizer.step()


def save_weights(model: torch.nn.Module, path: Path) -> None:
    full = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    if rank() == 0:
        save_file({name: tensor.detach().clone().contiguous() for name, tensor in full.items()}, str(path))


def trainer(seed: int, matrices_per_rank: int) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    model = tiny_model(seed)
    if world_size() > 1:
        shard(model)
    config = MUON_FP32.model_copy(update={"matrices_per_rank": matrices_per_rank})
    return model, build_optimizer(model, config, lr=0.02, weight_decay=0.1)


def main(mode: str, out: Path, arg: str) -> None:
    open_process_group(300.0)
    if mode == "train":
        model, optimizer = trainer(0, int(arg))
        for seed in (1, 2):
            step(model, optimizer, seed)
        dcp.save({"model": get_model_state_dict(model), "optimizer": get_optimizer_state_dict(model, optimizer)},
                 checkpoint_id=out / "ckpt")
        step(model, optimizer, 3)
        save_weights(model, out / "weights.safetensors")
    else:
        model, optimizer = trainer(5, 1)
        state = {"model": get_model_state_dict(model), "optimizer": get_optimizer_state_dict(model, optimizer)}
        dcp.load(state, checkpoint_id=Path(arg))  # in place, resharded to this world
        set_model_state_dict(model, state["model"])
        set_optimizer_state_dict(model, optimizer, state["optimizer"])
        step(model, optimizer, 3)
        save_weights(model, out / "resumed.safetensors")
    del model, optimizer
    close_process_group()


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]), sys.argv[3])
