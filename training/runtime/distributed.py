"""FSDP2 under torchrun, on the trainer mesh (training/runtime/mesh.py); a no-op in a single process.

Launch (one node, 8 GPUs; the config file is described in training/sft/launch.py):
    torchrun --standalone --nproc_per_node 8 -m passband.training.sft.launch stage.yaml
Several nodes: the same on each node i of N, with the rendezvous at node 0's host:port
(tasks/steps/trainer_nodes.py: torchrun_command builds it from `DistributedConfig`):
    torchrun --nnodes N --node_rank i --rdzv_backend static --rdzv_endpoint host:port --nproc_per_node 8 ...
torchrun sets WORLD_SIZE/RANK/LOCAL_RANK/GROUP_RANK; with WORLD_SIZE == 1 (or unset) nothing here runs.

The mesh: `open_process_group` takes the mesh's degrees (replicate x shard x sequence_parallel; by default
one flat shard dimension over every rank, FSDP as before) and `trainer_mesh` builds it once per device type.
With replicate > 1 fully_shard gets a 2-D mesh (HSDP): sharded within a replica, replicated across.

What is sharded: every decoder layer is its own FSDP unit (all-gathered just before it runs,
freed after), then the root `PackedLMLoss` wrapper, so the embeddings, final norm and the tied
head are gathered for the whole forward *including the chunked loss*, whose head weight is used
outside the decoder. That is why the loop calls the wrapper and never `lm.base_model` directly.

One optimizer step under N data-parallel ranks (replicate x shard; the ranks of one sequence-parallel
group count as one, `mesh.data_parallel_ranks`): every rank samples the same step (same seed, same sampler
state) and packs it into the same micro-batches as one process would; rank r runs micro-batches
r, r+N, r+2N, ... (`rank_micro_batches`). Ranks left one short run a copy of the last micro-batch
with weight 0: FSDP's all-gathers and reduce-scatters are collectives, so every rank must run
the same number of forward/backward passes or they hang. Each micro-batch's summed loss is
divided by the *whole step's* loss-token count (known on every rank, since every rank sees the
step's examples: no all-reduce needed) and gradients are *summed* across ranks, not averaged, so
the gradient is the one-process gradient of the whole step up to float summation order.

Start-up without a full copy on every rank (training/runtime/meta_init.py): each rank builds the model on
the `meta` device, `shard_for_training` shards it, and rank 0 alone reads the weights and
broadcasts them, each rank keeping its shard (or each rank reads its shards of a checkpoint). Checkpoints are sharded
(training/runtime/checkpoint_shards.py): each rank writes its shards of the weights and AdamW state with
torch.distributed.checkpoint, rank 0 the HF export of the weights beside them; a resume reshards
them to its own number of ranks, one included (local disk under --standalone, shared storage
across nodes).

tests/test_sft_torchrun.py runs this on 2 CPU ranks (gloo: FSDP2 works there) against one
process; NCCL on GPUs is the same code with the backend torch picks for CUDA tensors.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import torch

from passband.training.runtime.mesh import MeshShape

if TYPE_CHECKING:
    from torch.distributed.device_mesh import DeviceMesh

_OPEN: dict[str, Any] = {"shape": None, "collective_timeout_s": 600.0, "meshes": {}}
"""This process's trainer mesh: the degrees `open_process_group` was given and the meshes built from them (one
per device type). Process state, like torch's own default process group: every rank opens one group and one mesh."""


def world_size() -> int:
    return int(os.environ.get("WORLD_SIZE", "1"))


def data_parallel_size() -> int:
    """Ranks that see different samples (replicate x shard of the mesh the process group was opened with; an SP
    group's ranks share their samples): what a step's micro-batches are dealt over. 1 in one process."""
    shape = _OPEN["shape"]
    return world_size() if shape is None else shape.data_parallel


def sequence_parallel_size() -> int:
    """Ranks that split each sequence along its tokens (the mesh's sequence_parallel; 1 in one process)."""
    return world_size() // data_parallel_size()


def rank() -> int:
    return int(os.environ.get("RANK", "0"))


def node_rank() -> int:
    """This rank's node, 0 .. nnodes - 1 (torchrun's GROUP_RANK; 0 in one process)."""
    return int(os.environ.get("GROUP_RANK", "0"))


def where() -> str:
    """`node N rank R of W`: how an error names the rank it happened on."""
    return f"node {node_rank()} rank {rank()} of {world_size()}"


