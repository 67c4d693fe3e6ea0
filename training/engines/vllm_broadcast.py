"""Weights by NCCL broadcast, on CUDA: the trainer ranks send each update straight into the flow's
vLLM engine on its own GPU, instead of publishing a version to disk for the engine to read
(versions.py; `EngineConfig.weight_transfer`).

Built on vLLM's weight-transfer API (vllm.distributed.weight_transfer): its
`NCCLTrainerWeightTransferEngine` on the ranks sends a `WeightSource`, and the engine's workers
receive with its `NCCLWeightTransferEngine` (`init_weight_transfer_engine`, `start_weight_update`,
`update_weights`, `finish_weight_update`, reached through `collective_rpc`). vLLM's trainer engine
also drives the engine's half through a client from the sending rank; here the flow drives it
(it holds the engine and already orders every request to the ranks), so the ranks get
`FlowDrivenClient`, whose calls do nothing, and the flow makes the same four calls on the engine
in the same order (`receive_broadcast`).

What travels is what the disk path writes (engine_dtype.py): every parameter once (a tied head
under its first name), cast to the engine's dtype on the sender's device. The fp32 head is not
built on this path: vLLM's loader casts what it receives into the engine's parameters, so the
head's fp32 values would not survive (`lm_head_fp32` with `nccl` is refused by the RL config).

Never run here: no CUDA on the machines this was written on. Its bookkeeping (what the source
declares and yields, the update info the engine is told, the order of the calls) is tested on CPU
(tests/test_weight_broadcast.py); scripts/gpu_check.py measures it where a GPU is lent.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import torch
from vllm.distributed.weight_transfer.base import ParamMeta, WeightSource, materialize_full_tensor


@dataclass(frozen=True)
class BroadcastEndpoint:
    """Where the ranks' sender and the engine's workers meet (a TCPStore rendezvous)."""

    master_address: str
    master_port: int
    world_size: int
    """The sending rank plus every engine worker (tensor x data parallel size)."""

    def worker_init_info(self) -> dict[str, Any]:
        """The engine workers' init info: ranks 1..world_size - 1 after the sender, packed as the sender sends."""
        from vllm.distributed.weight_transfer.nccl_common import NCCLWeightTransferInitInfo, worker_init_payload

        return worker_init_payload(NCCLWeightTransferInitInfo(
            master_address=self.master_address, master_port=self.master_port, rank_offset=1,
            world_size=self.world_size, packed=True))


class EngineDtypeSource(WeightSource):
    """The policy's parameters in the engine's dtype: `(name, tensor)` as the disk path writes them
    (one name per tensor, a tied head under its first), each cast on the device it lives on, then
    moved to `device` (the sender's GPU, for NCCL; a single rank's policy may live in host memory).
    The model may be sharded by FSDP2: iterating all-gathers each parameter (a collective every
    rank runs in the same order), reading the metadata gathers nothing."""

    def __init__(self, model: torch.nn.Module, dtype: torch.dtype, device: torch.device | None = None):
        self.model = model
        self.dtype = dtype
        self.device = device

    def metadata(self) -> list[ParamMeta]:
        # named_parameters yields a tied tensor once, under its first name, as state_dict dedup does
        return [ParamMeta(name, self.dtype, tuple(parameter.shape)) for name, parameter in self.model.named_parameters()]

    def __iter__(self) -> Iterator[tuple[str, torch.Tensor]]:
        for name, parameter in self.model.named_parameters():
            cast = materialize_full_tensor(parameter.detach()).to(self.dtype)
            yield name, cast.to(self.device or cast.device).contiguous()


def update_info(metadata: list[ParamMeta]) -> dict[str, Any]:
    """What the engine's `update_weights` is told of one round (vLLM's NCCLWeightTransferUpdateInfo
    fields): it sizes its receive buffers and cuts the packed stream by these."""
    return {"names": [meta.name for meta in metadata],
            "dtype_names": [str(meta.dtype).removeprefix("torch.") for meta in metadata],
            "shapes": [list(meta.shape) for meta in metadata]}


class FlowDrivenClient:
    """The sending rank's client of vLLM's trainer engine: every call does nothing, because the
    flow makes the same calls on the engine it holds, in the same order (`receive_broadcast`)."""

    def init_weight_transfer_engine(self, init_info: dict[str, Any]) -> None:
        """The flow's `connect_engine` does it, while the ranks open their endpoint."""

    def start_weight_update(self) -> None:
        """The flow's `receive_broadcast` does it before it asks the ranks to send."""

    def update_weights(self, update_info: dict[str, Any]) -> None:
        """The flow's `receive_broadcast` does it, concurrently with the ranks' send."""

    def finish_weight_update(self, weight_version: str | None = None) -> None:
        """The flow's `receive_broadcast` does it once the ranks have sent."""


def open_sender(model: torch.nn.Module, dtype: torch.dtype, endpoint: BroadcastEndpoint, rank: int) -> Any:
    """vLLM's NCCL trainer engine on this rank over `EngineDtypeSource(model, dtype)`: rank 0 joins
    the rendezvous as the sender (it blocks until the engine's workers join too); every rank
    takes part in each send's gathers. Its `send_weights()` sends one round."""
    from vllm.distributed.weight_transfer.nccl_engine import NCCLTrainerInitInfo, NCCLTrainerWeightTransferEngine

    device = torch.device("cuda", torch.cuda.current_device())
    init = NCCLTrainerInitInfo(master_address=endpoint.master_address, master_port=endpoint.master_port,
                               world_size=endpoint.world_size, rank=rank, packed=True)
    return NCCLTrainerWeightTransferEngine.trainer_init(init, client=FlowDrivenClient(),
                                                        source=EngineDtypeSource(model, dtype, device))


def connect_engine(rpc: Callable[..., Any], endpoint: BroadcastEndpoint, open_sender_side: Callable[[], Any]) -> Any:
    """Join the engine's workers (`rpc`: the engine's collective_rpc) to the ranks' sender: both
    block in one rendezvous, so the workers' half runs on a thread while `open_sender_side()`
    (the request that has the ranks open theirs) runs here; what it returns."""
    return _beside(rpc, "init_weight_transfer_engine", {"init_info": endpoint.worker_init_info()}, open_sender_side)


def receive_broadcast(rpc: Callable[..., Any], info: dict[str, Any], send: Callable[[], Any]) -> Any:
    """One round into the engine (`rpc`: its collective_rpc), in vLLM's order: start, then its
    workers' receive on a thread while `send()` (the request that has the ranks send) runs here,
    then finish; what `send()` returns."""
    rpc("start_weight_update")
    answer = _beside(rpc, "update_weights", {"update_info": info}, send)
    rpc("finish_weight_update")
    return answer


def _beside(rpc: Callable[..., Any], method: str, kwargs: dict[str, Any], counterpart: Callable[[], Any]) -> Any:
    """`rpc(method, kwargs=kwargs)` on a thread while `counterpart()` runs here (the two meet in
    NCCL calls); what `counterpart()` returns, once both are done. A counterpart that raises
    leaves the engine's workers inside the NCCL call, so its error goes out without waiting on
    them, as vLLM's own trainer engine does (the transfer group is unusable after it)."""
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"engine-{method}")
    try:
        engine_side = pool.submit(rpc, method, kwargs=kwargs)
        answer = counterpart()
        engine_side.result()
    finally:
        pool.shutdown(wait=False)
    return answer