def failure_line(what: str, error: BaseException, collective_timeout_s: float) -> str:
    """One line naming the node and rank `error` happened on: what a rank that noticed a dead or hung peer
    says (the flow's launchers find it in the ranks' stderr: tasks/steps/trainer_nodes.py, rank_failure)."""
    first = str(error).strip().splitlines()[0] if str(error).strip() else ""
    return (f"{where()}: {what} failed: {type(error).__name__}: {first} (a collective raises after "
            f"collective_timeout_s = {collective_timeout_s:g} s, or at once, when another rank hung or died)")


def open_process_group(collective_timeout_s: float, mesh: MeshShape | None = None) -> None:
    """This rank's process group (gloo on CPU, nccl on CUDA: torch's default for the device), every
    collective bounded by `collective_timeout_s`: a rank that hangs or dies makes the others' next
    collective raise within it, rather than wait forever. Under torchrun the rank dies with it
    (`die_with_torchrun`). A no-op in one process or once open. `mesh`: the trainer mesh's degrees
    (`trainer_mesh` builds it); None, one flat shard dimension over every rank."""
    from datetime import timedelta

    if "LOCAL_RANK" in os.environ:
        die_with_torchrun()
    _OPEN.update(shape=mesh, collective_timeout_s=collective_timeout_s)
    if world_size() > 1 and not torch.distributed.is_initialized():
        torch.distributed.init_process_group(timeout=timedelta(seconds=collective_timeout_s))


def trainer_mesh(device_type: str) -> DeviceMesh | None:
    """This process's trainer mesh on `device_type` ("cpu", "cuda": the trainer's device), built on first use
    from the degrees `open_process_group` got (training/runtime/mesh.py); None when no process group is open
    (one process). What a feature asks for its group: `mesh.sequence_parallel_group(trainer_mesh(...))`.
    A collective the first time: every rank calls it."""
    from passband.training.runtime.mesh import build_mesh

    if not torch.distributed.is_initialized():
        return None
    if device_type not in _OPEN["meshes"]:
        shape = _OPEN["shape"] or MeshShape(shard=torch.distributed.get_world_size())
        _OPEN["meshes"][device_type] = build_mesh(shape, device_type, _OPEN["collective_timeout_s"])
    return _OPEN["meshes"][device_type]


def die_with_torchrun() -> None:
    """SIGKILL this rank when torchrun, its parent, dies. torchrun starts each rank in a session of
    its own, so killing torchrun's process group misses the ranks, and torchrun's own SIGTERM is
    never handled by a rank that is stopped or hung: without this such a rank outlives everything,
    holding its stdout pipe (and the flow's reader) open. Linux's PR_SET_PDEATHSIG."""
    import ctypes
    import signal

    parent = os.getppid()
    pr_set_pdeathsig = 1
    if ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
    if os.getppid() != parent:  # torchrun died before the prctl took hold
        os.kill(os.getpid(), signal.SIGKILL)


def reshard_units(model: torch.nn.Module) -> None:
    """Free every FSDP unit's gathered parameters, so the next forward gathers the shards as they are now.

    FSDP2 does not reshard the root unit after its forward (backward would gather it again at once), so a
    forward under no_grad with no backward after it (the RL update's scoring of theta_k, its closing
    metrics) leaves the root's embedding, final norm and LM head gathered; the next forward then skips the
    gather and reads those copies, stale once the optimizer has stepped the shards. Publishing the weights
    (a full state dict) happened to reshard them; the NCCL broadcast path publishes nothing, and drifted
    8.5e-3 from one process in three updates."""
    from torch.distributed.fsdp import FSDPModule

    for unit in model.modules():
        if isinstance(unit, FSDPModule):
            unit.reshard()


def shard_for_training(loss_module: torch.nn.Module, device: torch.device, precision: str = "fp32",
                       mesh: DeviceMesh | None = None) -> torch.nn.Module:
    """Wrap a `PackedLMLoss` with fully_shard when WORLD_SIZE > 1; return it unchanged otherwise.
    `mesh`: the trainer mesh (None: this process's, `trainer_mesh`); parameters are sharded over its
    `fsdp_mesh` (shard x sp merged; HSDP, replicated across `replicate`, when that is above 1).

    fully_shard moves the parameters to `device` (the trainer's `resolve_device`: cuda:LOCAL_RANK
    when it is CUDA). A model built on `meta` (training/runtime/meta_init.py) stays there, sharded, until
    `fill_weights` gives each rank its shards. The process group is already open
    (`open_process_group`, with its collective timeout).

    `precision` bf16_autocast: each decoder layer is gathered and computed in bf16 and its gradients
    reduced in fp32 (FSDP2's MixedPrecisionPolicy), over fp32 shards and fp32 AdamW; the root unit
    (embedding, final norm, LM head) stays fp32, so log-probs come from an fp32 head as in one process.
    Half the bytes of every all-gather; the layers' residual stream is then bf16 (in one process
    autocast keeps it fp32), so ranks and one process agree to bf16's rounding, not bit for bit.
    """
    if world_size() == 1:
        return loss_module
    return shard_units(loss_module, device, precision, mesh)


def shard_units(loss_module: torch.nn.Module, device: torch.device, precision: str = "fp32",
                mesh: DeviceMesh | None = None) -> torch.nn.Module:
    """`shard_for_training`'s sharding itself, over the trainer mesh of the open process group (`mesh`, else
    `trainer_mesh`), a group of one included: the GPU check runs a step on one FSDP2 rank this way
    (scripts/gpu_check_trainers.py)."""
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    from passband.training.runtime.mesh import fsdp_mesh

    if device.type == "cuda":
        torch.cuda.set_device(device)
    mesh = fsdp_mesh(mesh or trainer_mesh(device.type))
    layers = list(loss_module.lm.base_model.layers)
    layer_policy = (MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
                    if precision == "bf16_autocast" else MixedPrecisionPolicy())
    for layer in layers:
        fully_shard(layer, mesh=mesh, mp_policy=layer_policy)
    fully_shard(loss_module, mesh=mesh)  # fp32: embedding, final norm, LM head
    units = [*layers, loss_module]
    for unit in units:
        # Each rank's loss is already divided by the whole step's token count, so the ranks'
        # gradients add up to the step's gradient: sum them (FSDP averages by default), within a
        # replica (reduce-scatter over shard x sp: an SP rank's gradient is its tokens' share) and
        # across replicas (HSDP's all-reduce: a replica's gradient is its micro-batches' share).
        # Forcing plain SUM collectives also keeps gloo working (a custom divide factor needs PREMUL_SUM).
        unit.set_gradient_divide_factor(1.0)
        unit.set_force_sum_reduction_for_comms(True)
    return loss_module


def full_norm(norm: torch.Tensor) -> torch.Tensor:
    """clip_grad_norm_'s result as a plain tensor: a replicated DTensor over sharded gradients (of any
    number of ranks: the GPU check shards onto one), the tensor itself in one process."""
    from torch.distributed.tensor import DTensor

    return norm.full_tensor() if isinstance(norm, DTensor) else norm


def rank_micro_batches(num_micro_batches: int, num_ranks: int, this_rank: int) -> list[tuple[int, bool]]:
    """(micro-batch index, counts) pairs that `this_rank` runs in one step.

    Round-robin: rank r takes r, r + num_ranks, ...; a rank with fewer than
    ceil(num_micro_batches / num_ranks) pads with the last micro-batch, counts=False (its loss is
    multiplied by 0), so every rank runs the same number of passes. One rank runs them all, in order.
    """
    per_rank = -(-num_micro_batches // num_ranks)
    own = [(index, True) for index in range(this_rank, num_micro_batches, num_ranks)]
    return own + [(num_micro_batches - 1, False)] * (per_rank - len(own))


def optimizer_state_by_name(state: dict[str, Any], names: list[str]) -> dict[str, Any]:
    """optimizer.state_dict() (keyed by parameter index) -> keyed by parameter name, as
    torch.distributed.checkpoint's set_optimizer_state_dict wants. names[i] is parameter i."""
    return {
        "state": {names[index]: value for index, value in state["state"].items()},
        "param_groups": [{**group, "params": [names[i] for i in group["params"]]} for group in state["param_groups"]],
    }


def optimizer_state_by_index(state: dict[str, Any], names: list[str]) -> dict[str, Any]:
    """Inverse of `optimizer_state_by_name`: the layout a one-process optimizer.state_dict() has."""
    index = {name: i for i, name in enumerate(names)}
    return {
        "state": {index[name]: value for name, value in state["state"].items()},
        "param_groups": [{**group, "params": [index[n] for n in group["params"]]} for group in state["param_groups"]],
    }


def parameter_names(model: torch.nn.Module) -> list[str]:
    """Names in the order of model.parameters() (tied aliases once), i.e. the optimizer's indices."""
    return [name for name, _ in model.named_parameters()]


def close_process_group() -> None:
    """The end of a torchrun entry point: a no-op in one process.

    Free the sharded model (its DTensors hold the process group) and let every rank arrive
    before the group goes: a gloo group torn down by interpreter finalization instead, with
    a peer already gone, aborted a rank (SIGABRT, "terminate called without an active
    exception") in a flow-launched run.
    """
    if torch.distributed.is_initialized():
        import gc

        _OPEN["meshes"].clear()  # the meshes hold their sub-groups
        gc.collect()
        torch.distributed.barrier()
        torch.distributed.destroy_process_group()
